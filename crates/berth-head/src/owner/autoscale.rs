//! The autoscaler's bookkeeping, in the owner: what it launched, which nodes are idle, what it
//! decided. The autoscaler task (`crate::autoscaler`) asks for a round every second; a round
//! plans with [`berth_autoscaler::plan`] on the live cluster and queue, drains the nodes
//! [`berth_autoscaler::scale_down`] picks, and answers with what the provider must create and
//! delete, once the round's records are durable: a node is recorded as launching before the
//! provider is asked to create it, so a head restarted mid-launch never launches it again.

use std::collections::{BTreeMap, HashMap, VecDeque};

use berth_api::rest::{
    AutoscaledNode, AutoscalerDecision, AutoscalerPlan, AutoscalerStatus, NodeState as ApiState,
    NodeTypeStatus,
};
use berth_api::spec::node_types::{AutoscalerSettings, NodeType, ProviderSettings};
use berth_autoscaler::{Fleet, IdleNode, Plan, Want};
use berth_store::{Batch, Snapshot, Table};
use serde::{Deserialize, Serialize};

use super::Owner;
use crate::clock::now_ms;
use crate::command::{AutoscaleActions as Actions, AutoscaleOutcome as Outcome};
use crate::records::encode;
use berth_api::ObjectKind;

/// `Meta` keys of the launch records: this prefix, then the node ID.
const RECORD_PREFIX: &str = "autoscaler.node.";
/// Decisions kept for the status.
const MAX_DECISIONS: usize = 50;
/// The longest a type waits after failed launches before it is launched again.
const MAX_COOLDOWN_MS: u64 = 300_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RecordState {
    /// Asked for; not registered yet.
    Launching,
    /// Registered.
    Alive,
    /// Drained for idleness; the provider is deleting it.
    Removing,
}

/// One autoscaled node, as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LaunchRecord {
    node_type: String,
    state: RecordState,
    launched_at_ms: u64,
    /// When the provider said it created the machine: `launch_timeout_s` counts from here (a
    /// machine cannot register before it exists). A record reloaded without it counts from the
    /// reload: the create it was waiting for was lost with the old head.
    #[serde(default)]
    created_at_ms: Option<u64>,
    #[serde(default)]
    output: String,
}

/// The autoscaler's state in the owner.
pub(crate) struct Autoscaler {
    settings: AutoscalerSettings,
    records: BTreeMap<String, LaunchRecord>,
    /// Records to write (or delete, when gone from `records`) with this cycle.
    changed: Vec<String>,
    idle_since: HashMap<String, u64>,
    last_plan: Option<AutoscalerPlan>,
    decisions: VecDeque<AutoscalerDecision>,
    counters: BTreeMap<String, u64>,
    /// Per type, failed launches in a row and the time before which it is not launched.
    cooldown: HashMap<String, (u32, u64)>,
    /// Nodes whose delete the provider is running (a `Removing` record without one, reloaded
    /// after a restart, is deleted again).
    deleting: std::collections::HashSet<String>,
    next_id: u64,
}

impl Autoscaler {
    pub(crate) fn new(settings: AutoscalerSettings) -> Autoscaler {
        Autoscaler {
            settings,
            records: BTreeMap::new(),
            changed: Vec::new(),
            idle_since: HashMap::new(),
            last_plan: None,
            decisions: VecDeque::new(),
            counters: BTreeMap::new(),
            cooldown: HashMap::new(),
            deleting: Default::default(),
            // IDs must not repeat across restarts: start from the clock.
            next_id: now_ms(),
        }
    }

    fn node_type(&self, name: &str) -> Option<&NodeType> {
        self.settings.node_types.iter().find(|t| t.name == name)
    }

    fn decide(&mut self, action: &str, node_id: &str, node_type: &str, reason: String) {
        if self.decisions.len() == MAX_DECISIONS {
            self.decisions.pop_front();
        }
        tracing::info!(action, node = node_id, node_type, reason = %reason, "autoscaler");
        self.decisions.push_back(AutoscalerDecision {
            at_ms: now_ms(),
            action: action.to_string(),
            node_id: node_id.to_string(),
            node_type: node_type.to_string(),
            reason,
        });
    }

