//! Losing a node, end to end with the real `berth` binary: a head and agents as separate
//! processes that run real processes, the way a user runs a cluster (README, "Running a
//! cluster").
//!
//! - `killed_agent_actor_moves_then_old_copy_is_stopped`: an agent is killed with SIGKILL;
//!   its actor is ALIVE on the other node within the heartbeat timeout + 1 s (+ slack), the
//!   orphaned copy keeps running until the agent comes back on its data directory, registers,
//!   is told to stop it, and does.
//! - `partition_then_heal_fences_the_stale_copy`: an agent's link to the head goes through a
//!   TCP proxy that is cut (a partition) and healed; both copies run for a while (the window
//!   is measured and printed), then the partitioned agent reaches the head again and stops its
//!   copy: one copy remains. `silent_partition_then_heal_fences_the_stale_copy` does the same
//!   with a partition that closes nothing (a black hole: the agent notices nothing).
//! - `drain_moves_actors_without_losing_them`: `berth drain` moves both actors of a node, none
//!   is lost on the way, their old processes end with SIGTERM, and the node takes no new work.
//!
//! Which process belongs to which copy is read from `/proc`: every attempt runs in
//! `DATA_DIR/agents/<node>/work/<actor>-<attempt>/`, so a process's working directory names
//! its node, actor and attempt, and its process group is the copy (the runner starts each
//! attempt as the leader of its own group). Only this test's temporary data directory counts,
//! so other tests running on the machine are never mistaken for ours.
//!
//! The tests take turns (a lock), so that the timing bounds measure Berth and not several
//! clusters competing for the machine's cores.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

mod common;
use common::cluster::{created_id, wait_for, Cluster, Daemon, WAIT};
use common::proxy::Proxy;

/// The head's `--heartbeat-timeout`, in seconds.
const HEARTBEAT_TIMEOUT_S: f64 = 1.0;
/// How long after an agent's death its actor may take to be ALIVE elsewhere: the heartbeat
/// timeout + 1 s (the bound of the issue) + 1 s of slack for two shared cores.
const MOVE_BOUND: Duration = Duration::from_secs(3);
/// The longest wait for an agent to stop a copy once it could: its re-registration (a
/// reconnection backoff of 1 s) and a SIGTERM.
const STOP_BOUND: Duration = Duration::from_secs(10);

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time (a failed test must not block the others: poisoning is ignored).
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// An agent for node `id` joining the head (or proxy) at `address`: 4 CPUs, label `zone=<id>`,
/// 5 s between SIGTERM and SIGKILL (so an end by signal 15 shows a SIGTERM was enough).
fn agent(cluster: &Cluster, address: &str, id: &str) -> Daemon {
    let zone = format!("zone={id}");
    cluster.spawn(
        &format!("agent-{id}"),
        &[
            "start",
            "--address",
            address,
            "--node-id",
            id,
            "--num-cpus",
            "4",
            "--labels",
            &zone,
            "--grace-period",
            "5",
        ],
    )
}

/// `berth actor create` of `sh -c SCRIPT` (1 CPU, 2 restarts) preferring node `prefer` (soft
/// node affinity: elsewhere when it cannot be there); its ID.
fn create_actor(cluster: &Cluster, script: &str, prefer: &str) -> String {
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
fn wait_alive_on(cluster: &Cluster, actor: &str, node: &str) -> Value {
    cluster.wait_object(actor, &format!("is ALIVE on {node}"), |o| {
        o["state"] == "ALIVE" && o["node_id"] == node
    })
}

/// When the last event `kind` about `node` happened (ms since the epoch, the head's clock).
fn event_at(object: &Value, kind: &str, node: &str) -> Option<u64> {
    object["history"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["kind"] == kind && e["node_id"] == node)
        .and_then(|e| e["at_ms"].as_u64())
}

/// The kinds of an object's events, in order.
fn events(object: &Value) -> Vec<String> {
    let history = object["history"].as_array().cloned().unwrap_or_default();
    history.iter().map(|e| e["kind"].as_str().unwrap_or("?").to_string()).collect()
}

/// One running process of an attempt, found in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Proc {
    node: String,
    work_id: String,
    attempt: u32,
    pgid: i32,
    pid: i32,
}

/// State (field 3) and process group (field 5) of `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state: the parent (field 4), then the group (field 5).
    let pgid = fields.nth(1)?.parse().ok()?;
    Some((state, pgid))
}

