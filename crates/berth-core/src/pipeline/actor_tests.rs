//! Actor affinity and anti-affinity (seed 000): the seed's Python and Java examples, namespaces,
//! zones, exclusive nodes by symmetry, pending until the peer arrives, and violations.

use std::collections::BTreeSet;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::actors::{
    ActorAffinity, ActorId, ActorSpec, AffinityExpression, AffinityOperator, MatchMode, OnPeerMoved,
};
use crate::diagnosis::ReasonKind;
use crate::labels::Labels;
use crate::node::NodeState;
use crate::pending::{PendingQueue, Trigger};
use crate::testutil::{index, labelled_cluster, request};

use AffinityOperator::{DoesNotExist, Exists, In, NotIn};

fn expr(key: &str, operator: AffinityOperator, values: &[&str]) -> AffinityExpression {
    let values = values.iter().map(|v| v.to_string()).collect();
    AffinityExpression::new(key, operator, values, false, None).unwrap()
}

fn soft(mut e: AffinityExpression) -> AffinityExpression {
    e.soft = true;
    e
}

fn per(mut e: AffinityExpression, topology: &str) -> AffinityExpression {
    e.topology_key = Some(topology.to_string());
    e
}

fn affinity(expressions: Vec<AffinityExpression>) -> Strategy {
    Strategy::ActorAffinity(ActorAffinity { expressions, ..ActorAffinity::default() })
}

fn actor(id: &str, namespace: &str, labels: &str) -> ActorSpec {
    ActorSpec::new(ActorId::new(id).unwrap(), namespace, Labels::parse_list(labels).unwrap())
        .unwrap()
}

/// n1, n2 in zone z1; n3, n4 in zone z2. Actors: a1 on n1 {location: dc_1}, a2 on n2
/// {location: dc_2, version: 1.0.0}, a3 on n3 {version: 2.0}; n4 hosts none.
fn cluster_with_actors() -> Cluster {
    let mut c = labelled_cluster(&[
        ("n1", "CPU=8", "zone=z1", ""),
        ("n2", "CPU=8", "zone=z1", ""),
        ("n3", "CPU=8", "zone=z2", ""),
        ("n4", "CPU=8", "zone=z2", ""),
    ]);
    for (id, node, labels) in [
        ("a1", "n1", "location=dc_1"),
        ("a2", "n2", "location=dc_2,version=1.0.0"),
        ("a3", "n3", "version=2.0"),
    ] {
        let n = index(&c, node);
        c.place_actor(&actor(id, "default", labels), n, ActorAffinity::default()).unwrap();
    }
    c
}