    fn count(&mut self, event: &str) {
        *self.counters.entry(event.to_string()).or_insert(0) += 1;
    }

    fn set(&mut self, node_id: &str, record: Option<LaunchRecord>) {
        match record {
            Some(record) => self.records.insert(node_id.to_string(), record),
            None => self.records.remove(node_id),
        };
        self.changed.push(node_id.to_string());
    }

    /// The settings the planner gets: types cooling down after failed launches are held at
    /// the nodes they have.
    fn planning_settings(&self, now: u64) -> AutoscalerSettings {
        let mut settings = self.settings.clone();
        for t in &mut settings.node_types {
            if self.cooldown.get(&t.name).is_some_and(|(_, until)| *until > now) {
                let have = self.records.values().filter(|r| r.node_type == t.name).count();
                t.max_nodes = t.max_nodes.min(have as u32);
            }
        }
        settings
    }
}

impl Owner {
    /// Reloads the launch records (the autoscaler configured now decides what they mean).
    pub(crate) fn restore_autoscaler(&mut self, snapshot: &Snapshot, skipped: &mut Vec<String>) {
        let Some(autoscaler) = self.autoscaler.as_mut() else { return };
        for (key, bytes) in snapshot.table(Table::Meta).range(RECORD_PREFIX.to_string()..) {
            let Some(node_id) = key.strip_prefix(RECORD_PREFIX) else { break };
            match serde_json::from_slice::<LaunchRecord>(bytes) {
                Ok(mut record) => {
                    record.created_at_ms.get_or_insert_with(now_ms);
                    autoscaler.records.insert(node_id.to_string(), record);
                }
                Err(err) => skipped.push(format!("{} {key}: {err}", Table::Meta)),
            }
        }
    }

    /// Adds the launch records changed this cycle to `batch`.
    pub(crate) fn write_autoscaler(&mut self, batch: &mut Batch) {
        let Some(autoscaler) = self.autoscaler.as_mut() else { return };
        for node_id in std::mem::take(&mut autoscaler.changed) {
            let key = format!("{RECORD_PREFIX}{node_id}");
            match autoscaler.records.get(&node_id) {
                Some(record) => batch.put(Table::Meta, key, encode(record)),
                None => batch.delete(Table::Meta, key),
            };
        }
    }

    /// One round: follow the nodes, plan, launch, remove idle nodes.
    pub(crate) fn autoscale(&mut self) -> Actions {
        let mut actions = Actions::default();
        let Some(mut autoscaler) = self.autoscaler.take() else { return actions };
        let now = now_ms();
        self.follow_autoscaled(&mut autoscaler, now, &mut actions);
        let fleet = fleet(&autoscaler);
        let needs_min = autoscaler.settings.node_types.iter().any(|t| {
            let have = autoscaler.records.values().filter(|r| r.node_type == t.name).count();
            (have as u32) < t.min_nodes
        });
        if needs_min || !self.queue.is_empty() || self.groups.any_waiting() {
            let settings = autoscaler.planning_settings(now);
            let plan = self.plan_with(&settings, &fleet);
            // A node the plan puts waiting work on is not idle, whatever it holds now.
            for node_id in &plan.used {
                autoscaler.idle_since.remove(node_id);
            }
            for launch in &plan.launch {
                autoscaler.next_id += 1;
                let node_id = format!("{}-{}", launch.node_type, base36(autoscaler.next_id));
                let Some(t) = autoscaler.node_type(&launch.node_type).cloned() else { continue };
                autoscaler.set(
                    &node_id,
                    Some(LaunchRecord {
                        node_type: t.name.clone(),
                        state: RecordState::Launching,
                        launched_at_ms: now,
                        created_at_ms: None,
                        output: String::new(),
                    }),
                );
                autoscaler.decide("launch", &node_id, &t.name, launch.reason.clone());
                actions.create.push((node_id, t));
            }
            autoscaler.last_plan = Some(berth_autoscaler::answer(&plan, now));
        } else {
            autoscaler.last_plan = None;
        }
        self.scale_down(&mut autoscaler, now, &mut actions);
        self.autoscaler = Some(autoscaler);
        self.show_autoscaler();
        actions
    }

