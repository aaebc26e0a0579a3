//! Nodes: agents registering (sessions), assignment streams, heartbeats and liveness, status
//! reports and node death. What operators change on a node is in `node_edits.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use berth_api::agent::{
    status_report, RegisterReply, RegisterRequest, StatusReplies, StatusReply, StatusReport,
    StatusReports,
};
use berth_api::limits::Limit;
use berth_api::rest::{self, NodeState as ApiNodeState, StringMap};
use berth_api::spec::{check_taint, label_error_text, parse_labels_text};
use berth_core::cluster::NodeSpec;
use berth_core::labels::{Labels, NodeFacts};
use berth_core::{NodeId, NodeIndex, NodeState, Quantity, ResourceSet, Trigger};
use tokio::sync::mpsc;
use tonic::Status;

use super::convert;
use super::work_table::{Ending, WorkId};
use super::Owner;
use crate::clock::{monotonic_ms, now_ms};
use crate::command::{AgentCommand, AssignmentSender, Liveness, Sessions};
use crate::error::HeadError;
use crate::records::NodeRecord;
use berth_api::ObjectKind;

/// The nodes the owner holds, and their agents' sessions.
pub(crate) struct Nodes {
    entries: HashMap<String, NodeEntry>,
    /// The agents' live sessions, by node.
    links: HashMap<String, AgentLink>,
    /// The same sessions' liveness cells, shared with the heartbeat streams.
    sessions: Arc<Sessions>,
    /// When the heartbeat clock last ran (ms since the epoch; 0 before it ran): a long gap
    /// means the head itself was stopped or starved (see [`Nodes::judge`]).
    liveness_checked_ms: u64,
    next_session: u64,
    next_node: u64,
}

/// An agent's live connection.
pub(crate) struct AgentLink {
    pub(crate) liveness: Arc<Liveness>,
    pub(crate) assignments: Option<AssignmentSender>,
}

impl Default for Nodes {
    fn default() -> Nodes {
        Nodes {
            entries: HashMap::new(),
            links: HashMap::new(),
            sessions: Arc::default(),
            liveness_checked_ms: 0,
            // Sessions must never repeat across head restarts: start from the clock.
            next_session: now_ms() << 16,
            next_node: 0,
        }
    }
}

impl Nodes {
    pub(crate) fn get(&self, node_id: &str) -> Option<&NodeEntry> {
        self.entries.get(node_id)
    }

    pub(crate) fn get_mut(&mut self, node_id: &str) -> Option<&mut NodeEntry> {
        self.entries.get_mut(node_id)
    }

