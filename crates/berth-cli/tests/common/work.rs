//! Finding and waiting for the processes of a test cluster's work: each attempt runs in
//! `DATA_DIR/agents/<node>/work/<work>-<attempt>/`, so a process's working directory names its
//! node, work and attempt, and only this test's data directory counts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cluster::{created_id, wait_for, Cluster, WAIT};

/// `berth actor create` of `sh -c SCRIPT` (1 CPU, 2 restarts) preferring node `prefer` (soft
/// node affinity: elsewhere when it cannot be there); its ID.
pub fn create_actor(cluster: &Cluster, script: &str, prefer: &str) -> String {
    let strategy = format!(r#"{{"type": "NODE_AFFINITY", "node_id": "{prefer}", "soft": true}}"#);
    let created = cluster.ok(&[
        "actor",
        "create",
        "--command",
        "sh",
        "--arg",
        "-c",
        "--arg",
        script,
        "--resources",
        "CPU=1",
        "--max-restarts",
        "2",
        "--strategy",
        &strategy,
    ]);
    created_id(&created, "actor-")
}

/// Waits until `actor` is ALIVE on `node`; returns it.
pub fn wait_alive_on(cluster: &Cluster, actor: &str, node: &str) -> Value {
    cluster.wait_object(actor, &format!("is ALIVE on {node}"), |o| {
        o["state"] == "ALIVE" && o["node_id"] == node
    })
}

/// When the last event `kind` about `node` happened (ms since the epoch, the head's clock).
pub fn event_at(object: &Value, kind: &str, node: &str) -> Option<u64> {
    object["history"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["kind"] == kind && e["node_id"] == node)
        .and_then(|e| e["at_ms"].as_u64())
}

/// The kinds of an object's events, in order.
pub fn events(object: &Value) -> Vec<String> {
    let history = object["history"].as_array().cloned().unwrap_or_default();
    history.iter().map(|e| e["kind"].as_str().unwrap_or("?").to_string()).collect()
}

/// One running process of an attempt, found in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Proc {
    pub node: String,
    pub work_id: String,
    pub attempt: u32,
    pub pgid: i32,
    pub pid: i32,
}

/// State (field 3) and process group (field 5) of `/proc/<pid>/stat`.
pub fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state: the parent (field 4), then the group (field 5).
    let pgid = fields.nth(1)?.parse().ok()?;
    Some((state, pgid))
}

/// True while process `pid` exists and is not a zombie (dead, not yet reaped).
pub fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

/// Every live process working in an attempt directory of this cluster's agents
/// (`DATA_DIR/agents/<node>/work/<work>-<attempt>/`).
pub fn processes(cluster: &Cluster) -> Vec<Proc> {
    let root = cluster.data_dir().join("agents");
    let root = root.canonicalize().unwrap_or(root);
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // Processes of other users, and processes gone meanwhile, are not readable: not ours.
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else { continue };
        let Ok(inside) = cwd.strip_prefix(&root) else { continue };
        let parts: Vec<&str> = inside.iter().filter_map(|p| p.to_str()).collect();
        let [node, "work", dir] = parts.as_slice() else { continue };
        let Some((work_id, attempt)) = dir.rsplit_once('-') else { continue };
        let Ok(attempt) = attempt.parse() else { continue };
        let Some((state, pgid)) = stat(pid) else { continue };
        if matches!(state, 'Z' | 'X' | 'x') {
            continue;
        }
        found.push(Proc {
            node: node.to_string(),
            work_id: work_id.to_string(),
            attempt,
            pgid,
            pid,
        });
    }
    found.sort();
    found
}

/// The copies of `work_id` running now: (node, attempt, process group), one per group.
pub fn copies(cluster: &Cluster, work_id: &str) -> Vec<(String, u32, i32)> {
    let groups: BTreeSet<(String, u32, i32)> = processes(cluster)
        .into_iter()
        .filter(|p| p.work_id == work_id)
        .map(|p| (p.node, p.attempt, p.pgid))
        .collect();
    groups.into_iter().collect()
}

/// Waits until the copies of `work_id` run on exactly `nodes` (one copy per entry); returns
/// them (node, attempt, process group), sorted by node.
pub fn wait_copies(cluster: &Cluster, work_id: &str, nodes: &[&str]) -> Vec<(String, u32, i32)> {
    let mut want: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    want.sort();
    wait_for(&format!("{work_id} runs once on each of {want:?}"), WAIT, || {
        let now = copies(cluster, work_id);
        let seen: Vec<String> = now.iter().map(|(n, _, _)| n.clone()).collect();
        if seen == want {
            Ok(now)
        } else {
            Err(format!("{now:?}\nall processes: {:?}", processes(cluster)))
        }
    })
}

/// The agent directory of `node`.
pub fn agent_dir(cluster: &Cluster, node: &str) -> PathBuf {
    cluster.data_dir().join("agents").join(node)
}

/// The PID `node`'s runner records for `work_id`.
pub fn recorded_pid(cluster: &Cluster, node: &str, work_id: &str) -> Option<i32> {
    berth_agent::process::recorded(&agent_dir(cluster, node))
        .into_iter()
        .find(|p| p.work_id == work_id)
        .map(|p| p.pid as i32)
}

/// Waits until `path` holds `text`.
pub fn wait_file_contains(path: &Path, text: &str) -> String {
    wait_for(&format!("{} holds {text:?}", path.display()), WAIT, || {
        let now = std::fs::read_to_string(path).unwrap_or_default();
        if now.contains(text) {
            Ok(now)
        } else {
            Err(now)
        }
    })
}

/// Waits until process `pid` is gone; how long that took.
pub fn wait_gone(what: &str, pid: i32, timeout: Duration) -> Duration {
    let start = Instant::now();
    wait_for(what, timeout, || {
        if alive(pid) {
            Err(format!("process {pid} still runs: {:?}", stat(pid)))
        } else {
            Ok(())
        }
    });
    start.elapsed()
}
