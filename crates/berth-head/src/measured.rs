//! Measured usage: the latest measurement each node's agent sent with its heartbeats (CPU and
//! memory of the machine and of each running attempt; see the agent's `measure` module).
//!
//! Like heartbeats themselves, measurements never reach the owner: the heartbeat stream
//! writes them here and the REST API, the dashboard and `/metrics` read them. Only the latest
//! per node is kept, in memory: a head that restarts shows none until the next heartbeat, and
//! nothing here is ever written to the store (it changes every second and is worth nothing
//! later; Prometheus keeps the history).
//!
//! A measurement is checked before it is kept ([`check`]); one that breaks a rule is dropped
//! with a warning naming the field and the rule, and the heartbeat still counts: a bad
//! measurement must never cost a node its liveness.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use berth_api::agent::Measured;
use berth_api::rest::{GpuMeasured, NodeMeasured, WorkMeasured};

/// The most logical CPUs a machine may report.
pub(crate) const MAX_CPUS: u32 = 1 << 20;
/// The most attempts one measurement may list.
pub(crate) const MAX_WORK: usize = 4096;
/// The most GPUs one measurement may list.
pub(crate) const MAX_GPUS: usize = 64;
/// The longest work ID a measurement may name (the agent's own rule for work IDs).
const MAX_WORK_ID: usize = 200;

/// The latest measurement of one node.
#[derive(Debug)]
struct Latest {
    /// The session whose heartbeat carried it: a stream of an ended session never removes
    /// a newer session's measurement.
    session: u64,
    at_ms: u64,
    measured: Measured,
}

/// The latest measurement per node. Cheap to share; short locks only.
#[derive(Debug, Default)]
pub(crate) struct Measurements {
    nodes: RwLock<HashMap<String, Arc<Latest>>>,
}

impl Measurements {
    /// Keeps `measured`, from session `session` of `node_id`, received at `at_ms`, if it
    /// passes [`check`]; the reason it was dropped otherwise.
    pub(crate) fn record(
        &self,
        node_id: &str,
        session: u64,
        at_ms: u64,
        measured: Measured,
    ) -> Result<(), String> {
        check(&measured)?;
        let latest = Arc::new(Latest { session, at_ms, measured });
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        match nodes.get_mut(node_id) {
            Some(slot) => *slot = latest,
            None => {
                nodes.insert(node_id.to_string(), latest);
            }
        }
        Ok(())
    }

    /// Forgets `node_id`'s measurement if session `session` made it (its heartbeat stream
    /// ended: the agent is gone, or registered again and will measure anew).
    pub(crate) fn forget(&self, node_id: &str, session: u64) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        if nodes.get(node_id).is_some_and(|l| l.session == session) {
            nodes.remove(node_id);
        }
    }

    fn latest(&self, node_id: &str) -> Option<Arc<Latest>> {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).get(node_id).cloned()
    }

    /// `node_id`'s machine as last measured, with each attempt when `with_work`.
    pub(crate) fn node(&self, node_id: &str, with_work: bool) -> Option<NodeMeasured> {
        let latest = self.latest(node_id)?;
        Some(node_answer(&latest, with_work))
    }

    /// What `work_id`'s attempt running on `node_id` used when last measured (its newest, if
    /// an older one is still being stopped); `None` when that node's last measurement does not
    /// list it.
    pub(crate) fn work(&self, node_id: &str, work_id: &str) -> Option<WorkMeasured> {
        let latest = self.latest(node_id)?;
        latest
            .measured
            .work
            .iter()
            .filter(|w| w.work_id == work_id)
            .max_by_key(|w| w.attempt)
            .map(|w| work_answer(w, latest.at_ms))
    }

    /// `node` with its measurement filled in (attempts too when `with_work`); a dead node's
    /// is never shown, even while its last heartbeat stream lingers.
    pub(crate) fn fill(&self, node: &mut berth_api::rest::Node, with_work: bool) {
        node.measured = match node.state {
            berth_api::rest::NodeState::Dead => None,
            _ => self.node(&node.node_id, with_work).map(Box::new),
        };
    }

    /// Every node's machine as last measured (without attempts), by node ID.
    pub(crate) fn nodes(&self) -> Vec<(String, NodeMeasured)> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<(String, NodeMeasured)> =
            nodes.iter().map(|(id, latest)| (id.clone(), node_answer(latest, false))).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