    pub(crate) fn contains(&self, node_id: &str) -> bool {
        self.entries.contains_key(node_id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &NodeEntry)> {
        self.entries.iter()
    }

    pub(crate) fn insert(&mut self, node_id: String, entry: NodeEntry) {
        self.entries.insert(node_id, entry);
    }

    /// The liveness cells of the live sessions, shared with the heartbeat streams.
    pub(crate) fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Node `node_id`'s live session.
    #[cfg(test)]
    pub(crate) fn link(&self, node_id: &str) -> Option<&AgentLink> {
        self.links.get(node_id)
    }

    /// An ID for a node registering without one: `node-N`, never one held.
    fn new_node_id(&mut self) -> String {
        loop {
            self.next_node += 1;
            let id = format!("node-{}", self.next_node);
            if !self.entries.contains_key(&id) {
                return id;
            }
        }
    }

    /// A restored node's ID: new IDs are numbered past it.
    pub(crate) fn restored_id(&mut self, node_id: &str) {
        if let Some(n) = node_id.strip_prefix("node-").and_then(|n| n.parse::<u64>().ok()) {
            self.next_node = self.next_node.max(n);
        }
    }

    /// A new session for `node_id`'s agent (ending any earlier one), last heard `last_seen_ms`;
    /// session 0 is never handed out and stands for a node restored from the store, whose
    /// agent must register.
    fn begin_session(&mut self, node_id: &str, session: u64, last_seen_ms: u64) {
        self.end_session(node_id);
        let liveness = Arc::new(Liveness {
            session,
            last_seen_ms: AtomicU64::new(last_seen_ms),
            ended: AtomicBool::new(false),
        });
        self.sessions.begin(node_id, liveness.clone());
        self.links.insert(node_id.to_string(), AgentLink { liveness, assignments: None });
    }

    /// A registering agent's new session: its number.
    fn new_session(&mut self, node_id: &str) -> u64 {
        self.next_session += 1;
        let session = self.next_session;
        self.begin_session(node_id, session, monotonic_ms());
        session
    }

    /// A node restored from the store, last heard `last_seen_ms`: its agent must register.
    pub(crate) fn restored_session(&mut self, node_id: &str, last_seen_ms: u64) {
        self.begin_session(node_id, 0, last_seen_ms);
    }

    /// Ends `node_id`'s session, if it has one: its heartbeats and streams are refused.
    fn end_session(&mut self, node_id: &str) {
        if let Some(old) = self.links.remove(node_id) {
            old.liveness.ended.store(true, Ordering::Release);
            self.sessions.end(node_id);
        }
    }

    /// `node_id`'s link if `session` is its live session; else the agent must register again.
    fn live_link(&mut self, node_id: &str, session: u64) -> Result<&mut AgentLink, Status> {
        match self.links.get_mut(node_id) {
            Some(link) if link.liveness.session == session => Ok(link),
            _ => Err(Status::failed_precondition(format!(
                "no live session {session} for node {node_id}: register again"
            ))),
        }
    }

    /// Where `node_id`'s assignments go, while its agent has a stream open.
    pub(crate) fn assignments_to(&self, node_id: &str) -> Option<AssignmentSender> {
        self.links.get(node_id)?.assignments.clone()
    }

    /// How long ago `node_id` was last heard from, at `now`.
    fn silent_ms(&self, node_id: &str, now: u64) -> Option<u64> {
        let last = self.links.get(node_id)?.liveness.last_seen_ms.load(Ordering::Acquire);
        Some(now.saturating_sub(last))
    }

    /// What the heartbeat clock says at `now` of the live nodes whose state it changes, in
    /// order of their IDs; `None` when the clock itself ran late (see below).
    fn judge(
        &mut self,
        now: u64,
        suspect_after: u64,
        timeout: u64,
    ) -> Option<Vec<(String, Heard)>> {
        // A head that did not get to check for that long was itself stopped or starved (a
        // saturated machine, a paused process): the heartbeats that arrived meanwhile may
        // still wait in its sockets. This round judges nobody; the next one, after the agent
        // protocol had its turn, does.
        let previous = std::mem::replace(&mut self.liveness_checked_ms, now);
        if previous != 0 && now.saturating_sub(previous) > suspect_after {
            tracing::warn!(
                late_ms = now.saturating_sub(previous),
                "the head did not check its nodes' heartbeats for {} ms (is its machine \
                 overloaded?); no node is judged on this round",
                now.saturating_sub(previous)
            );
            return None;
        }
        let mut changes: Vec<(String, Heard)> = self
            .entries
            .iter()
            .filter(|(_, n)| n.record.node.state != ApiNodeState::Dead)
            .filter_map(|(id, entry)| {
                // Never registered since the head started: its time starts with the head.
                let silent = self.silent_ms(id, now)?;
                let heard = if silent > timeout {
                    Heard::Silent(silent)
                } else if silent > suspect_after {
                    Heard::Late(silent)
                } else {
                    Heard::Recently
                };
                let change = match heard {
                    Heard::Silent(_) => true,
                    Heard::Late(_) => !entry.suspect,
                    Heard::Recently => entry.suspect,
                };
                change.then(|| (id.clone(), heard))
            })
            .collect();
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        Some(changes)
    }

    /// The node named `id_or_ip` (an ID, else the one live node with that address).
    pub(crate) fn find(&self, id_or_ip: &str) -> Result<String, HeadError> {
        if self.contains(id_or_ip) {
            return Ok(id_or_ip.to_string());
        }
        let matches: Vec<&String> = self
            .iter()
            .filter(|(_, n)| {
                n.record.node.address == id_or_ip && n.record.node.state != ApiNodeState::Dead
            })
            .map(|(id, _)| id)
            .collect();
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(HeadError::NotFound { what: "node", id: id_or_ip.to_string() }),
            _ => Err(HeadError::Conflict(format!(
                "{} live nodes have address {id_or_ip}; name the node by ID",
                matches.len()
            ))),
        }
    }

