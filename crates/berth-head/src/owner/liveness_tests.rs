//! The heartbeat clock's state machine, with the clock in the test's hands
//! ([`Owner::check_liveness_at`]): ALIVE → SUSPECT → ALIVE leaves the work as it was, ALIVE →
//! SUSPECT → DEAD restarts it, a suspect node takes nothing new, a draining node returns to
//! draining, and a head that was itself stalled judges nobody on the round after the stall.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_api::agent::{status_report, RegisterRequest, Started, StatusReport, StatusReports};
use berth_api::rest::{ActorCreate, ActorState, NodeState};

use super::Owner;
use crate::command::{AgentCommand, Command};
use crate::metrics::Metrics;
use crate::work_keys::WorkKeys;
use crate::HeadConfig;

/// A fixed origin for the test's clock (ms since the epoch).
const T0: u64 = 1_000_000_000;

fn owner(dir: &std::path::Path) -> Owner {
    let (keys, _) = WorkKeys::load(&berth_store::Snapshot::default());
    Owner::new(HeadConfig::new(dir), Arc::new(Metrics::new()), Arc::new(keys))
}

/// One of the owner's cycles after `command`: apply, decide what waits, flush.
fn cycle(owner: &mut Owner, command: Command) {
    owner.apply(command);
    owner.retry_waiting();
    let _ = owner.flush();
    drop(owner.cycle.take_effects());
}

/// One tick of the heartbeat clock at `T0 + at`.
fn tick(owner: &mut Owner, at: u64) {
    owner.check_liveness_at(T0 + at);
    owner.retry_waiting();
    let _ = owner.flush();
    drop(owner.cycle.take_effects());
}

/// Node `id`'s last heartbeat was at `T0 + at`.
fn beat(owner: &Owner, id: &str, at: u64) {
    owner
        .nodes
        .link(id)
        .expect("registered")
        .liveness
        .last_seen_ms
        .store(T0 + at, Ordering::Release);
}

fn register(owner: &mut Owner, id: &str, cpus: &str) {
    let request = RegisterRequest {
        node_id: id.into(),
        address: format!("10.0.0.{}", id.len()),
        resources: [("CPU".into(), cpus.into())].into(),
        ..Default::default()
    };
    let reply = tokio::sync::oneshot::channel().0;
    cycle(owner, Command::Agent(AgentCommand::Register { request: Box::new(request), reply }));
    beat(owner, id, 0);
}

fn create_actor(owner: &mut Owner, seq: u64) {
    let body = ActorCreate {
        command: "sleep".into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        max_restarts: 3,
        ..Default::default()
    };
    let reply = tokio::sync::oneshot::channel().0;
    cycle(owner, Command::CreateActor { seq, body: Box::new(body), reply });
}

/// The agent of `node` reports that `actor`'s attempt `attempt` started.
fn started(owner: &mut Owner, node: &str, actor: &str, attempt: u32) {
    let report = StatusReport {
        node_id: node.into(),
        session: owner.nodes.link(node).expect("registered").liveness.session,
        work_id: actor.into(),
        attempt,
        status: Some(status_report::Status::Started(Started { pid: 42 })),
    };
    let reply = tokio::sync::oneshot::channel().0;
    let reports = StatusReports { reports: vec![report] };
    cycle(owner, Command::Agent(AgentCommand::Report { reports, reply }));
}

fn node_state(owner: &Owner, id: &str) -> NodeState {
    owner.view.node(id).unwrap().state
}

/// (state, node, restarts, history length) of an actor.
fn actor(owner: &Owner, id: &str) -> (ActorState, Option<String>, u32, usize) {
    let a = owner.view.actor(id).unwrap();
    (a.state, a.node_id.as_deref().map(str::to_string), a.restarts, a.history.len())
}

fn history_kinds(owner: &Owner, id: &str) -> Vec<String> {
    owner.view.node(id).unwrap().history.iter().map(|e| e.kind.clone()).collect()
}