fn node_answer(latest: &Latest, with_work: bool) -> NodeMeasured {
    let m = &latest.measured;
    NodeMeasured {
        at_ms: latest.at_ms,
        cpu_millicores: m.cpu_millicores,
        cpus: m.cpus,
        memory_used_bytes: m.memory_used_bytes,
        memory_total_bytes: m.memory_total_bytes,
        gpus: m.gpus.iter().map(gpu_answer).collect(),
        work: if with_work {
            m.work.iter().map(|w| work_answer(w, latest.at_ms)).collect()
        } else {
            Vec::new()
        },
    }
}

fn gpu_answer(g: &berth_api::agent::GpuMeasured) -> GpuMeasured {
    GpuMeasured {
        index: g.index,
        memory_used_bytes: g.memory_used_bytes,
        memory_total_bytes: g.memory_total_bytes,
        utilization_percent: g.utilization_percent,
    }
}

fn work_answer(w: &berth_api::agent::WorkMeasured, at_ms: u64) -> WorkMeasured {
    WorkMeasured {
        work_id: w.work_id.clone(),
        attempt: w.attempt,
        at_ms,
        cpu_millicores: w.cpu_millicores,
        memory_bytes: w.memory_bytes,
        processes: w.processes,
    }
}

/// Why `measured` cannot be kept, naming the field and the rule; `Ok` when it can. The
/// bounds are those no real machine reaches, so a value past one is a broken agent.
pub(crate) fn check(measured: &Measured) -> Result<(), String> {
    if measured.cpus == 0 || measured.cpus > MAX_CPUS {
        return Err(format!("measured.cpus: {} is not 1 to {MAX_CPUS}", measured.cpus));
    }
    // CPU time cannot exceed the CPUs' time; twice that leaves room for the skew of two looks.
    let max_millicores = u64::from(measured.cpus) * 2000;
    let too_busy = |c: Option<u64>| c.is_some_and(|c| c > max_millicores);
    if too_busy(measured.cpu_millicores) {
        return Err(format!(
            "measured.cpu_millicores: {} is over {max_millicores} (2000 per CPU)",
            measured.cpu_millicores.unwrap_or_default()
        ));
    }
    if measured.memory_used_bytes > measured.memory_total_bytes {
        return Err(format!(
            "measured.memory_used_bytes: {} is over memory_total_bytes ({})",
            measured.memory_used_bytes, measured.memory_total_bytes
        ));
    }
    if measured.gpus.len() > MAX_GPUS {
        return Err(format!("measured.gpus: {} entries; at most {MAX_GPUS}", measured.gpus.len()));
    }
    for (i, g) in measured.gpus.iter().enumerate() {
        if g.memory_used_bytes > g.memory_total_bytes {
            return Err(format!(
                "measured.gpus[{i}].memory_used_bytes: {} is over memory_total_bytes ({})",
                g.memory_used_bytes, g.memory_total_bytes
            ));
        }
        if g.utilization_percent.is_some_and(|u| u > 100) {
            return Err(format!(
                "measured.gpus[{i}].utilization_percent: {} is over 100",
                g.utilization_percent.unwrap_or_default()
            ));
        }
        if measured.gpus[..i].iter().any(|other| other.index == g.index) {
            return Err(format!("measured.gpus[{i}].index: {} is listed twice", g.index));
        }
    }
    if measured.work.len() > MAX_WORK {
        return Err(format!("measured.work: {} entries; at most {MAX_WORK}", measured.work.len()));
    }
    for (i, w) in measured.work.iter().enumerate() {
        let valid_id = !w.work_id.is_empty()
            && w.work_id.len() <= MAX_WORK_ID
            && w.work_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid_id {
            return Err(format!(
                "measured.work[{i}].work_id: not 1 to {MAX_WORK_ID} letters, digits, '-', '_' \
                 or '.'"
            ));
        }
        if too_busy(w.cpu_millicores) {
            return Err(format!(
                "measured.work[{i}].cpu_millicores: {} is over {max_millicores} (2000 per CPU)",
                w.cpu_millicores.unwrap_or_default()
            ));
        }
        // RSS summed over processes may count shared pages more than once, so it is bounded
        // by the machine's memory times its processes, not by the memory alone.
        let max_memory = measured.memory_total_bytes.saturating_mul(u64::from(w.processes.max(1)));
        if w.memory_bytes > max_memory {
            return Err(format!(
                "measured.work[{i}].memory_bytes: {} is over memory_total_bytes × processes \
                 ({max_memory})",
                w.memory_bytes
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use berth_api::agent::WorkMeasured as Work;

    use super::*;

    fn measured() -> Measured {
        Measured {
            cpu_millicores: Some(1500),
            cpus: 4,
            memory_used_bytes: 1 << 30,
            memory_total_bytes: 4 << 30,
            gpus: vec![berth_api::agent::GpuMeasured {
                index: 0,
                memory_used_bytes: 1 << 30,
                memory_total_bytes: 16 << 30,
                utilization_percent: Some(30),
            }],
            work: vec![Work {
                work_id: "task-1".into(),
                attempt: 2,
                cpu_millicores: Some(990),
                memory_bytes: 10 << 20,
                processes: 2,
            }],
        }
    }

    #[test]
    fn the_latest_measurement_is_kept_per_node_and_session() {
        let m = Measurements::default();
        assert_eq!(m.node("n1", true), None);
        m.record("n1", 7, 1000, measured()).unwrap();
        let node = m.node("n1", false).unwrap();
        assert_eq!((node.at_ms, node.cpu_millicores, node.cpus), (1000, Some(1500), 4));
        assert!(node.work.is_empty());
        assert_eq!(m.node("n1", true).unwrap().work.len(), 1);
        let work = m.work("n1", "task-1").unwrap();
        assert_eq!(
            (work.cpu_millicores, work.memory_bytes, work.at_ms),
            (Some(990), 10 << 20, 1000)
        );
        // Other work, another node: nothing.
        assert_eq!(m.work("n1", "task-2"), None);
        assert_eq!(m.work("n2", "task-1"), None);
        // An older attempt being stopped beside the newer: the newer.
        let mut two = measured();
        let mut older = two.work[0].clone();
        older.attempt = 1;
        two.work.insert(0, older);
        m.record("n3", 1, 1000, two).unwrap();
        assert_eq!(m.work("n3", "task-1").unwrap().attempt, 2);
        // A newer session replaces it; the old session's end does not remove it.
        m.record("n1", 8, 2000, measured()).unwrap();
        m.forget("n1", 7);
        assert_eq!(m.node("n1", false).unwrap().at_ms, 2000);
        m.record("n0", 1, 5, measured()).unwrap();
        let ids: Vec<String> = m.nodes().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["n0", "n1", "n3"]);
        m.forget("n1", 8);
        assert_eq!(m.node("n1", false), None);
    }

    #[test]
    fn broken_measurements_are_refused_naming_the_field() {
        let refused = |change: fn(&mut Measured)| {
            let mut bad = measured();
            change(&mut bad);
            let m = Measurements::default();
            let error = m.record("n", 1, 1, bad).unwrap_err();
            assert_eq!(m.node("n", false), None);
            error
        };
        assert!(refused(|m| m.cpus = 0).starts_with("measured.cpus: 0 is not 1 to"));
        assert!(refused(|m| m.cpu_millicores = Some(8001))
            .starts_with("measured.cpu_millicores: 8001 is over 8000"));
        assert!(
            refused(|m| m.memory_used_bytes = u64::MAX).starts_with("measured.memory_used_bytes:")
        );
        assert!(
            refused(|m| m.work[0].work_id = "../x".into()).starts_with("measured.work[0].work_id:")
        );
        assert!(
            refused(|m| m.work[0].work_id = String::new()).starts_with("measured.work[0].work_id:")
        );
        assert!(refused(|m| m.work[0].cpu_millicores = Some(u64::MAX))
            .starts_with("measured.work[0].cpu_millicores:"));
        assert!(refused(|m| m.work[0].memory_bytes = u64::MAX)
            .starts_with("measured.work[0].memory_bytes:"));
        assert!(refused(|m| {
            let one = m.work[0].clone();
            m.work = vec![one; MAX_WORK + 1];
        })
        .starts_with("measured.work: 4097 entries"));
        assert_eq!(
            refused(|m| m.gpus[0].memory_used_bytes = 17 << 30),
            "measured.gpus[0].memory_used_bytes: 18253611008 is over memory_total_bytes \
             (17179869184)"
        );
        assert_eq!(
            refused(|m| m.gpus[0].utilization_percent = Some(101)),
            "measured.gpus[0].utilization_percent: 101 is over 100"
        );
        assert_eq!(
            refused(|m| m.gpus.push(m.gpus[0])),
            "measured.gpus[1].index: 0 is listed twice"
        );
        assert!(refused(|m| m.gpus = vec![Default::default(); MAX_GPUS + 1])
            .starts_with("measured.gpus: 65 entries"));
        // Absent CPU figures (a first look) are fine.
        let mut first = measured();
        first.cpu_millicores = None;
        first.work[0].cpu_millicores = None;
        assert_eq!(check(&first), Ok(()));
    }
}
