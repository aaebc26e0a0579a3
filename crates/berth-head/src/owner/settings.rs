//! Cluster-wide settings the head keeps in the store (`Meta`), so that a restart without the
//! flag keeps them: rare-resource isolation (seed 004), given by `--rare-resource-isolation`.

use berth_store::{Batch, Snapshot, Table};

use super::Owner;
use crate::records::encode;

/// The `Meta` key of the rare-resource list (JSON, resource names).
const RARE_KEY: &str = "rare_resources";

impl Owner {
    /// Loads the stored rare resources; a configured list (`HeadConfig::rare_resources`)
    /// replaces them and is written with the first cycle when it differs. Applied before
    /// anything waits to be placed, so every decision sees the taints.
    pub(crate) fn restore_settings(&mut self, snapshot: &Snapshot, skipped: &mut Vec<String>) {
        let stored: Vec<String> = match snapshot.get(Table::Meta, RARE_KEY) {
            None => Vec::new(),
            Some(bytes) => serde_json::from_slice(bytes).unwrap_or_else(|err| {
                skipped.push(format!("{} {RARE_KEY}: {err}", Table::Meta));
                Vec::new()
            }),
        };
        let wanted = self.config.rare_resources.clone().unwrap_or_else(|| stored.clone());
        self.cycle.settings_changed = wanted != stored;
        let mut ids = Vec::with_capacity(wanted.len());
        for name in &wanted {
            match self.cluster.registry_mut().intern(name) {
                Ok(id) => ids.push(id),
                Err(err) => skipped.push(format!("rare resource {name}: {err}")),
            }
        }
        self.cluster.set_rare_resources(&ids);
        self.view.rare_resources = wanted;
    }

    /// Adds the settings to `batch` when they changed.
    pub(crate) fn write_settings(&mut self, batch: &mut Batch) {
        if std::mem::take(&mut self.cycle.settings_changed) {
            batch.put(Table::Meta, RARE_KEY, encode(&self.view.rare_resources));
        }
    }
}
