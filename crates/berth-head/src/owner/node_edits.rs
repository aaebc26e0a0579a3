//! What operators change on a running node: taints (seed 004), labels, resource capacity
//! (seed 002's dynamic resources), and drain.
//!
//! Each change is checked whole before anything changes (all or nothing), is durable with its
//! cycle like every other change, is shown at once, and re-decides the work waiting for it.
//! Work already running stays where it is, whatever the node now says: Kubernetes'
//! `IgnoredDuringExecution` for labels and taints, and for capacity, a total below what runs
//! leaves nothing available until enough of it ends.

use berth_api::rest::{self, NodeState as ApiNodeState, StringMap};
use berth_api::spec::label_error_text;
use berth_core::instances::MAX_INSTANCES;
use berth_core::labels::Labels;
use berth_core::{NodeIndex, NodeState, Quantity, Trigger};

use super::work_table::{Ending, WorkId};
use super::Owner;
use crate::error::HeadError;
use berth_api::limits::Limit;

impl Owner {
    /// Shows and writes the changed node, wakes what waits for it, and answers with it.
    fn edited(&mut self, id: &str, index: NodeIndex) -> rest::Node {
        self.cycle.trigger(Trigger::NodeChanged(index));
        self.cycle.mark_node(id);
        self.refresh_node(id);
        (*self.view.nodes[id]).clone()
    }

    pub(crate) fn change_taints(
        &mut self,
        node: &str,
        taints: &StringMap,
        add: bool,
    ) -> Result<rest::Node, HeadError> {
        let (id, index) = self.nodes.editable(node)?;
        if add {
            // Check every taint first: all or nothing.
            if let Some(key) =
                taints.keys().find(|k| k.starts_with(berth_core::labels::BERTH_PREFIX))
            {
                return Err(HeadError::invalid(
                    key.clone(),
                    "taint keys under berth.io/ are Berth's own (rare-resource isolation)",
                ));
            }
            for (key, value) in taints {
                self.cluster
                    .add_taint(index, key, value)
                    .map_err(|e| HeadError::invalid(key.clone(), e.to_string()))?;
                let record = &mut self.nodes.get_mut(&id).expect("found").record;
                if !record.taints.iter().any(|(k, v)| k == key && v == value) {
                    record.taints.push((key.clone(), value.clone()));
                }
            }
        } else {
            for (key, value) in taints {
                let record = &mut self.nodes.get_mut(&id).expect("found").record;
                let before = record.taints.len();
                record.taints.retain(|(k, v)| !(k == key && v == value));
                if record.taints.len() != before {
                    let _ = self.cluster.remove_taint(index, key, value);
                }
            }
        }
        let kind = if add { "taints_added" } else { "taints_removed" };
        self.nodes.event(&id, kind, pairs(taints));
        Ok(self.edited(&id, index))
    }

    /// Sets (`set`) and removes (`remove`) user labels of a node. Removing a key the node does
    /// not have is not an error; removing a user label that overrode a `berth.io/` default
    /// brings the default back.
    pub(crate) fn change_labels(
        &mut self,
        node: &str,
        set: &StringMap,
        remove: &[String],
    ) -> Result<rest::Node, HeadError> {
        let (id, index) = self.nodes.editable(node)?;
        let record = &self.nodes[&id].record;
        let mut user = record.user_labels.clone();
        for key in remove {
            user.remove(key);
        }
        user.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
        let most = self.config.limits.get(Limit::Labels);
        if user.len() > most {
            return Err(HeadError::invalid(
                "",
                format!(
                    "a node has at most {most} labels of its own ({}), and this change would \
                     leave {}",
                    Limit::Labels.counts(),
                    user.len()
                ),
            ));
        }
        let mut labels = Labels::new();
        for (key, value) in &user {
            labels
                .insert(key, value)
                .map_err(|e| HeadError::invalid(key.clone(), label_error_text("label", &e)))?;
        }
        let facts = record.node_facts();
        self.cluster
            .set_labels(index, facts, labels)
            .map_err(|e| HeadError::invalid(berth_core::labels::NODE_ID, e.to_string()))?;
        self.nodes.get_mut(&id).expect("found").record.user_labels = user;
        let mut message = pairs(set);
        if !remove.is_empty() {
            let removed = format!("removed {}", remove.join(", "));
            message = if message.is_empty() { removed } else { format!("{message}; {removed}") };
        }
        self.nodes.event(&id, "labels_changed", message);
        Ok(self.edited(&id, index))
    }