    /// Registered, lost and timed-out nodes; idle clocks.
    fn follow_autoscaled(&mut self, autoscaler: &mut Autoscaler, now: u64, actions: &mut Actions) {
        let timeout = autoscaler.settings.launch_timeout.as_millis() as u64;
        let ids: Vec<String> = autoscaler.records.keys().cloned().collect();
        for node_id in ids {
            let record = autoscaler.records[&node_id].clone();
            let node = self.nodes.get(&node_id);
            let state = node.map(|n| n.record.node.state);
            match record.state {
                RecordState::Launching => {
                    if matches!(state, Some(ApiState::Alive)) {
                        let node_type = record.node_type.clone();
                        let mut record = record.clone();
                        record.state = RecordState::Alive;
                        autoscaler.set(&node_id, Some(record));
                        autoscaler.cooldown.remove(&node_type);
                        autoscaler.count("registered");
                        self.metrics.autoscaler_event("registered");
                        autoscaler.decide("registered", &node_id, &node_type, String::new());
                    } else if record
                        .created_at_ms
                        .is_some_and(|at| now.saturating_sub(at) > timeout)
                    {
                        autoscaler.set(&node_id, None);
                        autoscaler.count("given_up");
                        self.metrics.autoscaler_event("given_up");
                        let reason = format!(
                            "not registered {} s after it was created (launch_timeout_s); deleted",
                            timeout / 1000
                        );
                        autoscaler.decide("given_up", &node_id, &record.node_type, reason);
                        failed_type(autoscaler, &record.node_type, now);
                        autoscaler.deleting.insert(node_id.clone());
                        actions.delete.push((node_id.clone(), record.node_type.clone()));
                    }
                }
                RecordState::Alive => {
                    if !matches!(
                        state,
                        Some(ApiState::Alive | ApiState::Draining | ApiState::Suspect)
                    ) {
                        autoscaler.set(&node_id, None);
                        autoscaler.idle_since.remove(&node_id);
                        autoscaler.count("lost");
                        autoscaler.decide(
                            "lost",
                            &node_id,
                            &record.node_type,
                            "the node died or was removed".into(),
                        );
                        continue;
                    }
                    let idle = state == Some(ApiState::Alive) && self.is_idle(&node_id);
                    if idle {
                        autoscaler.idle_since.entry(node_id.clone()).or_insert(now);
                    } else {
                        autoscaler.idle_since.remove(&node_id);
                    }
                }
                RecordState::Removing => {
                    if autoscaler.deleting.insert(node_id.clone()) {
                        actions.delete.push((node_id.clone(), record.node_type.clone()));
                    }
                }
            }
        }
    }

    /// Nothing placed, reserved or running on the node.
    fn is_idle(&self, node_id: &str) -> bool {
        let Some(entry) = self.nodes.get(node_id) else { return false };
        let Some(node) = self.cluster.node(entry.index) else { return false };
        entry.actors == 0
            && entry.tasks == 0
            && node.available() == node.total()
            && !self.cluster.groups().any(|g| {
                g.bundles.iter().any(|b| {
                    matches!(b, berth_core::placement_group::BundleState::Reserved(l) if l.node == entry.index)
                })
            })
    }

    fn scale_down(&mut self, autoscaler: &mut Autoscaler, now: u64, actions: &mut Actions) {
        let mut alive: BTreeMap<String, u32> = BTreeMap::new();
        let mut idle = Vec::new();
        for (node_id, record) in &autoscaler.records {
            if record.state != RecordState::Alive {
                continue;
            }
            *alive.entry(record.node_type.clone()).or_insert(0) += 1;
            if let Some(since) = autoscaler.idle_since.get(node_id) {
                idle.push(IdleNode {
                    id: node_id.clone(),
                    node_type: record.node_type.clone(),
                    idle_for: std::time::Duration::from_millis(now.saturating_sub(*since)),
                });
            }
        }
        for node_id in berth_autoscaler::scale_down(&autoscaler.settings, &alive, &idle) {
            // Checked again now: idle clocks are per round, work may have come since.
            if !self.is_idle(&node_id) || self.drain_node(&node_id).is_err() {
                continue;
            }
            let mut record = autoscaler.records[&node_id].clone();
            record.state = RecordState::Removing;
            let node_type = record.node_type.clone();
            autoscaler.set(&node_id, Some(record));
            autoscaler.idle_since.remove(&node_id);
            let reason = format!(
                "idle for {} s (idle_timeout_s {})",
                idle.iter().find(|n| n.id == node_id).map_or(0, |n| n.idle_for.as_secs()),
                autoscaler.settings.idle_timeout.as_secs()
            );
            autoscaler.decide("remove", &node_id, &node_type, reason);
            autoscaler.deleting.insert(node_id.clone());
            actions.delete.push((node_id, node_type));
        }
    }