/// The suspect threshold and the timeout of the default settings, in ms.
fn thresholds(owner: &Owner) -> (u64, u64) {
    let config = &owner.config;
    (config.suspect_after().as_millis() as u64, config.heartbeat_timeout.as_millis() as u64)
}

#[test]
fn the_defaults_suspect_a_node_after_a_third_of_the_timeout() {
    let config = HeadConfig::new("/nonexistent");
    assert_eq!(config.heartbeat_timeout, std::time::Duration::from_secs(30));
    assert_eq!(config.suspect_after(), std::time::Duration::from_secs(10));
    // A timeout too short for a third of it to exceed two intervals: straight to dead.
    let mut short = config.clone();
    short.heartbeat_timeout = std::time::Duration::from_millis(900);
    assert_eq!(short.suspect_after(), short.heartbeat_timeout);
}

#[test]
fn suspect_then_heard_again_leaves_the_work_untouched_and_takes_nothing_new_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = owner(dir.path());
    let (suspect_after, timeout) = thresholds(&owner);
    register(&mut owner, "a", "4");
    create_actor(&mut owner, 1);
    started(&mut owner, "a", "actor-1", 1);
    let before = actor(&owner, "actor-1");
    assert_eq!((before.0, before.1.as_deref(), before.2), (ActorState::Alive, Some("a"), 0));

    // Silent, but not past the threshold: alive.
    tick(&mut owner, suspect_after / 2);
    assert_eq!(node_state(&owner, "a"), NodeState::Alive);
    // Past it: suspect, and nothing of its work moves.
    tick(&mut owner, suspect_after + 1);
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
    assert_eq!(actor(&owner, "actor-1"), before, "nothing restarted while suspect");
    assert_eq!(owner.cluster.node(owner.nodes["a"].index).unwrap().available().iter().count(), 1);
    // New work does not go there: it waits for the node.
    create_actor(&mut owner, 2);
    let waiting = owner.view.actor("actor-2").unwrap();
    assert_eq!((waiting.state, waiting.node_id.as_deref()), (ActorState::Pending, None));
    let summary = &waiting.diagnosis.as_ref().expect("a diagnosis").summary;
    assert!(summary.contains("1 suspect"), "{summary}");
    // Still silent, still short of the timeout: still suspect, still nothing moved.
    tick(&mut owner, (suspect_after + timeout) / 2);
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
    assert_eq!(actor(&owner, "actor-1"), before);

    // Heard again: alive, the same work, and what waited is placed there.
    let back = (suspect_after + timeout) / 2 + 1;
    beat(&owner, "a", back);
    tick(&mut owner, back + 1);
    assert_eq!(node_state(&owner, "a"), NodeState::Alive);
    assert_eq!(actor(&owner, "actor-1"), before, "the same attempt, never restarted");
    assert_eq!(owner.view.actor("actor-2").unwrap().node_id.as_deref(), Some("a"));
    assert_eq!(history_kinds(&owner, "a"), ["registered", "suspect", "alive"]);
    let metrics = owner.metrics.render();
    for (to, n) in [("suspect", 1), ("alive", 1)] {
        let line = format!("berth_node_transitions_total{{to=\"{to}\"}} {n}");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("to=\"dead\""), "{metrics}");
}

