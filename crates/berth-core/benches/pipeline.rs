//! Micro-benchmarks of the decision pipeline's stages on a synthetic cluster: the candidate
//! stage's index work (label selector, actor domains), one node through the filters and the
//! hybrid score, and whole decisions. `berth bench` measures workloads end to end; these
//! isolate the stages when one of them regresses.

use berth_core::actors::{AffinityExpression, AffinityOperator};
use berth_core::cluster::NodeSpec;
use berth_core::labels::{Labels, NodeFacts};
use berth_core::pipeline::filters::{InstancesFit, ResourcesFree, ResourcesTotal, TaintsTolerated};
use berth_core::pipeline::profile::ScorerSpec;
use berth_core::pipeline::scorers::HybridUtilization;
use berth_core::pipeline::stage::{DecisionContext, Filter, Prepared, Scorer};
use berth_core::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
use berth_core::selector::LabelSelector;
use berth_core::selector::Tolerations;
use berth_core::{
    Cluster, Decision, NodeId, NodeIndex, Profile, Quantity, Request, ResourceId, ResourceRegistry,
    ResourceSet, Scheduler, SchedulerConfig, Strategy,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn cluster(n: usize) -> Cluster {
    let mut cluster = Cluster::new(ResourceRegistry::default());
    for i in 0..n {
        let mut total = ResourceSet::new();
        total.set(ResourceId::CPU, Quantity::from_whole(32));
        total.set(ResourceId::MEMORY, Quantity::from_whole(128 << 30));
        if i % 5 == 0 {
            total.set(ResourceId::GPU, Quantity::from_whole(8));
        }
        let facts =
            NodeFacts { availability_zone: Some(format!("z{}", i % 10)), ..NodeFacts::default() };
        let spec = NodeSpec {
            id: NodeId::new(&format!("n{i}")).unwrap(),
            total,
            labels: Labels::new(),
            facts,
            taints: Vec::new(),
        };
        cluster.add_node_with(spec).unwrap();
    }
    cluster
}

fn cpu_request(cluster: &Cluster) -> Request {
    let set: ResourceSet = [(ResourceId::CPU, Quantity::ONE)].into_iter().collect();
    Request::new(set, Strategy::Default, cluster.registry()).unwrap()
}

fn stages(c: &mut Criterion) {
    let cluster = cluster(10_000);
    let request = cpu_request(&cluster);
    let prepared = Prepared::default();
    let cx = DecisionContext { cluster: &cluster, request: &request, prepared: &prepared };
    let node = cluster.node(NodeIndex(1)).unwrap();
    let filters: [&dyn Filter; 4] =
        [&TaintsTolerated, &ResourcesTotal, &ResourcesFree, &InstancesFit];
    c.bench_function("filters/one node, all four", |b| {
        b.iter(|| {
            filters.iter().all(|f| {
                f.check(&cx, std::hint::black_box(node))
                    == berth_core::pipeline::stage::Verdict::Fit
            })
        })
    });
    let hybrid = HybridUtilization { spread_threshold: Quantity::from_units(5_000) };
    c.bench_function("scorers/hybrid, one node", |b| {
        b.iter(|| hybrid.score(&cx, std::hint::black_box(node)))
    });

    let selector = LabelSelector::parse([("berth.io/availability-zone", "in(z1,z2,z3)")]).unwrap();
    c.bench_function("candidates/label selector on 10k nodes", |b| {
        b.iter(|| cluster.label_index().select(&selector, cluster.alive()))
    });
    let expression = AffinityExpression::new(
        "app",
        AffinityOperator::NotIn,
        vec!["web".into()],
        false,
        Some("berth.io/availability-zone".into()),
    )
    .unwrap();
    c.bench_function("candidates/actor anti-affinity per zone on 10k nodes", |b| {
        b.iter(|| {
            cluster.actors().satisfying(
                "default",
                &expression,
                cluster.label_index(),
                cluster.alive(),
            )
        })
    });
}

/// The DEFAULT strategy with the hybrid score alone (the default of clusters without GPUs, and
/// what `berth bench`'s `default` workload runs) at steady state: as many placements alive as
/// nodes, 4 in 5 of one CPU and 2 GiB, 1 in 5 of 4 CPUs and a GPU, the oldest released as each
/// new one is placed. Times one placement and one release.
fn steady_state(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision/hybrid, steady state");
    for n in [1_000usize, 10_000] {
        let mut cluster = cluster(n);
        let set = |pairs: &[(ResourceId, Quantity)]| pairs.iter().copied().collect::<ResourceSet>();
        let small = set(&[
            (ResourceId::CPU, Quantity::ONE),
            (ResourceId::MEMORY, Quantity::from_whole(2 << 30)),
        ]);
        let large =
            set(&[(ResourceId::CPU, Quantity::from_whole(4)), (ResourceId::GPU, Quantity::ONE)]);
        let requests: Vec<Request> = [small, large]
            .into_iter()
            .map(|r| Request::new(r, Strategy::Default, cluster.registry()).unwrap())
            .collect();
        let profile = Profile::of_scorers(vec![ScorerSpec::Hybrid { weight: 1 }]);
        let mut scheduler =
            Scheduler::new(SchedulerConfig { profile, ..SchedulerConfig::default() });
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut live = std::collections::VecDeque::new();
        let mut d = 0usize;
        let mut step = |cluster: &mut Cluster| {
            let request = &requests[usize::from(d.is_multiple_of(5))];
            d += 1;
            if let Decision::Placed(allocation) = scheduler.place(cluster, request, &mut rng) {
                live.push_back(allocation);
            }
            if live.len() > n {
                cluster.release(&live.pop_front().unwrap());
            }
        };
        for _ in 0..n {
            step(&mut cluster);
        }
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| step(&mut cluster))
        });
    }
    group.finish();
}