    /// The provider's answer.
    pub(crate) fn autoscale_outcome(&mut self, outcome: Outcome) {
        let Some(mut autoscaler) = self.autoscaler.take() else { return };
        let now = now_ms();
        match outcome {
            Outcome::Created { node_id, output } => {
                if let Some(mut record) = autoscaler.records.get(&node_id).cloned() {
                    record.output = output;
                    record.created_at_ms = Some(now);
                    autoscaler.set(&node_id, Some(record));
                }
                autoscaler.count("launched");
                self.metrics.autoscaler_event("launched");
            }
            Outcome::CreateFailed { node_id, error, output } => {
                let node_type = record_type(&autoscaler, &node_id);
                if autoscaler.records.contains_key(&node_id) {
                    autoscaler.set(&node_id, None);
                }
                autoscaler.count("failed");
                self.metrics.autoscaler_event("failed");
                let reason = if output.trim().is_empty() {
                    error
                } else {
                    format!("{error}; output: {}", output.trim())
                };
                autoscaler.decide("launch_failed", &node_id, &node_type, reason);
                failed_type(&mut autoscaler, &node_type, now);
            }
            Outcome::Deleted { node_id, output } => {
                autoscaler.deleting.remove(&node_id);
                let node_type = record_type(&autoscaler, &node_id);
                if autoscaler.records.contains_key(&node_id) {
                    autoscaler.set(&node_id, None);
                    autoscaler.count("removed");
                    self.metrics.autoscaler_event("removed");
                    autoscaler.decide("removed", &node_id, &node_type, output.trim().to_string());
                }
            }
            Outcome::DeleteFailed { node_id, error } => {
                autoscaler.deleting.remove(&node_id);
                let node_type = record_type(&autoscaler, &node_id);
                if autoscaler.records.contains_key(&node_id) {
                    // Left draining: nothing is placed there; an operator removes it.
                    autoscaler.set(&node_id, None);
                }
                autoscaler.decide("remove_failed", &node_id, &node_type, error);
            }
        }
        self.autoscaler = Some(autoscaler);
        self.show_autoscaler();
    }

    /// A dry run: the plan for what waits now, with `settings` (the configured ones when
    /// `None`). Changes nothing.
    pub(crate) fn autoscale_dry_run(
        &mut self,
        settings: Option<&AutoscalerSettings>,
    ) -> Option<AutoscalerPlan> {
        let (settings, fleet) = match (settings, &self.autoscaler) {
            (Some(settings), Some(a)) => (settings.clone(), fleet(a)),
            (Some(settings), None) => (settings.clone(), Fleet::default()),
            (None, Some(a)) => (a.planning_settings(now_ms()), fleet(a)),
            (None, None) => return None,
        };
        let plan = self.plan_with(&settings, &fleet);
        Some(berth_autoscaler::answer(&plan, now_ms()))
    }

    fn plan_with(&self, settings: &AutoscalerSettings, fleet: &Fleet) -> Plan {
        let keys: Vec<(String, &berth_core::Request)> =
            self.queue.iter().map(|q| (q.key.id(), &q.request)).collect();
        let groups: Vec<(String, &berth_core::placement_group::GroupSpec)> = self
            .groups
            .waiting()
            .filter_map(|seq| self.groups.get(seq).map(|g| (ObjectKind::Group.id(seq), &g.spec)))
            .collect();
        // Groups first, as the owner retries them.
        let wants: Vec<Want<'_>> = groups
            .iter()
            .map(|(key, spec)| Want::Group { key, spec })
            .chain(keys.iter().map(|(key, request)| Want::Request { key, request }))
            .collect();
        berth_autoscaler::plan(&self.cluster, self.scheduler.config(), settings, fleet, &wants)
    }

