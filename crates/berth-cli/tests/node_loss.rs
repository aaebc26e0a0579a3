//! Losing a node, end to end with the real `berth` binary: a head and agents as separate
//! processes that run real processes, the way a user runs a cluster (README, "Running a
//! cluster"). The promise under test: **at most one live attempt of an actor**. A node whose
//! agent cannot renew its lease with the head has its processes killed by its keeper before the
//! head can declare it dead and start the work elsewhere.
//!
//! - `killed_agent_never_restarted_its_copy_ends_before_the_next_starts`: an agent is killed
//!   with SIGKILL and never started again; its actor's process is gone when the head declares
//!   the node dead, and the actor is ALIVE on the other node.
//! - `restarted_agent_adopts_its_work_within_the_lease`: an agent killed and started again
//!   at once adopts its actor's process (the same process, no restart), and the new agent's
//!   keeper takes over from the old one.
//! - `a_stopped_agent_past_its_lease_loses_its_work_before_it_moves`: an agent stopped with
//!   SIGSTOP for longer than the heartbeat timeout; its copy is gone when the node is declared
//!   dead; continued, the agent registers again and holds nothing.
//! - `partition_then_heal_fences_the_stale_copy`: an agent's link to the head goes through a
//!   TCP proxy that is cut (a partition) and healed; the partitioned copy is gone before the
//!   head restarts the actor elsewhere, and healed, the agent registers again and holds
//!   nothing. `silent_partition_then_heal_fences_the_stale_copy` does the same with a
//!   partition that closes nothing (a black hole: the agent notices nothing).
//! - `a_stopped_agent_is_suspect_then_alive_again_with_its_work_untouched`: an agent stopped
//!   with SIGSTOP for longer than the suspect threshold but shorter than its lease (a machine
//!   too busy to run it) makes its node SUSPECT, not DEAD: new work waits instead of going
//!   there, its actor is not restarted; continued, the node is ALIVE again with the same actor
//!   process, and the head logged both at their levels.
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

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

mod common;
use common::cluster::{wait_for, Cluster, Daemon, WAIT};
use common::proxy::Proxy;
use common::work::*;

/// The head's `--heartbeat-timeout`, in seconds: the node's lease runs out 0.4 s before it.
const HEARTBEAT_TIMEOUT_S: f64 = 2.0;
/// How long after an agent's death its actor may take to be ALIVE elsewhere before the test
/// calls it a hang: ten times the typical figure (about 2.5 s: the heartbeat timeout and a
/// start), which the test prints. A bound near the figure would measure the machine's load.
const MOVE_BOUND: Duration = Duration::from_secs(25);
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

/// A head with `--heartbeat-timeout timeout_s` and agents `a` and `b`, both ALIVE: the head,
/// the agents, and node `a` as the head first showed it. Bind every daemon (not `..`): one
/// dropped is stopped.
struct TwoNodes {
    head: Daemon,
    a: Daemon,
    _b: Daemon,
    before: Value,
}

fn two_nodes(cluster: &Cluster, timeout_s: &str) -> TwoNodes {
    let (head, address) = cluster.head(&["--heartbeat-timeout", timeout_s]);
    let a = agent(cluster, &address, "a");
    let b = agent(cluster, &address, "b");
    let before = cluster.wait_node("a", "ALIVE");
    cluster.wait_node("b", "ALIVE");
    TwoNodes { head, a, _b: b, before }
}

/// Waits until the head declares `node` dead and, at that moment, checks that the process
/// group `old` (the node's copy of some work) is already gone: the keeper killed it when the
/// node's lease ran out, before the head could decide. Returns the node.
fn dead_with_copy_gone(cluster: &Cluster, node: &str, old: i32) -> Value {
    let dead = cluster.wait_node(node, "DEAD");
    assert!(
        !alive(old),
        "node {node} is DEAD and its copy (group {old}) still runs: two attempts could run \
         at once: {dead}"
    );
    dead
}

/// The line the keeper writes to a work's stderr log when it kills an attempt.
fn keeper_line(work_id: &str, attempt: u32) -> String {
    format!("{work_id} attempt {attempt} killed at ")
}