    /// Sets the totals of the named resources of a node (`"0"` deletes one); the others stay.
    /// GPUs (resources counted in instances) shrink from the highest instance.
    pub(crate) fn set_resources(
        &mut self,
        node: &str,
        resources: &StringMap,
    ) -> Result<rest::Node, HeadError> {
        let (id, index) = self.nodes.editable(node)?;
        let record = &self.nodes[&id].record;
        // Check everything first: all or nothing (and no name enters the registry for a
        // change that is refused whole).
        let names: std::collections::BTreeSet<&String> =
            record.resources.keys().chain(resources.keys()).collect();
        let most = self.config.limits.get(Limit::Resources);
        if names.len() > most {
            return Err(HeadError::invalid(
                "",
                format!(
                    "a node has at most {most} resources, and this change would leave {}",
                    names.len()
                ),
            ));
        }
        let mut changes = Vec::with_capacity(resources.len());
        for (name, amount) in resources {
            let invalid = |rule: String| HeadError::invalid(name.clone(), rule);
            if name.starts_with(berth_core::labels::BERTH_PREFIX) {
                return Err(invalid("resource names under berth.io/ are Berth's own".into()));
            }
            let total = Quantity::parse(amount).map_err(|e| invalid(e.to_string()))?;
            if total.is_zero() && !record.resources.contains_key(name) {
                return Err(invalid(format!("node {id} has no resource {name} to delete")));
            }
            let resource =
                self.cluster.registry_mut().intern(name).map_err(|e| invalid(e.to_string()))?;
            if self.cluster.registry().is_unit_instance(resource) {
                // What the core's set_capacity would refuse, refused before anything changes.
                if !total.is_whole() {
                    return Err(invalid(format!(
                        "{name} is counted in whole instances; {amount} is not whole"
                    )));
                }
                if total.whole() > MAX_INSTANCES {
                    return Err(invalid(format!(
                        "{amount} is over the {MAX_INSTANCES} instances a node may have"
                    )));
                }
            }
            changes.push((name, resource, total));
        }
        for (name, resource, total) in changes {
            self.cluster
                .set_capacity(index, resource, total)
                .map_err(|e| HeadError::invalid(name.clone(), e.to_string()))?;
            let record = &mut self.nodes.get_mut(&id).expect("found").record;
            if total.is_zero() {
                record.resources.remove(name);
            } else {
                record.resources.insert(name.clone(), total.to_string());
            }
        }
        self.nodes.event(&id, "resources_changed", pairs(resources));
        Ok(self.edited(&id, index))
    }

    /// A known node's agent registered again reporting `now` (name to normalized total):
    /// every resource it reports differently from its last registration takes the new total
    /// (absent: deleted); the others keep what they have, run-time changes included.
    pub(crate) fn capacity_reported(&mut self, node_id: &str, now: StringMap) {
        let entry = &self.nodes[node_id];
        let index = entry.index;
        let before =
            entry.record.reported.clone().unwrap_or_else(|| entry.record.resources.clone());
        let names: std::collections::BTreeSet<String> =
            before.keys().chain(now.keys()).cloned().collect();
        let mut changed = false;
        for name in names {
            let new = now.get(&name);
            if before.get(&name) == new {
                continue;
            }
            // Both were checked as a registration: they parse and intern.
            let total = new.map_or(Ok(Quantity::ZERO), |amount| Quantity::parse(amount));
            let resource = self.cluster.registry_mut().intern(&name);
            let applied = match (total, resource) {
                (Ok(total), Ok(resource)) => {
                    self.cluster.set_capacity(index, resource, total).map_err(|e| e.to_string())
                }
                (Err(e), _) => Err(e.to_string()),
                (_, Err(e)) => Err(e.to_string()),
            };
            if let Err(err) = applied {
                tracing::warn!(node = node_id, resource = %name, "reported capacity not applied: {err}");
                continue;
            }
            let record = &mut self.nodes.get_mut(node_id).expect("known").record;
            match new {
                Some(amount) => record.resources.insert(name, amount.clone()),
                None => record.resources.remove(&name),
            };
            changed = true;
        }
        self.nodes.get_mut(node_id).expect("known").record.reported = Some(now);
        if changed {
            self.cycle.trigger(Trigger::NodeChanged(index));
        }
        self.cycle.mark_node(node_id);
    }

    pub(crate) fn drain_node(&mut self, node: &str) -> Result<rest::Node, HeadError> {
        let (id, index) = self.nodes.editable(node)?;
        let entry = self.nodes.get_mut(&id).expect("found");
        if entry.record.node.state == ApiNodeState::Draining {
            self.refresh_node(&id);
            return Ok((*self.view.nodes[&id]).clone());
        }
        entry.record.node.state = ApiNodeState::Draining;
        // A suspect node stays suspect (it takes nothing new either way) until it is heard from.
        if !entry.suspect {
            let _ = self.cluster.set_state(index, NodeState::Draining);
        }
        self.nodes.event(&id, "draining", "takes no new work; its actors move".into());
        self.cycle.trigger(Trigger::NodeLost(index));
        // Actors move (a move is not a restart); tasks run to completion.
        let actors: Vec<WorkId> =
            self.work_on(&id).into_iter().filter(|k| matches!(k, WorkId::Actor(_))).collect();
        for key in actors {
            self.stop(key, "node draining");
            self.ended(key, Ending::Moved(format!("moved off draining node {id}")));
        }
        self.cycle.mark_node(&id);
        self.refresh_node(&id);
        Ok((*self.view.nodes[&id]).clone())
    }

    /// Ends a node's drain: it takes new work again, and the work waiting is decided again.
    /// An alive node is left as it is; a dead one cannot be undrained (its agent registers
    /// it again).
    pub(crate) fn undrain_node(&mut self, node: &str) -> Result<rest::Node, HeadError> {
        let (id, index) = self.nodes.editable(node)?;
        let entry = self.nodes.get_mut(&id).expect("found");
        if entry.record.node.state == ApiNodeState::Alive {
            self.refresh_node(&id);
            return Ok((*self.view.nodes[&id]).clone());
        }
        entry.record.node.state = ApiNodeState::Alive;
        if !entry.suspect {
            let _ = self.cluster.set_state(index, NodeState::Alive);
        }
        self.nodes.event(&id, "undrained", "takes new work again".into());
        Ok(self.edited(&id, index))
    }
}

/// `a=1, b=2`, for history entries.
fn pairs(map: &StringMap) -> String {
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}
