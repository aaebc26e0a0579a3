use berth_api::spec::node_types::parse_autoscaler;
use berth_api::spec::{FileKind, LoadedRequest, ParsedRequest};
use berth_core::testutil;
use proptest::prelude::*;

use super::*;

/// A CPU type listed before a tainted GPU type, and a zone-b CPU type.
const TYPES: &str = "
max_nodes: 8
node_types:
  cpu:
    resources: {CPU: 4}
    availability_zone: a
  cpu-b:
    resources: {CPU: 4}
    availability_zone: b
    max_nodes: 2
  gpu:
    resources: {CPU: 8, GPU: 2}
    taints: {gpu_node: 'true'}
";

fn settings(text: &str) -> AutoscalerSettings {
    parse_autoscaler("types.yaml", text.to_string()).expect("valid autoscaler file")
}

fn load(cluster: &mut Cluster, text: &str) -> LoadedRequest {
    ParsedRequest::parse(FileKind::Request, "request.yaml", text.to_string())
        .expect("valid request")
        .build(cluster)
        .expect("builds")
}

/// Plans `requests` (request documents) on `cluster` with `types`.
fn plan_for(cluster: &mut Cluster, types: &str, fleet: &Fleet, requests: &[&str]) -> Plan {
    let loaded: Vec<LoadedRequest> = requests.iter().map(|r| load(cluster, r)).collect();
    let keys: Vec<String> = (0..loaded.len()).map(|i| format!("w{i}")).collect();
    let wants: Vec<Want<'_>> = loaded
        .iter()
        .zip(&keys)
        .map(|(l, key)| match l {
            LoadedRequest::Request(request) => Want::Request { key, request },
            LoadedRequest::Group(spec) => Want::Group { key, spec },
        })
        .collect();
    plan(cluster, &SchedulerConfig::default(), &settings(types), fleet, &wants)
}

fn types_of(plan: &Plan) -> Vec<&str> {
    plan.launch.iter().map(|l| l.node_type.as_str()).collect()
}

#[test]
fn a_gpu_actor_tolerating_gpu_node_gets_the_tainted_gpu_type() {
    let mut cluster = testutil::cluster(&[("cpu-0", "CPU=4")]);
    let plan = plan_for(
        &mut cluster,
        TYPES,
        &Fleet::default(),
        &["resources: {CPU: 1, GPU: 1}\ntolerations: {gpu_node: exists()}\n"],
    );
    assert_eq!(types_of(&plan), ["gpu"]);
    assert_eq!(plan.verdicts[0].1, Verdict::Launch { node_type: "gpu".into(), nodes: 1 });
}

#[test]
fn without_the_toleration_the_gpu_request_is_unservable_with_the_taint_as_reason() {
    let mut cluster = testutil::cluster(&[("cpu-0", "CPU=4")]);
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &["resources: {GPU: 1}\n"]);
    assert!(plan.launch.is_empty(), "{plan:?}");
    let Verdict::Unservable { reasons } = &plan.verdicts[0].1 else { panic!("{plan:?}") };
    let by_type: BTreeMap<&str, &str> =
        reasons.iter().map(|(t, r)| (t.as_str(), r.as_str())).collect();
    assert!(by_type["cpu"].contains("needs 1 GPU, has 0 in total"), "{reasons:?}");
    assert!(by_type["gpu"].contains("gpu_node=true"), "{reasons:?}");
}

#[test]
fn under_rare_resource_isolation_a_cpu_actor_never_gets_the_gpu_type() {
    // The GPU type is the roomiest and first by name here; isolation still keeps CPU work off.
    let types = "
node_types:
  a-gpu:
    resources: {CPU: 64, GPU: 8}
  z-cpu:
    resources: {CPU: 2}
";
    let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
    cluster.set_rare_resources(&[berth_core::ResourceId::GPU]);
    let actor = "resources: {CPU: 2}\nactor: {id: a1}\n";
    let plan = plan_for(&mut cluster, types, &Fleet::default(), &[actor]);
    assert_eq!(types_of(&plan), ["z-cpu"]);
    // A GPU request still gets the GPU type: it tolerates the isolation taint by asking.
    let plan = plan_for(&mut cluster, types, &Fleet::default(), &["resources: {GPU: 1}\n"]);
    assert_eq!(types_of(&plan), ["a-gpu"]);
}