/// SIGKILL to an agent that is never started again: its actor's process is gone by the time
/// the head declares the node dead (its keeper killed it when the lease ran out), the actor
/// is ALIVE on the other agent within the heartbeat timeout and a start, and one copy runs.
#[test]
fn killed_agent_never_restarted_its_copy_ends_before_the_next_starts() {
    let _serial = serial();
    let cluster = Cluster::new();
    let timeout = HEARTBEAT_TIMEOUT_S.to_string();
    let TwoNodes { head: _head, mut a, _b, .. } = two_nodes(&cluster, &timeout);

    let actor = create_actor(&cluster, "echo started; sleep 600", "a");
    wait_alive_on(&cluster, &actor, "a");
    let out = agent_dir(&cluster, "a").join("logs").join(format!("{actor}.out"));
    wait_file_contains(&out, "started");
    let on_a = wait_copies(&cluster, &actor, &["a"]).remove(0);
    let old_pid = recorded_pid(&cluster, "a", &actor).expect("a's state.json records the actor");
    assert_eq!(on_a.2, old_pid, "the recorded PID leads the copy's group: {on_a:?}");

    // The agent dies without a word; its processes are in their own groups, its keeper too.
    let killed_at = Instant::now();
    let killed_ms = now_ms();
    a.kill();
    let gone = wait_gone("the keeper kills the orphaned copy", old_pid, MOVE_BOUND);
    dead_with_copy_gone(&cluster, "a", old_pid);
    let moved = wait_alive_on(&cluster, &actor, "b");
    let delay = killed_at.elapsed();
    let died = event_at(&moved, "node_died", "a").map(|at| at.saturating_sub(killed_ms));
    let started = event_at(&moved, "started", "b").map(|at| at.saturating_sub(killed_ms));
    println!(
        "kill -9 of agent a -> its copy gone after {gone:?} (observed), node a declared dead \
         after {died:?} ms, {actor} started on b after {started:?} ms (head), ALIVE on b seen \
         after {delay:?} (heartbeat timeout {HEARTBEAT_TIMEOUT_S} s; bound {MOVE_BOUND:?})"
    );
    assert!(delay <= MOVE_BOUND, "{actor} took {delay:?} to be ALIVE on b:\n{moved}");
    assert_eq!(moved["restarts"], 1, "{moved}");
    let on_b = wait_copies(&cluster, &actor, &["b"]).remove(0);
    assert!(on_b.1 > on_a.1, "the copy on b is a later attempt: {on_b:?}");
    let log = wait_file_contains(
        &agent_dir(&cluster, "a").join("logs").join(format!("{actor}.err")),
        &keeper_line(&actor, on_a.1),
    );
    assert!(log.contains("by the node's keeper: the head acknowledged no heartbeat for"), "{log}");
    let keeper = std::fs::read_to_string(agent_dir(&cluster, "a").join("keeper.log"))
        .expect("the keeper's log");
    assert!(keeper.contains("the node's lease ran out: killed its 1 process group(s)"), "{keeper}");
}

/// SIGKILL to an agent, started again at once on the same directory: within its lease it
/// adopts its actor's process (the same process, no restart, the head never declares it
/// dead), and the new agent's keeper takes over from the old one, which steps aside.
#[test]
fn restarted_agent_adopts_its_work_within_the_lease() {
    let _serial = serial();
    let cluster = Cluster::new();
    // Long enough that a restart fits in the lease on a busy machine.
    let (_head, address) = cluster.head(&["--heartbeat-timeout", "10"]);
    let mut a = agent(&cluster, &address, "a");
    let before = cluster.wait_node("a", "ALIVE");
    let actor = create_actor(&cluster, "sleep 600", "a");
    let placed = wait_alive_on(&cluster, &actor, "a");
    let on_a = wait_copies(&cluster, &actor, &["a"]).remove(0);

    a.kill();
    let again = agent(&cluster, &address, "a");
    cluster.wait_registered_again("a", &before, WAIT);
    let keeper_log = agent_dir(&cluster, "a").join("keeper.log");
    wait_file_contains(&keeper_log, "a newer agent holds the lease; its keeper takes over");
    assert!(
        again.log().contains("adopted 1 process(es) the previous agent left running"),
        "{}",
        again.log()
    );
    assert_eq!(copies(&cluster, &actor), vec![on_a], "the same process runs, adopted");
    let after = cluster.json(&["get", &actor]);
    assert_eq!(after["history"], placed["history"], "nothing happened to {actor}: {after}");
    let log =
        std::fs::read_to_string(agent_dir(&cluster, "a").join("keeper.log")).unwrap_or_default();
    assert_eq!(log.matches("keeping the node's lease").count(), 2, "{log}");
    assert!(!log.contains("lease ran out"), "{log}");
}

