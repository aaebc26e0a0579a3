//! Taints: `key=value` marks on nodes that keep away every request without a matching
//! toleration (seed 004). Keys and values follow the label syntax.
//!
//! Taints are interned per cluster to small [`TaintId`]s, so that a rejection reason can name
//! the taint (`2 nodes have an untolerated taint gpu_node=true`) and still be a plain copyable
//! value on the hot path.
//!
//! Rare-resource isolation (seed 004's follow-on): a node that has a resource listed as rare
//! carries the taint `berth.io/rare-<resource>=true`, set and removed by the cluster as the
//! node's resources change; a request that asks for that resource tolerates it automatically.
//! Characters of the resource name that a label key cannot hold (`/`, `:`) become `-`.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use crate::labels::{validate_key, validate_value, LabelError, BERTH_PREFIX};
use crate::resource::{ResourceId, ResourceRegistry};

/// An interned taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaintId(u32);

/// One interned taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// Set for the automatic taint of a rare resource: the resource it stands for.
    pub rare_resource: Option<ResourceId>,
}

/// The taints a cluster has seen.
#[derive(Clone, Debug, Default)]
pub struct TaintTable {
    taints: Vec<Taint>,
    ids: FxHashMap<(String, String), TaintId>,
    /// Per ID, how many nodes carry the user taint. One no node carries is forgotten and its
    /// ID reused, so taints added and removed through the API over a long life (a dated
    /// `maintenance=2026-11-25`, say) do not grow the table for ever.
    users: Vec<u32>,
    /// IDs of forgotten user taints, reused lowest first.
    free: BTreeSet<u32>,
}

/// Checks a user taint: keys under `berth.io/` are Berth's own (rare-resource isolation), so
/// a user taint can never stand in for an automatic one; the rest follows the label syntax.
pub fn check_user_taint(key: &str, value: &str) -> Result<(), LabelError> {
    if key.starts_with(BERTH_PREFIX) {
        return Err(LabelError::Key {
            key: key.to_string(),
            rule: "taint keys under berth.io/ are set by Berth (rare-resource isolation) and cannot be given",
        });
    }
    validate_key(key)?;
    validate_value(key, value)
}

impl TaintTable {
    /// The ID of the user taint `key=value`, interning it after checking it
    /// ([`check_user_taint`]). The caller counts the nodes that carry it (`TaintTable::acquire`,
    /// `TaintTable::release`).
    pub fn intern(&mut self, key: &str, value: &str) -> Result<TaintId, LabelError> {
        if let Some(&id) = self.ids.get(&(key.to_string(), value.to_string())) {
            if self.get(id).rare_resource.is_none() {
                return Ok(id);
            }
        }
        check_user_taint(key, value)?;
        Ok(self.push(Taint { key: key.to_string(), value: value.to_string(), rare_resource: None }))
    }

    /// One more node carries `id`.
    pub(crate) fn acquire(&mut self, id: TaintId) {
        self.users[id.0 as usize] += 1;
    }

    /// One node fewer carries `id`; a user taint no node carries is forgotten (its ID may be
    /// given to another). Automatic taints stay: there is one per rare resource.
    pub(crate) fn release(&mut self, id: TaintId) {
        let slot = id.0 as usize;
        self.users[slot] = self.users[slot].saturating_sub(1);
        let taint = &self.taints[slot];
        if self.users[slot] == 0 && taint.rare_resource.is_none() {
            self.ids.remove(&(taint.key.clone(), taint.value.clone()));
            self.free.insert(id.0);
        }
    }

    /// Taints known now (carried by some node, or automatic).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no taint is known.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// IDs given so far, forgotten ones included (what the table's memory holds).
    pub fn capacity(&self) -> usize {
        self.taints.len()
    }