    /// The node named `id_or_ip` and its index, when it is not dead.
    pub(crate) fn editable(&self, id_or_ip: &str) -> Result<(String, NodeIndex), HeadError> {
        let id = self.find(id_or_ip)?;
        let entry = &self[id.as_str()];
        if entry.record.node.state == ApiNodeState::Dead {
            return Err(HeadError::Conflict(format!("node {id} is dead")));
        }
        Ok((id, entry.index))
    }

    /// Adds an entry to a node's history (kept with its record, the last
    /// [`rest::NODE_HISTORY`]); the caller marks the node.
    pub(crate) fn event(&mut self, node_id: &str, kind: &str, message: String) {
        let Some(entry) = self.entries.get_mut(node_id) else { return };
        let history = &mut entry.record.node.history;
        if history.len() >= rest::NODE_HISTORY {
            history.remove(0);
        }
        history.push(rest::NodeEvent { at_ms: now_ms(), kind: kind.to_string(), message });
    }
}

impl std::ops::Index<&str> for Nodes {
    type Output = NodeEntry;

    fn index(&self, node_id: &str) -> &NodeEntry {
        &self.entries[node_id]
    }
}

/// A node as the owner holds it.
pub(crate) struct NodeEntry {
    pub(crate) index: NodeIndex,
    pub(crate) record: NodeRecord,
    /// Actors and tasks whose current attempt is placed here.
    pub(crate) actors: u64,
    pub(crate) tasks: u64,
    /// Its heartbeats are late (past [`HeadConfig::suspect_after`](crate::HeadConfig)): the
    /// core holds it as suspect, and `record` keeps the state it returns to.
    pub(crate) suspect: bool,
}

impl NodeEntry {
    /// Counts `key`'s attempt on (+1) or off (-1) it.
    pub(crate) fn count(&mut self, key: WorkId, delta: i64) {
        let counter = match key {
            WorkId::Actor(_) => &mut self.actors,
            WorkId::Task(_) => &mut self.tasks,
        };
        *counter = counter.saturating_add_signed(delta);
    }
}

/// What the heartbeat clock says of a live node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heard {
    /// Within the suspect threshold.
    Recently,
    /// Silent past the suspect threshold (ms), not past the timeout.
    Late(u64),
    /// Silent past the timeout (ms).
    Silent(u64),
}

/// A registration, checked: what the core needs to add the node.
struct Registration {
    spec: NodeSpec,
    resources: StringMap,
    user_labels: StringMap,
    facts: StringMap,
    taints: Vec<(String, String)>,
}

fn invalid(field: impl Into<String>, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{}: {message}", field.into()))
}

impl Owner {
    pub(crate) fn agent_command(&mut self, command: AgentCommand) {
        match command {
            AgentCommand::Register { request, reply } => {
                let answer = self.register(*request);
                self.cycle.reply(reply, answer);
            }
            AgentCommand::OpenAssignments { node_id, session, reply } => {
                let answer = self.open_assignments(&node_id, session);
                // Sent at once: the stream carries only starts already durable.
                let _ = reply.send(answer);
            }
            AgentCommand::Heartbeat { node_id, session, reply } => {
                let answer = self.nodes.live_link(&node_id, session).map(|l| l.liveness.clone());
                let _ = reply.send(answer);
            }
            AgentCommand::Report { reports, reply } => {
                let answer = self.reports(reports);
                self.cycle.reply(reply, answer);
            }
        }
    }