/// Agent `a` is stopped (SIGSTOP) for longer than the heartbeat timeout: its keeper, a process
/// of its own, kills its copy when the lease runs out, before the head declares `a` dead and
/// starts the actor on `b`. Continued, `a` registers again and holds nothing.
#[test]
fn a_stopped_agent_past_its_lease_loses_its_work_before_it_moves() {
    use nix::sys::signal::Signal;
    let _serial = serial();
    let cluster = Cluster::new();
    let timeout = HEARTBEAT_TIMEOUT_S.to_string();
    let TwoNodes { head: _head, mut a, _b, before } = two_nodes(&cluster, &timeout);
    let actor = create_actor(&cluster, "sleep 600", "a");
    wait_alive_on(&cluster, &actor, "a");
    let on_a = wait_copies(&cluster, &actor, &["a"]).remove(0);

    let stopped_at = Instant::now();
    a.signal(Signal::SIGSTOP);
    dead_with_copy_gone(&cluster, "a", on_a.2);
    let moved = wait_alive_on(&cluster, &actor, "b");
    println!("agent a stopped -> {actor} ALIVE on b after {:?}", stopped_at.elapsed());
    a.signal(Signal::SIGCONT);

    let back = cluster.wait_registered_again("a", &before, WAIT);
    assert_eq!(back["actors"], 0, "{back}");
    let on_b = wait_copies(&cluster, &actor, &["b"]).remove(0);
    assert_eq!(copies(&cluster, &actor), vec![on_b], "one copy of {actor} runs, on b");
    let log = wait_file_contains(
        &agent_dir(&cluster, "a").join("logs").join(format!("{actor}.err")),
        &keeper_line(&actor, on_a.1),
    );
    assert!(log.contains(&format!("{actor} attempt {} ended by signal 9", on_a.1)), "{log}");
    let after = cluster.json(&["get", &actor]);
    assert_eq!(after["history"], moved["history"], "nothing happened to {actor} meanwhile");
    assert_eq!(recorded_pid(&cluster, "a", &actor), None, "a no longer records the copy");
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

/// Agent `a` reaches the head through a proxy that breaks the link. Cut off, `a` cannot renew
/// its lease: its keeper kills its copy when the lease runs out, and the head, which declares
/// `a` dead only after the whole timeout, then restarts the actor on `b`. At no moment do two
/// copies run. Healed, `a` reaches the head again by itself, registers and holds nothing.
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
    let gone = wait_gone("the keeper kills the partitioned copy", on_a.2, MOVE_BOUND);
    let dead = dead_with_copy_gone(&cluster, "a", on_a.2);
    let dead_after = cut_at.elapsed();
    let moved = wait_alive_on(&cluster, &actor, "b");
    println!(
        "{partition:?} partition -> the copy on a gone after {gone:?}, node a DEAD seen after \
         {dead_after:?} ({}), {actor} ALIVE on b after {:?}",
        dead["dead_reason"],
        cut_at.elapsed()
    );
    assert_eq!(moved["restarts"], 1, "{moved}");
    let on_b = wait_copies(&cluster, &actor, &["b"]).remove(0);
    assert!(on_b.1 > on_a.1, "the copy on b is a later attempt: {on_b:?}");
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

    // Healed: `a` comes back by itself, with nothing to stop.
    proxy.heal();
    let back = cluster.wait_registered_again("a", &before, WAIT);
    let log = wait_file_contains(
        &agent_dir(&cluster, "a").join("logs").join(format!("{actor}.err")),
        &keeper_line(&actor, on_a.1),
    );
    assert!(log.contains("by the node's keeper"), "{log}");

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
    wait_for("a no longer records the copy", WAIT, || match recorded_pid(&cluster, "a", &actor) {
        None => Ok(()),
        Some(pid) => Err(format!("a records {pid}")),
    });
    drop(a);
    drop(proxy);
}