/// The nodes that pass every stage for `strategy`, and the node chosen.
fn passing(c: &mut Cluster, strategy: Strategy) -> (BTreeSet<String>, String) {
    let req = request(c, "CPU=1", strategy);
    let (decision, explanation) = Scheduler::new(SchedulerConfig::default()).place_explained(
        c,
        &req,
        &mut ChaCha8Rng::seed_from_u64(0),
    );
    let names = explanation.attempts[0]
        .nodes
        .iter()
        .filter(|n| n.passed())
        .map(|n| c.node(n.node).unwrap().id().to_string())
        .collect();
    let chosen = match decision {
        Decision::Placed(a) => c.node(a.node()).unwrap().id().to_string(),
        Decision::Pending(_) => "pending".into(),
        Decision::Infeasible(_) => "infeasible".into(),
    };
    (names, chosen)
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn seed_python_and_java_examples() {
    let cases: Vec<(&str, Vec<AffinityExpression>, &[&str])> = vec![
        ("python 1: IN", vec![expr("location", In, &["dc_1"])], &["n1"]),
        ("python 2: NOT_IN", vec![expr("location", NotIn, &["dc_1"])], &["n2", "n3", "n4"]),
        ("python 3: EXISTS", vec![expr("location", Exists, &[])], &["n1", "n2"]),
        ("python 4: DOES_NOT_EXIST", vec![expr("location", DoesNotExist, &[])], &["n3", "n4"]),
        (
            "python 5: several",
            vec![expr("location", DoesNotExist, &[]), expr("version", Exists, &[])],
            &["n3"],
        ),
        ("java 1: in", vec![expr("location", In, &["dc_1", "dc_2"])], &["n1", "n2"]),
        ("java 2: notIn", vec![expr("location", NotIn, &["dc-1"])], &["n1", "n2", "n3", "n4"]),
        ("java 3: exists", vec![expr("version", Exists, &[])], &["n2", "n3"]),
        ("java 4: doesNotExist", vec![expr("version", DoesNotExist, &[])], &["n1", "n4"]),
        (
            "java 5: several",
            vec![expr("version", DoesNotExist, &[]), expr("location", Exists, &[])],
            &["n1"],
        ),
    ];
    for (name, expressions, expected) in cases {
        let mut c = cluster_with_actors();
        let (passed, chosen) = passing(&mut c, affinity(expressions));
        assert_eq!(passed, set(expected), "{name}");
        assert!(expected.contains(&chosen.as_str()), "{name}: chose {chosen}");
    }
}

#[test]
fn namespaces_isolate() {
    let mut c = cluster_with_actors();
    let n4 = index(&c, "n4");
    c.place_actor(&actor("b1", "b", "location=dc_1"), n4, ActorAffinity::default()).unwrap();
    // A task looks in `default`: only a1 counts.
    let (passed, _) = passing(&mut c, affinity(vec![expr("location", In, &["dc_1"])]));
    assert_eq!(passed, set(&["n1"]));
    // An actor of namespace `b` sees only b1.
    let req = request(&mut c, "CPU=1", affinity(vec![expr("location", In, &["dc_1"])]))
        .with_actor(actor("b2", "b", ""));
    let decision = Scheduler::new(SchedulerConfig::default()).place(
        &mut c,
        &req,
        &mut ChaCha8Rng::seed_from_u64(0),
    );
    let Decision::Placed(a) = decision else { panic!("placed expected") };
    assert_eq!(a.node(), n4);
    // Namespace `c` has no actors: pending until one arrives.
    let req = request(&mut c, "CPU=1", affinity(vec![expr("location", In, &["dc_1"])]))
        .with_actor(actor("c1", "c", ""));
    assert!(matches!(
        Scheduler::new(SchedulerConfig::default()).place(
            &mut c,
            &req,
            &mut ChaCha8Rng::seed_from_u64(0)
        ),
        Decision::Pending(_)
    ));
}

#[test]
fn topology_key_widens_to_zones() {
    let cases: Vec<(Vec<AffinityExpression>, &[&str])> = vec![
        (vec![per(expr("location", In, &["dc_1"]), "zone")], &["n1", "n2"]),
        (vec![per(expr("version", NotIn, &["1.0.0"]), "zone")], &["n3", "n4"]),
        (vec![per(expr("version", Exists, &[]), "zone")], &["n1", "n2", "n3", "n4"]),
        (vec![per(expr("location", DoesNotExist, &[]), "zone")], &["n3", "n4"]),
        // Nodes without the topology label belong to no domain.
        (vec![per(expr("location", In, &["dc_1"]), "rack")], &[]),
        (vec![per(expr("location", NotIn, &["dc_1"]), "rack")], &["n1", "n2", "n3", "n4"]),
    ];
    for (expressions, expected) in cases {
        let mut c = cluster_with_actors();
        let label = expressions[0].to_string();
        let (passed, _) = passing(&mut c, affinity(expressions));
        assert_eq!(passed, set(expected), "{label}");
    }
}

#[test]
fn replicas_spread_across_zones_and_the_third_waits() {
    let mut c = labelled_cluster(&[
        ("n1", "CPU=8", "zone=z1", ""),
        ("n2", "CPU=8", "zone=z1", ""),
        ("n3", "CPU=8", "zone=z2", ""),
    ]);
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let spread = affinity(vec![per(expr("app", NotIn, &["web"]), "zone")]);
    let mut zones = BTreeSet::new();
    for i in 0..2 {
        let req = request(&mut c, "CPU=1", spread.clone()).with_actor(actor(
            &format!("web-{i}"),
            "",
            "app=web",
        ));
        let Decision::Placed(a) = scheduler.place(&mut c, &req, &mut rng) else {
            panic!("replica {i}")
        };
        zones.insert(c.node(a.node()).unwrap().labels().get("zone").unwrap().to_string());
    }
    assert_eq!(zones, set(&["z1", "z2"]));
    let req = request(&mut c, "CPU=1", spread).with_actor(actor("web-2", "", "app=web"));
    let Decision::Pending(d) = scheduler.place(&mut c, &req, &mut rng) else {
        panic!("third waits")
    };
    assert_eq!(d.totals(), [(ReasonKind::ActorAffinity(0), 3)]);
    assert_eq!(
        d.describe(&c),
        "ACTOR_AFFINITY: 0/3 nodes can take it now: 3 hard actor affinity expression 0 fails"
    );
}

#[test]
fn exclusive_node_by_symmetry() {
    let mut c = cluster_with_actors();
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let exclusive = affinity(vec![expr(crate::actors::ACTOR_ID, DoesNotExist, &[])]);
    let req = request(&mut c, "CPU=1", exclusive).with_actor(actor("solo", "", ""));
    let Decision::Placed(a) = scheduler.place(&mut c, &req, &mut rng) else { panic!("placed") };
    assert_eq!(a.node(), index(&c, "n4"), "the only node without actors");
    // Any later actor of the namespace is kept off n4, even without affinity of its own.
    for n in ["n1", "n2", "n3"] {
        let full = crate::testutil::resources(c.registry_mut(), "CPU=8");
        c.reserve(index(&c, n), &full).unwrap();
    }
    let req = request(&mut c, "CPU=1", Strategy::Default).with_actor(actor("late", "", "team=x"));
    let Decision::Pending(d) = scheduler.place(&mut c, &req, &mut rng) else { panic!("pending") };
    assert!(d.totals().contains(&(ReasonKind::AntiAffinityGuard, 1)), "{:?}", d.totals());
    // Once the exclusive actor leaves, the node is free for others.
    c.remove_actor("solo");
    let Decision::Placed(a) = scheduler.place(&mut c, &req, &mut rng) else { panic!("placed") };
    assert_eq!(a.node(), index(&c, "n4"));
}

#[test]
fn pending_until_the_peer_arrives_then_placed_next_to_it() {
    let mut c = cluster_with_actors();
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut queue = PendingQueue::new();
    let follower = request(&mut c, "CPU=1", affinity(vec![expr("app", In, &["db"])]))
        .with_actor(actor("cache", "", "app=cache"));
    assert!(queue.submit("cache", follower, &mut scheduler, &mut c, &mut rng).is_none());
    let waiting = queue.iter().next().unwrap();
    assert_eq!(
        waiting.diagnosis.describe(&c),
        "ACTOR_AFFINITY: 0/4 nodes can take it now: 4 hard actor affinity expression 0 fails"
    );
    // The peer is placed on n3 by node affinity.
    let db = request(
        &mut c,
        "CPU=1",
        Strategy::NodeAffinity(crate::request::NodeAffinity {
            node: "n3".into(),
            soft: false,
            spill_on_unavailable: false,
            fail_on_unavailable: false,
        }),
    )
    .with_actor(actor("db", "", "app=db"));
    assert!(matches!(scheduler.place(&mut c, &db, &mut rng), Decision::Placed(_)));
    let placed = queue.retry(Trigger::ActorsChanged, &mut scheduler, &mut c, &mut rng);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].1.node(), index(&c, "n3"));
    assert_eq!(c.actors().get("cache").unwrap().node(), index(&c, "n3"), "recorded on placement");
}