#[test]
fn a_strict_spread_group_of_three_gets_three_nodes() {
    let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
    let group = "placement_group:\n  id: pg\n  strategy: STRICT_SPREAD\n  bundles: [{CPU: 1}, {CPU: 1}, {CPU: 1}]\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[group]);
    assert_eq!(types_of(&plan), ["cpu", "cpu", "cpu"]);
    assert_eq!(plan.verdicts[0].1, Verdict::Launch { node_type: "cpu".into(), nodes: 3 });
    // PACK needs one.
    let group = "placement_group:\n  id: pg\n  strategy: STRICT_PACK\n  bundles: [{CPU: 1}, {CPU: 1}, {CPU: 1}]\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[group]);
    assert_eq!(types_of(&plan), ["cpu"]);
}

#[test]
fn small_requests_share_a_planned_node_and_a_launching_one() {
    let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
    let task = "resources: {CPU: 1}\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[task; 5]);
    assert_eq!(types_of(&plan), ["cpu", "cpu"], "4 fit on the first");
    assert_eq!(plan.verdicts[1].1, Verdict::Fits { node: "cpu-planned-1".into(), launching: true });
    // A node being launched is counted: nothing more is needed for 4.
    let fleet = Fleet { launching: vec![("cpu-77".into(), "cpu".into())], ..Fleet::default() };
    let plan = plan_for(&mut cluster, TYPES, &fleet, &[task; 4]);
    assert!(plan.launch.is_empty(), "{plan:?}");
    assert_eq!(plan.verdicts[0].1, Verdict::Fits { node: "cpu-77".into(), launching: true });
}

#[test]
fn nodes_the_plan_puts_waiting_work_on_are_reported_as_used() {
    // A group whose first bundle fits on a live node and whose second waits for a launching
    // one: both are in use, so neither counts as idle meanwhile.
    let mut cluster = testutil::cluster(&[("cpu-0", "CPU=4"), ("idle-1", "CPU=1")]);
    let fleet = Fleet { launching: vec![("cpu-9".into(), "cpu".into())], ..Fleet::default() };
    let group =
        "placement_group:\n  id: pg\n  strategy: STRICT_SPREAD\n  bundles: [{CPU: 2}, {CPU: 2}]\n";
    let plan = plan_for(&mut cluster, TYPES, &fleet, &[group]);
    assert!(plan.launch.is_empty(), "{plan:?}");
    assert_eq!(plan.used.iter().map(String::as_str).collect::<Vec<_>>(), ["cpu-0", "cpu-9"]);
}

#[test]
fn a_label_selector_picks_the_type_whose_labels_match() {
    let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
    let request = "resources: {CPU: 1}\nlabel_selector: {berth.io/availability-zone: b}\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[request]);
    assert_eq!(types_of(&plan), ["cpu-b"]);
    // The node group label names the type.
    let request = "resources: {CPU: 1}\nlabel_selector: {berth.io/node-group: gpu}\ntolerations: {gpu_node: exists()}\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[request]);
    assert_eq!(types_of(&plan), ["gpu"]);
}

#[test]
fn limits_stop_launches_and_say_which() {
    let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
    let whole = "resources: {CPU: 4}\nlabel_selector: {berth.io/availability-zone: b}\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[whole; 3]);
    assert_eq!(types_of(&plan), ["cpu-b", "cpu-b"]);
    let Verdict::Limited { node_type, limit } = &plan.verdicts[2].1 else { panic!("{plan:?}") };
    assert_eq!(node_type, "cpu-b");
    assert!(limit.contains("max_nodes (2"), "{limit}");
    // The cluster-wide limit counts alive autoscaled nodes.
    let fleet = Fleet { alive: [("cpu".to_string(), 8)].into(), ..Fleet::default() };
    let plan = plan_for(&mut cluster, TYPES, &fleet, &["resources: {CPU: 4}\n"]);
    assert!(plan.launch.is_empty());
    let Verdict::Limited { limit, .. } = &plan.verdicts[0].1 else { panic!("{plan:?}") };
    assert!(limit.contains("the cluster is at max_nodes (8"), "{limit}");
}

#[test]
fn min_nodes_are_launched_and_upscaling_speed_defers_the_rest() {
    let types = "
upscaling_speed: 1
max_nodes: 20
node_types:
  cpu: {resources: {CPU: 1}, min_nodes: 2}
";
    let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
    let plan = plan_for(&mut cluster, types, &Fleet::default(), &["resources: {CPU: 1}\n"; 8]);
    // Two for min_nodes (the first two tasks fit there), then six; five may launch at once.
    assert_eq!(plan.launch[0].reason, "min_nodes: 2");
    assert_eq!(plan.launch.len(), 5);
    assert_eq!(plan.deferred.len(), 3);
    assert_eq!(plan.by_type()["cpu"], 8);
}

