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
//! - `a_stopped_agent_is_suspect_then_alive_again_with_its_work_untouched`: an agent stopped
//!   with SIGSTOP for longer than the suspect threshold but shorter than the heartbeat timeout
//!   (a machine too busy to run it) makes its node SUSPECT, not DEAD: new work waits instead of
//!   going there, its actor is not restarted; continued, the node is ALIVE again with the same
//!   actor process, and the head logged both at their levels.
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

/// The head's `--heartbeat-timeout`, in seconds.
const HEARTBEAT_TIMEOUT_S: f64 = 1.0;
/// How long after an agent's death its actor may take to be ALIVE elsewhere before the test
/// calls it a hang: ten times the typical figure (about 2 s: the heartbeat timeout and a
/// start), which the test prints. A bound near the figure would measure the machine's load.
const MOVE_BOUND: Duration = Duration::from_secs(20);
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

/// The head's `--heartbeat-timeout` for the SIGSTOP test, in seconds: its nodes are SUSPECT
/// after a third of it (3 s), which leaves 6 s to see that and continue the agent, on a
/// machine busy with other tests.
const SUSPECT_TEST_TIMEOUT_S: u64 = 9;

/// Agent `a` is stopped (SIGSTOP: it runs nothing, answers nothing, its connection stays open,
/// as on a machine too loaded to schedule it) until the head calls `a` SUSPECT, then
/// continued. Meanwhile an actor that must run on `a` waits (PENDING) rather than going there,
/// and `a`'s actor is left as it is; continued, `a` is ALIVE again without registering anew,
/// the waiting actor starts there, and the first one is the same process, never restarted.
#[test]
fn a_stopped_agent_is_suspect_then_alive_again_with_its_work_untouched() {
    use nix::sys::signal::Signal;
    let _serial = serial();
    let cluster = Cluster::new();
    let timeout = SUSPECT_TEST_TIMEOUT_S.to_string();
    let (head, address) = cluster.head(&["--heartbeat-timeout", &timeout]);
    let mut a = agent(&cluster, &address, "a");
    let _b = agent(&cluster, &address, "b");
    let before = cluster.wait_node("a", "ALIVE");
    cluster.wait_node("b", "ALIVE");
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
        stopped_for < Duration::from_secs(SUSPECT_TEST_TIMEOUT_S),
        "the agent must be continued within the timeout (the machine is too slow?): {stopped_for:?}"
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