    /// The ID of the rare-resource taint of `resource`. Two resource names that map to the
    /// same key (`nvidia.com/t4`, `nvidia.com:t4`) get distinct keys: the later one is suffixed
    /// with its resource number.
    pub fn intern_rare(&mut self, resource: ResourceId, registry: &ResourceRegistry) -> TaintId {
        let mut key = rare_taint_key(registry.name(resource));
        if let Some(&id) = self.ids.get(&(key.clone(), "true".to_string())) {
            if self.get(id).rare_resource == Some(resource) {
                return id;
            }
            let suffix = format!("-r{}", resource.index());
            key.truncate(BERTH_PREFIX.len() + 63 - suffix.len());
            key = format!("{}{suffix}", key.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()));
            if let Some(&id) = self.ids.get(&(key.clone(), "true".to_string())) {
                return id;
            }
        }
        self.push(Taint { key, value: "true".to_string(), rare_resource: Some(resource) })
    }

    fn push(&mut self, taint: Taint) -> TaintId {
        let key = (taint.key.clone(), taint.value.clone());
        let id = match self.free.pop_first() {
            Some(slot) => {
                self.taints[slot as usize] = taint;
                self.users[slot as usize] = 0;
                TaintId(slot)
            }
            None => {
                self.taints.push(taint);
                self.users.push(0);
                TaintId(self.taints.len() as u32 - 1)
            }
        };
        self.ids.insert(key, id);
        id
    }

    /// The ID of `key=value` if known.
    pub fn lookup(&self, key: &str, value: &str) -> Option<TaintId> {
        self.ids.get(&(key.to_string(), value.to_string())).copied()
    }

    /// The taint behind `id`.
    pub fn get(&self, id: TaintId) -> &Taint {
        &self.taints[id.0 as usize]
    }
}

/// `berth.io/rare-<resource>`, with characters a key name cannot hold replaced by `-` and the
/// name cut to the 63 characters a key name may have.
pub fn rare_taint_key(resource: &str) -> String {
    let name: String = format!("rare-{resource}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .take(63)
        .collect();
    let name = name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("berth.io/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_intern_once_and_validate() {
        let mut table = TaintTable::default();
        let a = table.intern("gpu_node", "true").unwrap();
        assert_eq!(table.intern("gpu_node", "true"), Ok(a));
        assert_ne!(table.intern("gpu_node", "false").unwrap(), a);
        assert_eq!(table.get(a).key, "gpu_node");
        assert!(table.intern("bad key", "x").unwrap_err().to_string().contains("\"bad key\""));
        assert!(table.intern("k", "bad value").unwrap_err().to_string().contains("\"bad value\""));
    }

    #[test]
    fn rare_taint_keys_are_valid_label_keys() {
        assert_eq!(rare_taint_key("GPU"), "berth.io/rare-GPU");
        assert_eq!(rare_taint_key("nvidia.com/t4"), "berth.io/rare-nvidia.com-t4");
        assert_eq!(rare_taint_key("accelerator_type:A100"), "berth.io/rare-accelerator_type-A100");
        for name in ["GPU", "nvidia.com/t4", "x:", &"y".repeat(300)] {
            validate_key(&rare_taint_key(name)).unwrap();
        }
        let mut table = TaintTable::default();
        let registry = ResourceRegistry::default();
        let id = table.intern_rare(ResourceId::GPU, &registry);
        assert_eq!(table.get(id).rare_resource, Some(ResourceId::GPU));
        assert_eq!(table.intern_rare(ResourceId::GPU, &registry), id);
    }

    #[test]
    fn user_taints_cannot_take_berth_keys_and_rare_keys_never_collide() {
        let mut table = TaintTable::default();
        let err = table.intern("berth.io/rare-GPU", "true").unwrap_err().to_string();
        assert!(err.contains("set by Berth"), "{err}");
        let mut registry = ResourceRegistry::default();
        let slash = registry.intern("nvidia.com/t4").unwrap();
        let colon = registry.intern("nvidia.com:t4").unwrap();
        let a = table.intern_rare(slash, &registry);
        let b = table.intern_rare(colon, &registry);
        assert_ne!(a, b);
        assert_eq!(table.get(a).key, "berth.io/rare-nvidia.com-t4");
        assert_eq!(table.get(b).key, format!("berth.io/rare-nvidia.com-t4-r{}", colon.index()));
        assert_eq!(table.intern_rare(colon, &registry), b);
        validate_key(&table.get(b).key).unwrap();
    }
}