    fn check_registration(
        &mut self,
        request: &RegisterRequest,
        node_id: &str,
    ) -> Result<Registration, Status> {
        let id = NodeId::new(node_id).map_err(|e| invalid("node_id", e))?;
        let limits = &self.config.limits;
        let counted = [
            ("resources", Limit::Resources, request.resources.len()),
            ("labels", Limit::Labels, request.labels.len()),
            ("taints", Limit::Labels, request.taints.len()),
            ("facts", Limit::Labels, request.facts.len()),
        ];
        if let Some((field, limit, _)) = counted.iter().find(|(_, l, n)| *n > limits.get(*l)) {
            return Err(invalid(*field, limits.refusal(*limit, field)));
        }
        let mut total = ResourceSet::new();
        let mut resources = StringMap::new();
        for (name, amount) in &request.resources {
            let field = format!("resources.{name}");
            let q = Quantity::parse(amount).map_err(|e| invalid(&field, e))?;
            let id = self.cluster.registry_mut().intern(name).map_err(|e| invalid(&field, e))?;
            if q.is_zero() {
                continue;
            }
            if self.cluster.registry().is_unit_instance(id) && !q.is_whole() {
                return Err(invalid(
                    &field,
                    format!("{name} is counted in whole instances; {amount} is not whole"),
                ));
            }
            total.set(id, q);
            resources.insert(name.clone(), q.to_string());
        }
        let mut labels = if request.labels_file.trim().is_empty() {
            Labels::new()
        } else {
            parse_labels_text("labels_file", request.labels_file.clone())
                .map_err(|e| invalid("labels_file", e))?
        };
        // --labels wins over the file.
        for (key, value) in &request.labels {
            labels
                .insert(key, value)
                .map_err(|e| invalid(format!("labels.{key}"), label_error_text("label", &e)))?;
        }
        if labels.len() > limits.get(Limit::Labels) {
            let field = "labels and labels_file together";
            return Err(invalid("labels_file", limits.refusal(Limit::Labels, field)));
        }
        let mut facts = NodeFacts::default();
        let mut fact_map = StringMap::new();
        for (key, value) in &request.facts {
            facts.set(key, value).map_err(|rule| invalid(format!("facts.{key}"), rule))?;
            if !value.is_empty() {
                fact_map.insert(key.clone(), value.clone());
            }
        }
        let mut taints = Vec::new();
        for taint in &request.taints {
            check_taint(&taint.key, &taint.value)
                .map_err(|rule| invalid(format!("taints.{}", taint.key), rule))?;
            taints.push((taint.key.clone(), taint.value.clone()));
        }
        let user_labels: StringMap =
            labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Ok(Registration {
            spec: NodeSpec { id, total, labels, facts, taints: taints.clone() },
            resources,
            user_labels,
            facts: fact_map,
            taints,
        })
    }