fn decisions(c: &mut Criterion) {
    // On this cluster (GPU nodes among the others) the default profile is fragmentation-aware.
    let mut group = c.benchmark_group("decision/GPU cluster default, place and release");
    for n in [1_000usize, 10_000] {
        let mut cluster = cluster(n);
        let request = cpu_request(&cluster);
        let mut scheduler = Scheduler::new(SchedulerConfig::default());
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                if let Decision::Placed(allocation) =
                    scheduler.place(&mut cluster, &request, &mut rng)
                {
                    cluster.release(&allocation);
                }
            })
        });
    }
    group.finish();
    let mut cluster = cluster(1_000);
    let request = cpu_request(&cluster)
        .with_label_selector(LabelSelector::parse([("berth.io/availability-zone", "z3")]).unwrap());
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    c.bench_function("decision/label selector, 1k nodes", |b| {
        b.iter(|| {
            if let Decision::Placed(allocation) = scheduler.place(&mut cluster, &request, &mut rng)
            {
                cluster.release(&allocation);
            }
        })
    });
}

/// A dry run (`POST /api/v1/explain`) at 100k nodes: what it cost when it copied the cluster
/// (clone, then place on the copy) against the read-only preview that replaced it.
fn dry_runs(c: &mut Criterion) {
    let cluster = cluster(100_000);
    let request = cpu_request(&cluster);
    let mut group = c.benchmark_group("dry run, 100k nodes");
    group.sample_size(10);
    group.bench_function("clone the cluster, then place", |b| {
        b.iter(|| {
            let mut copy = cluster.clone();
            let mut scheduler = Scheduler::new(SchedulerConfig::default());
            let decision = scheduler.place(&mut copy, &request, &mut ChaCha8Rng::seed_from_u64(1));
            assert!(matches!(decision, Decision::Placed(_)));
        })
    });
    group.bench_function("preview", |b| {
        b.iter(|| {
            let mut scheduler = Scheduler::new(SchedulerConfig::default());
            let decision = scheduler.preview(&cluster, &request, &mut ChaCha8Rng::seed_from_u64(1));
            assert!(matches!(decision, Decision::Placed(_)));
        })
    });
    group.finish();
}

/// Planning a group of 4 bundles (2 CPUs and 1 GPU each, on the GPU nodes) at 10k nodes, by
/// each strategy: the group stages end to end, reserving nothing (a preview), so every
/// iteration plans on the same cluster.
fn groups(c: &mut Criterion) {
    let cluster = cluster(10_000);
    let bundle: ResourceSet =
        [(ResourceId::CPU, Quantity::from_whole(2)), (ResourceId::GPU, Quantity::ONE)]
            .into_iter()
            .collect();
    let mut group = c.benchmark_group("group/4 bundles, 10k nodes");
    for strategy in [
        GroupStrategy::Pack,
        GroupStrategy::Spread,
        GroupStrategy::StrictPack,
        GroupStrategy::StrictSpread,
    ] {
        let spec = GroupSpec {
            id: GroupId::new("bench").unwrap(),
            name: String::new(),
            namespace: "default".into(),
            strategy,
            alternatives: vec![BundleSet {
                bundles: vec![bundle.clone(); 4],
                selectors: Vec::new(),
                unknown: Vec::new(),
            }],
            tolerations: Tolerations::default(),
        };
        let mut scheduler = Scheduler::new(SchedulerConfig::default());
        group.bench_function(strategy.name(), |b| {
            b.iter(|| {
                let decision = scheduler.preview_group(&cluster, &spec);
                assert!(matches!(
                    decision,
                    berth_core::pipeline::group::GroupDecision::Created { .. }
                ));
            })
        });
    }
    group.finish();
}

criterion_group!(benches, stages, steady_state, decisions, dry_runs, groups);
criterion_main!(benches);