#[test]
fn work_waiting_for_a_group_is_not_a_matter_of_nodes() {
    let mut cluster = testutil::cluster(&[("cpu-0", "CPU=4")]);
    let request =
        "resources: {CPU: 1}\nscheduling_strategy: {type: PLACEMENT_GROUP, group: pg-x}\n";
    let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &[request]);
    assert!(plan.launch.is_empty());
    assert!(matches!(plan.verdicts[0].1, Verdict::NotNodes { .. }), "{plan:?}");
}

/// A request document from generated parts.
fn request_text(cpu: u32, gpu: u32, tolerate: bool, zone: Option<&str>) -> String {
    let mut text = format!("resources: {{CPU: {cpu}, GPU: {gpu}}}\n");
    if tolerate {
        text.push_str("tolerations: {gpu_node: exists()}\n");
    }
    if let Some(zone) = zone {
        text.push_str(&format!("label_selector: {{berth.io/availability-zone: {zone}}}\n"));
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A STRICT_SPREAD group of n bundles on an empty cluster gets n distinct planned nodes,
    /// as long as the limit allows them; beyond it, none.
    #[test]
    fn strict_spread_of_n_plans_n_distinct_nodes(n in 1usize..10) {
        let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
        let bundles = vec!["{CPU: 1}"; n].join(", ");
        let group = format!("placement_group:\n  id: pg\n  strategy: STRICT_SPREAD\n  bundles: [{bundles}]\n");
        let types = "max_nodes: 6\nnode_types: {cpu: {resources: {CPU: 4}}}\n";
        let plan = plan_for(&mut cluster, types, &Fleet::default(), &[&group]);
        let planned = plan.by_type().get("cpu").copied().unwrap_or(0) as usize;
        if n <= 6 {
            prop_assert_eq!(planned, n);
            prop_assert_eq!(&plan.verdicts[0].1, &Verdict::Launch { node_type: "cpu".into(), nodes: n as u32 });
        } else {
            prop_assert_eq!(planned, 0);
            let is_limited = matches!(plan.verdicts[0].1, Verdict::Limited { .. });
            prop_assert!(is_limited, "{:?}", plan.verdicts[0]);
        }
    }

    /// Whatever waits: every planned type would take the item it was planned for on its own
    /// (its taints tolerated, its labels matching, its resources enough), no limit is passed,
    /// and an item planned for is never one that no type can take.
    #[test]
    fn plans_respect_taints_selectors_and_limits(
        items in prop::collection::vec(
            (1u32..10, 0u32..3, any::<bool>(), prop::option::of(prop::sample::select(vec!["a", "b", "c"]))),
            1..12,
        ),
    ) {
        let mut cluster = Cluster::new(berth_core::ResourceRegistry::default());
        let texts: Vec<String> =
            items.iter().map(|(c, g, t, z)| request_text(*c, *g, *t, *z)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let settings = settings(TYPES);
        let plan = plan_for(&mut cluster, TYPES, &Fleet::default(), &refs);
        let planned = plan.by_type();
        prop_assert!(planned.values().sum::<u32>() <= settings.max_nodes);
        for t in &settings.node_types {
            prop_assert!(planned.get(t.name.as_str()).copied().unwrap_or(0) <= t.max_nodes);
        }
        for ((_, verdict), text) in plan.verdicts.iter().zip(&texts) {
            if let Verdict::Launch { node_type, .. } = verdict {
                let t = settings.node_types.iter().find(|t| &t.name == node_type).unwrap();
                let mut alone = Cluster::new(berth_core::ResourceRegistry::default());
                add_node(&mut alone, t, "alone").unwrap();
                let LoadedRequest::Request(request) = load(&mut alone, text) else { unreachable!() };
                let mut scheduler = Scheduler::new(SchedulerConfig::default());
                let decision = scheduler.place(&mut alone, &request, &mut ChaCha8Rng::seed_from_u64(1));
                prop_assert!(matches!(decision, Decision::Placed(_)), "{text} on {node_type}: {decision:?}");
            }
            if let Verdict::Unservable { reasons } = verdict {
                prop_assert_eq!(reasons.len(), settings.node_types.len());
            }
        }
    }
}