/// The head's `--heartbeat-timeout` for the SIGSTOP test, in seconds: its nodes are SUSPECT
/// after a third of it (3 s), and the node's lease runs out 1.8 s before it, which leaves
/// 4.2 s to see that and continue the agent, on a machine busy with other tests.
const SUSPECT_TEST_TIMEOUT_S: u64 = 9;
/// How long the stopped agent's lease lasts: the timeout less the margin (a fifth of it).
const SUSPECT_TEST_LEASE: Duration = Duration::from_millis(SUSPECT_TEST_TIMEOUT_S * 800);

/// Agent `a` is stopped (SIGSTOP: it runs nothing, answers nothing, its connection stays open,
/// as on a machine too loaded to schedule it) until the head calls `a` SUSPECT, then
/// continued before its lease runs out. Meanwhile an actor that must run on `a` waits (PENDING) rather than going there,
/// and `a`'s actor is left as it is; continued, `a` is ALIVE again without registering anew,
/// the waiting actor starts there, and the first one is the same process, never restarted.
#[test]
fn a_stopped_agent_is_suspect_then_alive_again_with_its_work_untouched() {
    use nix::sys::signal::Signal;
    let _serial = serial();
    let cluster = Cluster::new();
    let timeout = SUSPECT_TEST_TIMEOUT_S.to_string();
    let TwoNodes { head, mut a, _b, before } = two_nodes(&cluster, &timeout);
    let actor = create_actor(&cluster, "sleep 600", "a");
    let placed = wait_alive_on(&cluster, &actor, "a");
    let copy = wait_copies(&cluster, &actor, &["a"]).remove(0);

    let stopped_at = Instant::now();
    a.signal(Signal::SIGSTOP);
    // Polled, not waited for: it must be seen SUSPECT before the timeout would make it DEAD.
    let suspect = wait_for("node a is no longer ALIVE", WAIT, || {
        let node = cluster.json(&["get", "node", "a"]);
        if node["state"] == "ALIVE" {
            Err(node.to_string())
        } else {
            Ok(node)
        }
    });
    let suspect_after = stopped_at.elapsed();
    assert_eq!(suspect["state"], "SUSPECT", "after {suspect_after:?}: {suspect}");
    assert_eq!(events(&suspect).last().map(String::as_str), Some("suspect"), "{suspect}");
    // New work that must go to `a` waits for it; `a`'s actor is left alone.
    let strategy = r#"{"type": "NODE_AFFINITY", "node_id": "a", "soft": false}"#;
    let waiting = cluster.sleeper(&["--resources", "CPU=1", "--strategy", strategy]);
    let pending = cluster.json(&["get", &waiting]);
    assert_eq!(pending["state"], "PENDING", "{pending}");
    assert_eq!(cluster.json(&["get", &actor])["history"], placed["history"]);
    let status = cluster.ok(&["status"]);
    assert!(status.contains("1 suspect (heartbeats late)"), "{status}");
    let still = cluster.json(&["get", "node", "a"]);
    let stopped_for = stopped_at.elapsed();
    a.signal(Signal::SIGCONT);
    assert_eq!(still["state"], "SUSPECT", "still suspect after {stopped_for:?}: {still}");
    assert!(
        stopped_for < SUSPECT_TEST_LEASE,
        "the agent must be continued within its lease (the machine is too slow?): {stopped_for:?}"
    );

    let back = cluster.wait_node("a", "ALIVE");
    println!(
        "agent a stopped: SUSPECT seen after {suspect_after:?}, continued after {stopped_for:?}, \
         ALIVE again after {:?}",
        stopped_at.elapsed()
    );
    let kinds = events(&back);
    assert_eq!(&kinds[kinds.len() - 2..], ["suspect", "alive"], "{back}");
    assert!(!kinds.contains(&"dead".to_string()), "{back}");
    assert_eq!(back["registered_at_ms"], before["registered_at_ms"], "the same session: {back}");
    wait_alive_on(&cluster, &waiting, "a");
    let after = cluster.json(&["get", &actor]);
    assert_eq!((&after["state"], &after["node_id"]), (&"ALIVE".into(), &"a".into()), "{after}");
    assert_eq!(after["restarts"], 0, "{after}");
    assert_eq!(after["history"], placed["history"], "nothing happened to {actor}");
    assert_eq!(copies(&cluster, &actor), vec![copy], "the same process, on a");
    let log = head.log();
    for line in ["WARN", "node a is SUSPECT: no heartbeat for", "node a is ALIVE again"] {
        assert!(log.contains(line), "the head's log says {line:?}:\n{log}");
    }
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