    /// Publishes the status in the view, and the gauges.
    pub(crate) fn show_autoscaler(&mut self) {
        let Some(autoscaler) = &self.autoscaler else { return };
        let settings = &autoscaler.settings;
        let mut nodes = Vec::new();
        let mut by_state: BTreeMap<&str, i64> =
            ["launching", "alive", "idle", "removing"].into_iter().map(|s| (s, 0)).collect();
        for (node_id, record) in &autoscaler.records {
            let idle_since_ms = autoscaler.idle_since.get(node_id).copied();
            let state = match (record.state, idle_since_ms) {
                (RecordState::Launching, _) => "launching",
                (RecordState::Alive, Some(_)) => "idle",
                (RecordState::Alive, None) => "alive",
                (RecordState::Removing, _) => "removing",
            };
            *by_state.entry(state).or_insert(0) += 1;
            nodes.push(AutoscaledNode {
                node_id: node_id.clone(),
                node_type: record.node_type.clone(),
                state: state.to_string(),
                launched_at_ms: record.launched_at_ms,
                idle_since_ms,
                output: record.output.clone(),
            });
        }
        for (state, n) in &by_state {
            self.metrics.set_autoscaler_nodes(state, *n);
        }
        let node_types = settings
            .node_types
            .iter()
            .map(|t| {
                let of = |state: &str| {
                    nodes.iter().filter(|n| n.node_type == t.name && n.state == state).count()
                        as u32
                };
                NodeTypeStatus {
                    name: t.name.clone(),
                    resources: t
                        .resources
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_string()))
                        .collect(),
                    labels: t.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                    taints: t.taints.iter().cloned().collect(),
                    min_nodes: t.min_nodes,
                    max_nodes: t.max_nodes,
                    alive: of("alive") + of("idle"),
                    launching: of("launching"),
                    idle: of("idle"),
                }
            })
            .collect();
        let status = AutoscalerStatus {
            enabled: true,
            provider: match settings.provider {
                ProviderSettings::Local => "local".into(),
                ProviderSettings::Command { .. } => "command".into(),
            },
            max_nodes: settings.max_nodes,
            idle_timeout_s: settings.idle_timeout.as_secs_f64(),
            upscaling_speed: settings.upscaling_speed,
            launch_timeout_s: settings.launch_timeout.as_secs_f64(),
            node_types,
            nodes,
            last_plan: autoscaler.last_plan.clone(),
            decisions: autoscaler.decisions.iter().cloned().collect(),
            counters: autoscaler.counters.clone(),
        };
        self.view.autoscaler = Some(std::sync::Arc::new(status));
    }
}

fn record_type(autoscaler: &Autoscaler, node_id: &str) -> String {
    autoscaler.records.get(node_id).map(|r| r.node_type.clone()).unwrap_or_default()
}

/// A failed launch holds its type back for a while, doubling per failure in a row.
fn failed_type(autoscaler: &mut Autoscaler, node_type: &str, now: u64) {
    if node_type.is_empty() {
        return;
    }
    let entry = autoscaler.cooldown.entry(node_type.to_string()).or_insert((0, 0));
    entry.0 += 1;
    let wait = (5_000u64 << (entry.0 - 1).min(10)).min(MAX_COOLDOWN_MS);
    entry.1 = now + wait;
}

fn fleet(autoscaler: &Autoscaler) -> Fleet {
    let mut fleet = Fleet::default();
    for (node_id, record) in &autoscaler.records {
        match record.state {
            RecordState::Launching => {
                fleet.launching.push((node_id.clone(), record.node_type.clone()));
            }
            // A node being removed still counts against the limits until it is gone.
            RecordState::Alive | RecordState::Removing => {
                *fleet.alive.entry(record.node_type.clone()).or_insert(0) += 1;
            }
        }
    }
    fleet
}

/// `n` in base 36, for short node IDs.
fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}