#[test]
fn suspect_then_silent_past_the_timeout_is_dead_and_its_work_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = owner(dir.path());
    let (suspect_after, timeout) = thresholds(&owner);
    register(&mut owner, "a", "4");
    register(&mut owner, "b", "4");
    create_actor(&mut owner, 1);
    let on = actor(&owner, "actor-1").1.expect("placed");
    started(&mut owner, &on, "actor-1", 1);
    let other = if on == "a" { "b" } else { "a" };
    // The other node keeps beating; `on` goes silent.
    let mut at = 0;
    while at <= timeout {
        at += suspect_after / 2;
        beat(&owner, other, at);
        tick(&mut owner, at);
        let state = node_state(&owner, &on);
        let expected = match at {
            t if t > timeout => NodeState::Dead,
            t if t > suspect_after => NodeState::Suspect,
            _ => NodeState::Alive,
        };
        assert_eq!(state, expected, "at {at} ms");
        if expected != NodeState::Dead {
            assert_eq!(actor(&owner, "actor-1").2, 0, "not restarted at {at} ms");
        }
    }
    let node = owner.view.node(&on).unwrap();
    let reason = node.dead_reason.as_deref().unwrap();
    assert!(reason.starts_with("no heartbeat for "), "{reason}");
    assert_eq!(history_kinds(&owner, &on), ["registered", "suspect", "dead"]);
    let moved = actor(&owner, "actor-1");
    assert_eq!((moved.1.as_deref(), moved.2), (Some(other), 1), "restarted on {other}");
    assert_eq!(node_state(&owner, other), NodeState::Alive);
    let metrics = owner.metrics.render();
    for to in ["suspect", "dead"] {
        let line = format!("berth_node_transitions_total{{to=\"{to}\"}} 1");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[test]
fn a_draining_node_that_was_suspect_is_draining_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = owner(dir.path());
    let (suspect_after, _) = thresholds(&owner);
    register(&mut owner, "a", "4");
    owner.drain_node("a").unwrap();
    tick(&mut owner, suspect_after + 1);
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
    // What is stored is the state it returns to.
    assert_eq!(owner.nodes["a"].record.node.state, NodeState::Draining);
    beat(&owner, "a", suspect_after + 2);
    tick(&mut owner, suspect_after + 3);
    assert_eq!(node_state(&owner, "a"), NodeState::Draining);
    assert_eq!(
        owner.cluster.node(owner.nodes["a"].index).unwrap().state(),
        berth_core::NodeState::Draining
    );
    // Undrained while suspect: alive once heard from, not before.
    tick(&mut owner, 2 * suspect_after + 3);
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
    owner.undrain_node("a").unwrap();
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
    beat(&owner, "a", 2 * suspect_after + 4);
    tick(&mut owner, 2 * suspect_after + 5);
    assert_eq!(node_state(&owner, "a"), NodeState::Alive);
}

#[test]
fn an_agent_that_registers_again_while_suspect_is_alive_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = owner(dir.path());
    let (suspect_after, _) = thresholds(&owner);
    register(&mut owner, "a", "4");
    tick(&mut owner, suspect_after + 1);
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
    register(&mut owner, "a", "4");
    assert_eq!(node_state(&owner, "a"), NodeState::Alive);
    assert_eq!(history_kinds(&owner, "a"), ["registered", "suspect", "alive", "registered_again"]);
}

#[test]
fn after_the_head_itself_stalled_nobody_is_judged_until_the_next_round() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = owner(dir.path());
    let (suspect_after, timeout) = thresholds(&owner);
    register(&mut owner, "a", "4");
    tick(&mut owner, 0);
    // The head ran nothing for longer than the timeout (a paused or starved process): the
    // node's beats of that time may still wait in the socket.
    let resumed = timeout + suspect_after;
    tick(&mut owner, resumed);
    assert_eq!(node_state(&owner, "a"), NodeState::Alive, "not judged on the first round");
    // The agent protocol had its turn: the beats arrived.
    beat(&owner, "a", resumed + 10);
    tick(&mut owner, resumed + 20);
    assert_eq!(node_state(&owner, "a"), NodeState::Alive);
    assert_eq!(history_kinds(&owner, "a"), ["registered"]);
    // Had they not, the next round judges as usual.
    tick(&mut owner, resumed + 20 + suspect_after);
    tick(&mut owner, resumed + 20 + 2 * suspect_after - 1);
    assert_eq!(node_state(&owner, "a"), NodeState::Suspect);
}