/// True while process `pid` exists and is not a zombie (dead, not yet reaped).
fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

/// Every live process working in an attempt directory of this cluster's agents
/// (`DATA_DIR/agents/<node>/work/<work>-<attempt>/`).
fn processes(cluster: &Cluster) -> Vec<Proc> {
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
fn copies(cluster: &Cluster, work_id: &str) -> Vec<(String, u32, i32)> {
    let groups: BTreeSet<(String, u32, i32)> = processes(cluster)
        .into_iter()
        .filter(|p| p.work_id == work_id)
        .map(|p| (p.node, p.attempt, p.pgid))
        .collect();
    groups.into_iter().collect()
}

/// Waits until the copies of `work_id` run on exactly `nodes` (one copy per entry); returns
/// them (node, attempt, process group), sorted by node.
fn wait_copies(cluster: &Cluster, work_id: &str, nodes: &[&str]) -> Vec<(String, u32, i32)> {
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
fn agent_dir(cluster: &Cluster, node: &str) -> PathBuf {
    cluster.data_dir().join("agents").join(node)
}

/// The PID `node`'s `state.json` records for `work_id`.
fn recorded_pid(cluster: &Cluster, node: &str, work_id: &str) -> Option<i32> {
    let path = agent_dir(cluster, node).join(berth_agent::process::STATE_FILE);
    let text = std::fs::read_to_string(path).ok()?;
    let state: Value = serde_json::from_str(&text).ok()?;
    state["processes"]
        .as_array()?
        .iter()
        .find(|p| p["work_id"] == work_id)
        .and_then(|p| p["pid"].as_i64())
        .map(|pid| pid as i32)
}

/// Waits until `path` holds `text`.
fn wait_file_contains(path: &Path, text: &str) -> String {
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
fn wait_gone(what: &str, pid: i32, timeout: Duration) -> Duration {
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

/// SIGKILL to an agent: its actor is ALIVE on the other agent within the heartbeat timeout
/// plus 1 s; the killed agent's copy keeps running, unwatched, until an agent is started again
/// on that node's directory: it adopts the copy, registers, is told the actor is no longer
/// placed there, and stops it; the moved copy is untouched.
#[test]
fn killed_agent_actor_moves_then_old_copy_is_stopped() {
    let _serial = serial();
    let cluster = Cluster::new();
    let timeout = HEARTBEAT_TIMEOUT_S.to_string();
    let (_head, address) = cluster.head(&["--heartbeat-timeout", &timeout]);
    let mut a = agent(&cluster, &address, "a");
    let _b = agent(&cluster, &address, "b");
    cluster.wait_node("a", "ALIVE");
    cluster.wait_node("b", "ALIVE");

    let actor = create_actor(&cluster, "echo started; sleep 600", "a");
    wait_alive_on(&cluster, &actor, "a");
    let out = agent_dir(&cluster, "a").join("logs").join(format!("{actor}.out"));
    wait_file_contains(&out, "started");
    let on_a = wait_copies(&cluster, &actor, &["a"]).remove(0);
    let old_pid = recorded_pid(&cluster, "a", &actor).expect("a's state.json records the actor");
    assert_eq!(on_a.2, old_pid, "the recorded PID leads the copy's group: {on_a:?}");

    // The agent dies without a word (its processes are in their own groups: they live on).
    let killed_at = Instant::now();
    let killed_ms = now_ms();
    a.kill();
    let moved = wait_for(&format!("{actor} is ALIVE on b"), WAIT, || {
        let object = cluster.json(&["get", &actor]);
        if object["state"] == "ALIVE" && object["node_id"] == "b" {
            Ok(object)
        } else {
            Err(object.to_string())
        }
    });
    let delay = killed_at.elapsed();
    let died = event_at(&moved, "node_died", "a").map(|at| at.saturating_sub(killed_ms));
    let started = event_at(&moved, "started", "b").map(|at| at.saturating_sub(killed_ms));
    println!(
        "kill -9 of agent a -> {actor} ALIVE on b: {delay:?} observed (head: node a declared \
         dead after {died:?} ms, started on b after {started:?} ms; bound {MOVE_BOUND:?})"
    );
    assert!(
        delay <= MOVE_BOUND,
        "{actor} took {delay:?} to be ALIVE on b after agent a was killed (heartbeat timeout \
         {HEARTBEAT_TIMEOUT_S} s; bound {MOVE_BOUND:?}):\n{moved}"
    );
    assert_eq!(moved["restarts"], 1, "{moved}");
    let node_a = cluster.json(&["get", "node", "a"]);
    assert_eq!(node_a["state"], "DEAD", "{node_a}");

    // Nobody stopped the copy on `a`: two copies run now.
    assert!(alive(old_pid), "the killed agent's copy (pid {old_pid}) still runs");
    let both = wait_copies(&cluster, &actor, &["a", "b"]);
    assert_eq!(both[0], on_a, "the copy on a is the one the killed agent started");
    let on_b = both[1].clone();
    assert!(on_b.1 > on_a.1, "the copy on b is a later attempt: {both:?}");

    // Agent `a` again, on the same data directory and node ID: it adopts the copy, registers,
    // the head's reply says stop it, and it does (SIGTERM is enough).
    let restarted_at = Instant::now();
    let a_again = agent(&cluster, &address, "a");
    let gone = wait_gone("the orphaned copy on a is stopped", old_pid, STOP_BOUND);
    println!(
        "agent a started again -> its stale copy (pid {old_pid}) gone after {gone:?} (agent \
         start {:?} ago)",
        restarted_at.elapsed()
    );
    let log = wait_file_contains(
        &agent_dir(&cluster, "a").join("logs").join(format!("{actor}.err")),
        &format!("{actor} attempt {} ended by signal 15", on_a.1),
    );
    assert!(!log.contains("ended by signal 9"), "a SIGTERM was enough:\n{log}");
    let registered = cluster.wait_node("a", "ALIVE");
    assert_eq!(registered["actors"], 0, "nothing is placed on a: {registered}");
    assert!(
        a_again.log().contains("adopted 1 process(es) the previous agent left running"),
        "{}",
        a_again.log()
    );
    assert_eq!(recorded_pid(&cluster, "a", &actor), None, "a no longer records the copy");

    // The moved copy keeps running: the same process, the same attempt, no new restart.
    let now = copies(&cluster, &actor);
    assert_eq!(now, vec![on_b.clone()], "only the copy on b runs");
    let after = cluster.json(&["get", &actor]);
    assert_eq!(
        (&after["state"], &after["node_id"], &after["restarts"]),
        (&"ALIVE".into(), &"b".into(), &1.into()),
        "{after}"
    );
    assert_eq!(after["history"], moved["history"], "nothing happened to {actor} meanwhile");
}

/// How the link of agent `a` to the head breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Partition {
    /// Every connection is closed and new ones are refused: the agent notices at once and
    /// keeps trying to register (refused) until the heal.
    Cut,
    /// Nothing gets through, nothing is closed: the agent notices nothing; after the heal, what
    /// was held back arrives, and the head's answer on the old session (its streams ended when
    /// it declared the node dead) sends the agent to register again.
    Silent,
}

/// A partition cut by closing the connections: see [`partition_then_heal`].
#[test]
fn partition_then_heal_fences_the_stale_copy() {
    partition_then_heal(Partition::Cut);
}

/// The same with a silent partition (a black hole): see [`partition_then_heal`].
#[test]
fn silent_partition_then_heal_fences_the_stale_copy() {
    partition_then_heal(Partition::Silent);
}

/// Agent `a` reaches the head through a proxy that breaks the link: the head declares `a` dead
/// and restarts its actor on `b` while `a`'s copy still runs (it cannot know). Healed, `a`
/// reaches the head again by itself, registers, is told to stop its copy, and does (before it
/// opens its assignment stream, so before it could start anything new): one copy remains.
///
/// The overlap this demonstrates, inherent in fencing by registration: two copies of the actor
/// run from the head's restart on `b` (the heartbeat timeout after the link broke) until the
/// partitioned agent reaches the head again (the heal, plus up to one reconnection backoff of
/// 1 s) and stops its copy (a SIGTERM). An agent cut off from the head does not stop its work
/// by itself, so a partition of N seconds lets two copies run for about N - timeout + 1
/// seconds. Here the heal comes as soon as both copies are seen: about 2 s of overlap.
fn partition_then_heal(partition: Partition) {
    let _serial = serial();
    let cluster = Cluster::new();
    let timeout = HEARTBEAT_TIMEOUT_S.to_string();
    let (_head, address) = cluster.head(&["--heartbeat-timeout", &timeout]);
    let proxy = Proxy::start(&address);
    let a = agent(&cluster, &proxy.address(), "a");
    let _b = agent(&cluster, &address, "b");
    let before = cluster.wait_node("a", "ALIVE");
    cluster.wait_node("b", "ALIVE");
    assert!(proxy.forwarded() > 0, "agent a talks to the head through the proxy");

    let actor = create_actor(&cluster, "sleep 600", "a");
    wait_alive_on(&cluster, &actor, "a");
    let on_a = wait_copies(&cluster, &actor, &["a"]).remove(0);

    // The partition.
    let cut_at = Instant::now();
    match partition {
        Partition::Cut => proxy.cut(),
        Partition::Silent => proxy.stall(),
    }
    let dead = cluster.wait_node("a", "DEAD");
    let dead_after = cut_at.elapsed();
    let moved = wait_alive_on(&cluster, &actor, "b");
    let both_from = Instant::now();
    println!(
        "{partition:?} partition -> node a DEAD after {dead_after:?} ({}), {actor} ALIVE on b \
         after {:?}",
        dead["dead_reason"],
        cut_at.elapsed()
    );
    assert_eq!(moved["restarts"], 1, "{moved}");

    // Two copies now: the partitioned one goes on.
    let both = wait_copies(&cluster, &actor, &["a", "b"]);
    assert_eq!(both[0], on_a, "the copy on a is the one started before the partition");
    let on_b = both[1].clone();
    assert!(on_b.1 > on_a.1, "the copy on b is a later attempt: {both:?}");
    if partition == Partition::Cut {
        // The agent keeps trying to reach the head (and is refused by the partition).
        let refused = proxy.refused();
        wait_for("agent a retries during the partition", WAIT, || {
            if proxy.refused() > refused {
                Ok(())
            } else {
                Err(format!("{} connections refused", proxy.refused()))
            }
        });
    }
    assert!(alive(on_a.2), "the partitioned copy still runs during the partition");

    // Healed: `a` comes back by itself and stops its copy.
    let healed_at = Instant::now();
    proxy.heal();
    wait_gone(&format!("the partitioned copy of {actor} is stopped"), on_a.2, STOP_BOUND);
    let both_ran = both_from.elapsed();
    let gone_after_heal = healed_at.elapsed();
    let back = cluster.wait_node("a", "ALIVE");
    let registered_ms = back["registered_at_ms"].as_u64().expect("registered_at_ms");
    assert!(
        registered_ms > before["registered_at_ms"].as_u64().unwrap_or(0),
        "a registered again: {back}"
    );
    let started_b = event_at(&moved, "started", "b").expect("started on b");
    println!(
        "{partition:?} partition: two copies of {actor} ran for {both_ran:?} (observed: from \
         ALIVE on b to the stale copy gone, {gone_after_heal:?} after the heal); head: a \
         registered again {} ms after the restart on b",
        registered_ms.saturating_sub(started_b)
    );
    let log = wait_file_contains(
        &agent_dir(&cluster, "a").join("logs").join(format!("{actor}.err")),
        &format!("{actor} attempt {} ended by signal 15", on_a.1),
    );
    assert!(!log.contains("ended by signal 9"), "a SIGTERM was enough:\n{log}");

    // Exactly one copy, on b, ALIVE, and the agent that was cut off holds nothing.
    assert_eq!(copies(&cluster, &actor), vec![on_b], "one copy of {actor} runs, on b");
    let after = cluster.json(&["get", &actor]);
    assert_eq!(
        (&after["state"], &after["node_id"], &after["restarts"]),
        (&"ALIVE".into(), &"b".into(), &1.into()),
        "{after}"
    );
    assert_eq!(after["history"], moved["history"], "nothing happened to {actor} meanwhile");
    assert_eq!(back["actors"], 0, "{back}");
    assert_eq!(recorded_pid(&cluster, "a", &actor), None, "a no longer records the copy");
    drop(a);
    drop(proxy);
}

/// `berth drain a` with two actors on `a`: both move to `b` and none is ever DEAD on the way
/// (each is ALIVE or, for a moment, RESTARTING), their processes on `a` end by SIGTERM, and
/// `a` stays DRAINING and takes no new actor.
#[test]
fn drain_moves_actors_without_losing_them() {
    let _serial = serial();
    let cluster = Cluster::new();
    let (_head, address) = cluster.head(&[]);
    let _a = agent(&cluster, &address, "a");
    let _b = agent(&cluster, &address, "b");
    cluster.wait_node("a", "ALIVE");
    cluster.wait_node("b", "ALIVE");

    let actors =
        [create_actor(&cluster, "sleep 600", "a"), create_actor(&cluster, "sleep 600", "a")];
    let mut old = Vec::new();
    for actor in &actors {
        wait_alive_on(&cluster, actor, "a");
        old.push(wait_copies(&cluster, actor, &["a"]).remove(0));
    }

    // Sampled from before the drain is sent until both are ALIVE on b: never DEAD, never
    // anything but ALIVE or RESTARTING (a move goes through RESTARTING for a moment).
    let drained_at = Instant::now();
    let drain = cluster.start(&["drain", "a", "--output", "json"]);
    let mut samples = 0;
    let mut fewest_alive = usize::MAX;
    wait_for("both actors are ALIVE on b", WAIT, || {
        let list = cluster.json(&["list", "actors"]);
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let ours: Vec<&Value> =
            items.iter().filter(|o| actors.iter().any(|id| o["actor_id"] == id.as_str())).collect();
        assert_eq!(ours.len(), 2, "both actors are listed: {list}");
        for actor in &ours {
            assert!(
                actor["state"] == "ALIVE" || actor["state"] == "RESTARTING",
                "an actor was lost while draining: {actor}"
            );
        }
        samples += 1;
        fewest_alive = fewest_alive.min(ours.iter().filter(|o| o["state"] == "ALIVE").count());
        if ours.iter().all(|o| o["state"] == "ALIVE" && o["node_id"] == "b") {
            Ok(())
        } else {
            Err(serde_json::to_string_pretty(&ours).unwrap_or_default())
        }
    });
    println!(
        "drain a -> both actors ALIVE on b after {:?}; {samples} samples, fewest ALIVE at once: \
         {fewest_alive}, none DEAD",
        drained_at.elapsed()
    );
    let drained = drain.finish(WAIT).json();
    assert_eq!(drained["state"], "DRAINING", "{drained}");

    for (actor, on_a) in actors.iter().zip(&old) {
        // Its process on a ended (SIGTERM, not the SIGKILL after the grace period); one copy
        // runs, on b. A move is not a restart.
        wait_gone(&format!("{actor}'s process on a ends"), on_a.2, STOP_BOUND);
        let log = wait_file_contains(
            &agent_dir(&cluster, "a").join("logs").join(format!("{actor}.err")),
            &format!("{actor} attempt {} ended by signal 15", on_a.1),
        );
        assert!(!log.contains("ended by signal 9"), "a SIGTERM was enough:\n{log}");
        let on_b = wait_copies(&cluster, actor, &["b"]).remove(0);
        assert!(on_b.1 > on_a.1, "the copy on b is a later attempt: {on_b:?}, {on_a:?}");
        let moved = cluster.json(&["get", actor]);
        assert_eq!(moved["restarts"], 0, "a move is not a restart: {moved}");
        assert!(moved["death_reason"].is_null(), "{moved}");
        // Its whole history, not only the samples: moved off a, started on b, never dead.
        let history = events(&moved);
        assert!(!history.iter().any(|e| e == "dead"), "{moved}");
        let left = event_at(&moved, "moved", "a").expect("a `moved` event off a");
        let started = event_at(&moved, "started", "b").expect("started on b");
        assert!(left <= started, "{moved}");
    }

    // `a` stays DRAINING and gets nothing new, even work that would rather be there.
    let newcomer = create_actor(&cluster, "sleep 600", "a");
    wait_alive_on(&cluster, &newcomer, "b");
    let node_a = cluster.json(&["get", "node", "a"]);
    assert_eq!(node_a["state"], "DRAINING", "{node_a}");
    assert_eq!(node_a["actors"], 0, "{node_a}");
    assert!(
        processes(&cluster).iter().all(|p| p.node != "a"),
        "nothing runs on a: {:?}",
        processes(&cluster)
    );
    let status = cluster.ok(&["status"]);
    assert!(status.contains("Nodes: 1 alive, 1 draining, 0 dead"), "{status}");
    assert!(status.contains("Actors: 3 ALIVE"), "{status}");
}