    fn register(&mut self, request: RegisterRequest) -> Result<RegisterReply, Status> {
        self.check_running_is_known(&request)?;
        let node_id = if request.node_id.is_empty() {
            self.nodes.new_node_id()
        } else {
            request.node_id.clone()
        };
        let known_alive =
            self.nodes.get(&node_id).is_some_and(|n| n.record.node.state != ApiNodeState::Dead);
        if !known_alive {
            let registration = self.check_registration(&request, &node_id)?;
            // A dead node's ID comes back as a new node (its work has moved already).
            if let Some(old) = self.nodes.entries.remove(&node_id) {
                let _ = self.cluster.remove_node(old.index);
            }
            let index =
                self.cluster.add_node_with(registration.spec).map_err(|e| invalid("", e))?;
            let base = rest::Node {
                node_id: node_id.clone(),
                address: request.address.clone(),
                state: ApiNodeState::Alive,
                labels: Default::default(),
                taints: Vec::new(),
                resources: Default::default(),
                actors: 0,
                tasks: 0,
                registered_at_ms: now_ms(),
                dead_reason: None,
                history: Vec::new(),
                measured: None,
            };
            let record = NodeRecord {
                node: base,
                reported: Some(registration.resources.clone()),
                resources: registration.resources,
                user_labels: registration.user_labels,
                facts: registration.facts,
                taints: registration.taints,
            };
            self.nodes.insert(
                node_id.clone(),
                NodeEntry { index, record, actors: 0, tasks: 0, suspect: false },
            );
            self.nodes.event(&node_id, "registered", format!("from {}", request.address));
            self.cycle.trigger(Trigger::NodeJoined(index));
        } else {
            // A known node (the agent or the head restarted): the head's record wins (labels
            // and taints changed through the API stay), except for the resources the agent
            // now reports differently (the machine changed: a GPU lost, memory added).
            let registration = self.check_registration(&request, &node_id)?;
            self.capacity_reported(&node_id, registration.resources);
            let entry = self.nodes.get_mut(&node_id).expect("known");
            entry.record.node.address = request.address.clone();
            entry.record.node.registered_at_ms = now_ms();
            self.node_heard_again(&node_id, "its agent registered again");
            self.nodes.event(
                &node_id,
                "registered_again",
                format!("from {} (its agent or the head restarted)", request.address),
            );
        }
        let session = self.nodes.new_session(&node_id);
        // Reconcile: what the agent runs that the head does not place there is stopped;
        // what the head placed there and had started but the agent no longer runs has ended.
        let mut stop = Vec::new();
        let mut running: BTreeMap<String, u32> = BTreeMap::new();
        for work in &request.running {
            running.insert(work.work_id.clone(), work.attempt);
        }
        for (work_id, attempt) in &running {
            let current = ObjectKind::parse(work_id).and_then(|(kind, seq)| {
                let key = match kind {
                    ObjectKind::Actor => WorkId::Actor(seq),
                    ObjectKind::Task => WorkId::Task(seq),
                    ObjectKind::Group | ObjectKind::Job => return None,
                };
                let current = self.attempt_of(key)?;
                (self.runs_on(current, &node_id) && current.number == *attempt).then_some(key)
            });
            match current {
                Some(key) => {
                    // Running as the head believes; mark started if the report was lost.
                    if self.attempt_of(key).is_some_and(|a| !a.started) {
                        self.started(key, 0);
                    }
                }
                None => stop.push(work_id.clone()),
            }
        }
        for key in self.work_on(&node_id) {
            let started = self.attempt_of(key).is_some_and(|a| a.started);
            if started && !running.contains_key(&key.id()) {
                self.ended(key, Ending::Exited { code: None, signal: None });
            }
        }
        self.cycle.mark_node(&node_id);
        Ok(RegisterReply {
            node_id,
            session,
            heartbeat_interval_ms: self.config.heartbeat_interval.as_millis() as u32,
            stop,
            heartbeat_timeout_ms: self.config.heartbeat_timeout.as_millis().min(u32::MAX as u128)
                as u32,
        })
    }

    /// Refuses a registration whose running work has IDs this head never handed out: the
    /// store is behind (it lost the records of acknowledged work), and stopping that work, as
    /// reconciling would, would lose it for good. The head stops instead ("store behind"),
    /// and the agent keeps running everything until a head with a consistent store answers.
    /// With `--accept-store-loss` the loss is accepted: the counters move past those IDs (none
    /// is handed out twice) and the work is stopped as unknown.
    fn check_running_is_known(&mut self, request: &RegisterRequest) -> Result<(), Status> {
        let counter = |kind: ObjectKind| self.sequences.of(kind);
        let beyond: Vec<(ObjectKind, u64, &str)> = request
            .running
            .iter()
            .filter_map(|work| {
                let (kind, seq) = ObjectKind::parse(&work.work_id)?;
                (seq > counter(kind).load(Ordering::Relaxed)).then_some((
                    kind,
                    seq,
                    work.work_id.as_str(),
                ))
            })
            .collect();
        let Some(&(_, _, first)) = beyond.first() else { return Ok(()) };
        let node = &request.node_id;
        if self.config.accept_store_loss {
            tracing::warn!(node = %node, work = first, count = beyond.len(), "--accept-store-loss: the node runs work the store does not know; the ID counters move past it and the work is stopped");
            for (kind, seq, _) in &beyond {
                counter(*kind).fetch_max(*seq, Ordering::Relaxed);
            }
            return Ok(());
        }
        let reason = format!(
            "node {node} runs {first} (and {} more) whose IDs this head never handed out: the \
             store lost the records of acknowledged work. {}",
            beyond.len() - 1,
            crate::stop::BEHIND_ADVICE
        );
        tracing::error!("{reason}");
        if let Some(stopped) = &self.stopped {
            stopped.send_replace(Some(crate::Stop {
                kind: crate::StopKind::StoreBehind,
                reason: reason.clone(),
            }));
        }
        Err(Status::failed_precondition(reason))
    }