#[test]
fn affinity_never_hides_an_infeasible_request() {
    let mut c = cluster_with_actors();
    let req = request(&mut c, "CPU=100", affinity(vec![expr("app", In, &["db"])]));
    let decision = Scheduler::new(SchedulerConfig::default()).place(
        &mut c,
        &req,
        &mut ChaCha8Rng::seed_from_u64(0),
    );
    let Decision::Infeasible(d) = decision else { panic!("infeasible expected: {decision:?}") };
    assert_eq!(d.totals(), [(ReasonKind::InsufficientTotal(crate::resource::ResourceId::CPU), 4)]);
}

#[test]
fn match_any_needs_one_expression() {
    let mut c = cluster_with_actors();
    let strategy = Strategy::ActorAffinity(ActorAffinity {
        expressions: vec![expr("location", In, &["dc_1"]), expr("version", In, &["2.0"])],
        match_mode: MatchMode::Any,
        on_peer_moved: OnPeerMoved::Stay,
    });
    let (passed, _) = passing(&mut c, strategy);
    assert_eq!(passed, set(&["n1", "n3"]));
}

#[test]
fn soft_expressions_only_score() {
    let mut c = cluster_with_actors();
    // n2 hosts dc_2: preferred although n1 comes first and ties on utilisation.
    let (passed, chosen) = passing(&mut c, affinity(vec![soft(expr("location", In, &["dc_2"]))]));
    assert_eq!(passed, set(&["n1", "n2", "n3", "n4"]), "soft expressions filter nothing");
    assert_eq!(chosen, "n2");
    // Nothing satisfies it: still placed.
    let (_, chosen) = passing(&mut c, affinity(vec![soft(expr("location", In, &["nowhere"]))]));
    assert_ne!(chosen, "pending");
}

#[test]
fn followers_report_violations_when_their_peer_moves() {
    let mut c = cluster_with_actors();
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    for (id, on_peer_moved) in [("follows", OnPeerMoved::Follow), ("stays", OnPeerMoved::Stay)] {
        let strategy = Strategy::ActorAffinity(ActorAffinity {
            expressions: vec![expr("location", In, &["dc_1"])],
            match_mode: MatchMode::All,
            on_peer_moved,
        });
        let req = request(&mut c, "CPU=1", strategy).with_actor(actor(id, "", "location=dc_1"));
        let Decision::Placed(a) = scheduler.place(&mut c, &req, &mut rng) else { panic!() };
        assert_eq!(a.node(), index(&c, "n1"));
    }
    assert!(c.affinity_violations().is_empty(), "both sit next to a1");
    // a1 restarts on n4: "follows" is reported, "stays" stays; each still carries
    // location=dc_1 itself, which must not count as its own peer.
    let n4 = index(&c, "n4");
    c.place_actor(&actor("a1", "default", "location=dc_1"), n4, ActorAffinity::default()).unwrap();
    assert!(c.affinity_violations().is_empty(), "the two still name each other on n1");
    c.remove_actor("stays");
    assert_eq!(c.affinity_violations(), [ActorId::new("follows").unwrap()]);
}

#[test]
fn a_dead_node_takes_its_actors_with_it() {
    let mut c = cluster_with_actors();
    let n1 = index(&c, "n1");
    c.set_state(n1, NodeState::Dead).unwrap();
    assert!(c.actors().get("a1").is_none());
    assert!(c.actors().actors_on(n1).is_empty());
    let (passed, chosen) = passing(&mut c, affinity(vec![expr("location", In, &["dc_1"])]));
    assert!(passed.is_empty());
    assert_eq!(chosen, "pending");
}
