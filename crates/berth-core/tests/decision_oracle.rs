//! Property test: the pipeline's outcome (placed / pending / infeasible) agrees with a
//! brute-force scan of the nodes, for every strategy that looks at all nodes, on random
//! clusters with random load, states and requests.

use berth_core::testutil::resources;
use berth_core::{
    Cluster, Decision, NodeId, NodeState, Quantity, Request, ResourceId, ResourceRegistry,
    ResourceSet, Scheduler, SchedulerConfig, Strategy as SchedulingStrategy,
};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug)]
struct NodeSpec {
    cpu: u32,
    gpu: u32,
    /// CPU and GPU shares already placed (GPU below 1 or whole).
    load: Vec<(u32, &'static str)>,
    state: NodeState,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    let gpu_share = prop::sample::select(vec!["0", "0.25", "0.5", "0.75", "1", "2"]);
    (
        1u32..=8,
        0u32..=4,
        prop::collection::vec((0u32..=4, gpu_share), 0..4),
        prop::sample::select(vec![
            NodeState::Alive,
            NodeState::Alive,
            NodeState::Draining,
            NodeState::Suspect,
            NodeState::Dead,
        ]),
    )
        .prop_map(|(cpu, gpu, load, state)| NodeSpec { cpu, gpu, load, state })
}

fn build(specs: &[NodeSpec]) -> Cluster {
    let mut cluster = Cluster::new(ResourceRegistry::default());
    for (i, spec) in specs.iter().enumerate() {
        let total =
            resources(cluster.registry_mut(), &format!("CPU={},GPU={}", spec.cpu, spec.gpu));
        let index = cluster.add_node(NodeId::new(&format!("n{i}")).unwrap(), total).unwrap();
        for (cpu, gpu) in &spec.load {
            let load = resources(cluster.registry_mut(), &format!("CPU={cpu},GPU={gpu}"));
            // Load that does not fit is simply not there.
            let _ = cluster.reserve(index, &load);
        }
        cluster.set_state(index, spec.state).unwrap();
    }
    cluster
}

/// True when a fraction fits in one instance, or a whole amount in whole free instances.
fn instances_fit(cluster: &Cluster, node: berth_core::NodeIndex, gpu: Quantity) -> bool {
    if gpu.is_zero() {
        return true;
    }
    let Some(pool) = cluster.node(node).unwrap().pool(ResourceId::GPU) else {
        return false;
    };
    let free: Vec<Quantity> = pool.free_per_instance().collect();
    if gpu < Quantity::ONE {
        free.iter().any(|f| *f >= gpu)
    } else {
        free.iter().filter(|f| **f == Quantity::ONE).count() as i64 >= gpu.whole()
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Placed,
    Pending,
    Infeasible,
}

fn oracle(cluster: &Cluster, request: &ResourceSet) -> Outcome {
    let alive: Vec<_> = cluster.nodes().filter(|(_, n)| n.state() == NodeState::Alive).collect();
    let now = alive.iter().any(|(i, n)| {
        request.is_subset_of(n.available())
            && instances_fit(cluster, *i, request.get(ResourceId::GPU))
    });
    if now {
        Outcome::Placed
    } else if alive.iter().any(|(_, n)| request.is_subset_of(n.total()))
        // A suspect node may be back at any moment: the request waits for it, whatever its
        // size (it is not looked at closely while its heartbeats are late).
        || cluster.nodes().any(|(_, n)| n.state() == NodeState::Suspect)
    {
        Outcome::Pending
    } else {
        Outcome::Infeasible
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn outcome_matches_a_brute_force_scan(
        // Up to 24 nodes, so that top_k (20% of alive nodes) is above 1 and the RNG picks.
        specs in prop::collection::vec(node_spec(), 0..24),
        cpu in 0u32..=6,
        gpu in prop::sample::select(vec!["0", "0.25", "0.5", "0.75", "1", "2", "3"]),
        strategy in prop::sample::select(vec![SchedulingStrategy::Default, SchedulingStrategy::Spread, SchedulingStrategy::Random]),
        seed in any::<u64>(),
    ) {
        let mut cluster = build(&specs);
        let set = resources(cluster.registry_mut(), &format!("CPU={cpu},GPU={gpu}"));
        let request = Request::new(set.clone(), strategy, cluster.registry()).unwrap();
        let expected = oracle(&cluster, &set);
        let before = cluster.clone();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let decision = Scheduler::new(SchedulerConfig::default()).place(&mut cluster, &request, &mut rng);
        let got = match &decision {
            Decision::Placed(allocation) => {
                let node = before.node(allocation.node()).unwrap();
                prop_assert_eq!(node.state(), NodeState::Alive);
                prop_assert!(set.is_subset_of(node.available()));
                Outcome::Placed
            }
            Decision::Pending(d) | Decision::Infeasible(d) => {
                // Every node is accounted for exactly once, each with its first reason.
                let counted: u64 = d.attempts[0].rejected.iter().map(|(_, n)| n).sum();
                prop_assert_eq!(counted, before.len() as u64);
                prop_assert_eq!(d.attempts[0].nodes, before.len() as u64);
                if matches!(decision, Decision::Pending(_)) { Outcome::Pending } else { Outcome::Infeasible }
            }
        };
        prop_assert_eq!(got, expected);
        cluster.check_invariants().map_err(TestCaseError::fail)?;
    }
}