    /// The work whose current attempt is placed on `node`.
    pub(crate) fn work_on(&self, node: &str) -> Vec<WorkId> {
        let Some(index) = self.nodes.get(node).map(|n| n.index) else { return Vec::new() };
        let on = |attempt: Option<super::work::Attempt>| attempt.is_some_and(|a| a.node == index);
        let mut out: Vec<WorkId> =
            self.work.iter().filter(|(_, e)| on(e.current())).map(|(key, _)| key).collect();
        // Actors first, each kind in creation order.
        out.sort();
        out
    }

    fn open_assignments(
        &mut self,
        node_id: &str,
        session: u64,
    ) -> Result<mpsc::UnboundedReceiver<Result<berth_api::agent::Assignment, Status>>, Status> {
        self.nodes.live_link(node_id, session)?;
        let (tx, rx) = mpsc::unbounded_channel();
        // Every placed attempt not yet started, in order; already durable, so sent now.
        for key in self.work_on(node_id) {
            if self.attempt_of(key).is_some_and(|a| !a.started) {
                if let Some(start) = self.start_of(key) {
                    let _ = tx.send(Ok(start));
                }
            }
        }
        self.nodes.live_link(node_id, session)?.assignments = Some(tx);
        Ok(rx)
    }

    fn reports(&mut self, reports: StatusReports) -> Result<StatusReplies, Status> {
        // Every report must come from a live session: a stale one means the agent must
        // register again (and resend), so nothing of the batch is applied.
        for report in &reports.reports {
            self.nodes.live_link(&report.node_id, report.session)?;
        }
        let replies = reports.reports.into_iter().map(|r| self.report(r)).collect();
        Ok(StatusReplies { replies })
    }

    /// Applies one report of a live session; a report of no current attempt (or without a
    /// status) is answered `current: false`.
    fn report(&mut self, report: StatusReport) -> StatusReply {
        let key = match WorkId::parse(&report.work_id) {
            Some(key) if self.work.contains(key) => key,
            _ => return StatusReply { current: false },
        };
        let current = self
            .attempt_of(key)
            .is_some_and(|a| a.number == report.attempt && self.runs_on(a, &report.node_id));
        if !current {
            // A report from an attempt the head replaced: the agent must stop it.
            return StatusReply { current: false };
        }
        match report.status {
            Some(status_report::Status::Started(started)) => self.started(key, started.pid),
            Some(status_report::Status::Exited(exited)) => {
                self.ended(key, Ending::Exited { code: exited.code, signal: exited.signal })
            }
            Some(status_report::Status::FailedToStart(failed)) => {
                self.ended(key, Ending::FailedToStart(failed.error))
            }
            None => {
                tracing::warn!(work_id = %report.work_id, "a report without a status; ignored");
                return StatusReply { current: false };
            }
        }
        StatusReply { current: true }
    }

    /// The heartbeat clock, once per tick: a live node silent for longer than
    /// [`HeadConfig::suspect_after`](crate::HeadConfig::suspect_after) becomes suspect (it
    /// takes nothing new; nothing of it is released or restarted), one heard from again is back
    /// as it was, and one silent for longer than the heartbeat timeout is declared dead.
    pub(crate) fn check_liveness(&mut self) {
        self.check_liveness_at(monotonic_ms());
    }

    /// [`Owner::check_liveness`] at `now` (ms since the epoch): tests move the clock.
    pub(crate) fn check_liveness_at(&mut self, now: u64) {
        let timeout = self.config.heartbeat_timeout.as_millis() as u64;
        let suspect_after = self.config.suspect_after().as_millis() as u64;
        // A late clock judges no job either: its driver's renewals may wait in the sockets.
        let Some(changes) = self.nodes.judge(now, suspect_after, timeout) else { return };
        for (id, heard) in changes {
            match heard {
                Heard::Silent(silent) => {
                    let reason = format!("no heartbeat for {silent} ms (timeout {timeout} ms)");
                    self.node_died(&id, reason);
                }
                Heard::Late(silent) => self.node_suspect(&id, silent),
                Heard::Recently => self.node_heard_again(&id, "heartbeats again"),
            }
        }
        self.check_job_leases(now);
    }

    /// A live node's heartbeats are late: it takes nothing new until it is heard from again
    /// or declared dead. Its work, bundles and assignment stream are left as they are.
    fn node_suspect(&mut self, node_id: &str, silent: u64) {
        let timeout = self.config.heartbeat_timeout.as_millis() as u64;
        let Some(entry) = self.nodes.get_mut(node_id) else { return };
        entry.suspect = true;
        let index = entry.index;
        let _ = self.cluster.set_state(index, NodeState::Suspect);
        let reason = format!("no heartbeat for {silent} ms");
        tracing::warn!(
            node = node_id,
            reason = %reason,
            last_heartbeat_ms_ago = silent,
            "node {node_id} is SUSPECT: {reason}; it takes no new work, and is declared dead if \
             it stays silent for {timeout} ms"
        );
        self.metrics.node_transition("suspect");
        self.nodes.event(node_id, "suspect", reason);
        // Requests waiting for its room are decided again (they keep waiting for it).
        self.cycle.trigger(Trigger::NodeLost(index));
        self.cycle.mark_node(node_id);
        self.refresh_node(node_id);
    }

    /// A suspect node was heard from (a heartbeat, or its agent registered again): back to the
    /// state it had (alive, or draining), with its work as it was.
    pub(crate) fn node_heard_again(&mut self, node_id: &str, how: &str) {
        let Some(entry) = self.nodes.get_mut(node_id) else { return };
        if !entry.suspect {
            return;
        }
        entry.suspect = false;
        let index = entry.index;
        let (state, name) = match entry.record.node.state {
            ApiNodeState::Draining => (NodeState::Draining, "DRAINING"),
            _ => (NodeState::Alive, "ALIVE"),
        };
        let _ = self.cluster.set_state(index, state);
        tracing::info!(node = node_id, "node {node_id} is {name} again: {how}");
        self.metrics.node_transition("alive");
        self.nodes.event(node_id, "alive", how.to_string());
        self.cycle.trigger(Trigger::NodeChanged(index));
        self.cycle.mark_node(node_id);
        self.refresh_node(node_id);
    }

    /// The node is gone: its actors restart elsewhere, its tasks retry, its bundles re-plan.
    pub(crate) fn node_died(&mut self, node_id: &str, reason: String) {
        let last_heartbeat_ms_ago = self.nodes.silent_ms(node_id, monotonic_ms());
        let Some(entry) = self.nodes.get_mut(node_id) else { return };
        let index = entry.index;
        tracing::warn!(
            node = node_id,
            reason = %reason,
            last_heartbeat_ms_ago,
            "node {node_id} is DEAD: {reason}; its actors restart elsewhere and its tasks retry"
        );
        self.metrics.node_transition("dead");
        entry.suspect = false;
        entry.record.node.state = ApiNodeState::Dead;
        entry.record.node.dead_reason = Some(reason.clone());
        self.nodes.event(node_id, "dead", reason);
        let _ = self.cluster.set_state(index, NodeState::Dead);
        self.nodes.end_session(node_id);
        self.cycle.trigger(Trigger::NodeLost(index));
        for key in self.work_on(node_id) {
            self.ended(key, Ending::NodeDied(node_id.to_string()));
        }
        for seq in self.groups.holding_bundles_on(node_id) {
            self.group_lost_bundles(seq, node_id);
        }
        self.cycle.mark_node(node_id);
    }

    /// Updates a node's view entry (its ledger changes are shown, not written: derived).
    pub(crate) fn refresh_node(&mut self, node_id: &str) {
        let Some(entry) = self.nodes.get(node_id) else { return };
        let previous = self.view.nodes.get(node_id).map(|n| &**n);
        let node = convert::node(
            &self.cluster,
            entry.index,
            &entry.record.node,
            previous,
            entry.actors,
            entry.tasks,
        );
        let node = Arc::new(node);
        let old = self.view.nodes.insert(node_id.to_string(), node.clone());
        // Shown again unchanged (a cycle touched it without changing it): not a change.
        if old.as_deref() != Some(&*node) {
            let change = super::changed(old.is_some());
            self.view.changes.push(change, crate::changes::Object::Node(node));
        }
    }
}
