//! Placement groups end to end: the real binary on the group examples (a group with fallbacks,
//! STRICT_SPREAD, a task into a reserved bundle), groups reserved in the cluster file, pending
//! and infeasible groups, bad input in every new field, and determinism.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};
use tempfile::TempDir;

mod common;
use common::{example, explain, path, report, stderr, stdout};

/// The table of `request` on `cluster`, checked to fit 100 columns after the decision line.
fn table(cluster: &Path, request: &Path) -> String {
    let output = explain(cluster, request, &[]);
    assert_eq!(output.status.code(), Some(0), "{}: {}", request.display(), stderr(&output));
    let text = stdout(&output);
    for line in text.lines().skip(1) {
        assert!(line.chars().count() <= 100, "{}: too wide: {line}", request.display());
    }
    text
}

fn gpu(request: &str) -> Value {
    report(&example("gpu-cluster.yaml"), &example(request))
}

fn gpu_table(request: &str) -> String {
    table(&example("gpu-cluster.yaml"), &example(request))
}

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let file = dir.path().join(name);
    std::fs::write(&file, text).expect("temp file written");
    file
}

/// `{"bundle": i, "node": …}` of the created bundles, as (node, GPU instances).
fn created(report: &Value) -> Vec<(String, Value)> {
    report["decision"]["bundles"]
        .as_array()
        .expect("bundles is a list")
        .iter()
        .enumerate()
        .map(|(i, b)| {
            assert_eq!(b["bundle"], i);
            (b["node"].as_str().expect("a node").to_string(), b["instances"]["GPU"].clone())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The examples do what their comments say.

#[test]
fn fallback_example_creates_the_a100_alternative() {
    let report = gpu("pg-fallback.yaml");
    assert_eq!(report["placement_group"]["id"], "pg-train");
    assert_eq!(report["placement_group"]["strategy"], "PACK");
    assert_eq!(report["decision"]["outcome"], "created");
    assert_eq!(report["decision"]["alternative"], 1);
    assert_eq!(
        created(&report),
        (0..4).map(|i| ("a100-2".to_string(), json!([i]))).collect::<Vec<_>>()
    );
    assert!(report["diagnosis"].is_null());
    // Two alternatives tried: the H100 one failed at bundle 1, the A100 one was created.
    let tried = report["alternatives"].as_array().unwrap();
    assert_eq!(tried.len(), 2, "the V100 alternative is never tried");
    let h100 = &tried[0];
    assert_eq!((h100["alternative"].clone(), h100["name"].clone()), (json!(0), json!("bundles")));
    assert_eq!(h100["outcome"], "not_reserved");
    assert_eq!(h100["could_fit_later"], true);
    assert_eq!(h100["bundles"][0]["outcome"], "planned");
    assert_eq!(h100["bundles"][0]["node"], "h100-1");
    assert_eq!(
        h100["bundles"][0]["label_selector"],
        json!({"berth.io/accelerator-type": "nvidia-h100"})
    );
    assert_eq!(h100["bundles"][1]["outcome"], "failed");
    assert_eq!(
        h100["bundles"][1]["rejected"],
        json!([
            {"reason": "label_mismatch", "text": "labels do not match", "nodes": 4},
            {"reason": "insufficient_available:GPU", "text": "too little GPU free", "nodes": 2}
        ])
    );
    assert_eq!(tried[1]["outcome"], "created");
    assert_eq!(tried[1]["name"], "fallback_strategy[0]");

    let text = gpu_table("pg-fallback.yaml");
    assert!(
        text.starts_with(
            "created: alternative 1 (fallback_strategy[0]), bundle 0 on a100-2 GPU instances [0], \
         bundle 1 on a100-2 GPU instances [1], bundle 2 on a100-2 GPU instances [2], bundle 3 \
         on a100-2 GPU instances [3]\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("alternative 0 (bundles), 1 of 3: not reserved now; could be once work ends")
    );
    assert!(text.contains("alternative 1 (fallback_strategy[0]), 2 of 3: created"));
    assert!(text.contains("planned on h100-1, given back"), "{text}");
    assert!(text.contains("0/6 nodes can take it now: 4 labels do not"), "{text}");
}

#[test]
fn each_bundle_attempt_is_shown_node_by_node_as_the_core_recorded_it() {
    let report = gpu("pg-fallback.yaml");
    let h100 = &report["alternatives"][0];
    let attempts = h100["attempts"].as_array().expect("attempts is a list");
    assert_eq!(attempts.len(), 2, "bundle 0 found h100-1, bundle 1 found nothing: {attempts:?}");
    let node = |attempt: &Value, name: &str| {
        let nodes = attempt["nodes"].as_array().expect("nodes is a list");
        nodes.iter().find(|n| n["node"] == name).expect("every node has a line").clone()
    };
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!((first["bundle"].clone(), first["chosen"].clone()), (json!(0), json!("h100-1")));
    let chosen = node(first, "h100-1");
    assert_eq!(chosen["passed"], true);
    let scorers: Vec<&Value> =
        chosen["scores"].as_array().unwrap().iter().map(|s| &s["scorer"]).collect();
    assert_eq!(scorers, [&json!("holds-rest"), &json!("least-waste")], "the group's ranking");
    assert_eq!(node(first, "a100-1")["excluded"]["reason"], "label_mismatch");
    // Bundle 1 is checked on the plan's overlay: h100-1's free GPU went to bundle 0.
    assert_eq!((second["bundle"].clone(), second["chosen"].clone()), (json!(1), Value::Null));
    let overlaid = node(second, "h100-1");
    let free = overlaid["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["filter"] == "resources_free")
        .expect("every filter ran")
        .clone();
    assert_eq!(free["reason"], "insufficient_available:GPU", "{overlaid}");
    // The created alternative's attempts carry the decision's nodes.
    for attempt in report["alternatives"][1]["attempts"].as_array().unwrap() {
        assert_eq!(attempt["chosen"], "a100-2");
    }

    let text = gpu_table("pg-fallback.yaml");
    assert!(text.contains("bundle 1 ({GPU: 1}), planned 2 of 2:"), "{text}");
    assert!(text.contains("resources_free: needs 1 GPU, has 0 free"), "{text}");
    assert!(text.contains("shortlist: a100-2; chosen: a100-2"), "{text}");
}

#[test]
fn strict_spread_example_puts_each_bundle_on_its_own_node() {
    let report = gpu("pg-strict-spread.yaml");
    assert_eq!(report["decision"]["outcome"], "created");
    assert_eq!(report["decision"]["alternative"], 0);
    let bundles = created(&report);
    assert_eq!(
        bundles,
        [
            ("v100-1".to_string(), json!([0])),
            ("a100-1".to_string(), json!([3])),
            ("h100-1".to_string(), json!([7]))
        ]
    );
    let nodes: BTreeSet<&String> = bundles.iter().map(|(n, _)| n).collect();
    assert_eq!(nodes.len(), 3, "distinct nodes");
    assert_eq!(report["decision"]["bundles"][0]["resources"], json!({"CPU": 4, "GPU": 1}));
    let text = gpu_table("pg-strict-spread.yaml");
    assert!(text.contains(
        "placement group pg-replicas: STRICT_SPREAD, namespace default, 1 alternative\n"
    ));
    assert!(text.contains("v100-1, GPU instances [0]"), "{text}");
}

#[test]
fn task_example_takes_a_gpu_of_its_bundle() {
    let report = gpu("pg-task.yaml");
    assert_eq!(
        report["decision"],
        json!({"outcome": "placed", "node": "v100-1", "resources": {"CPU": 1, "GPU": 1},
               "instances": {"GPU": [2]}, "bundle": {"group": "pg-serve", "bundle": 0}})
    );
    let attempt = &report["attempts"][0];
    assert_eq!(attempt["code"], "placement_group");
    let bundles = attempt["bundles"].as_array().unwrap();
    assert_eq!(bundles[0]["verdict"], "chosen");
    assert_eq!(bundles[0]["instances"], json!({"GPU": [2, 3]}), "named in the cluster file");
    assert_eq!(bundles[0]["free"], json!({"CPU": 4, "GPU": 2}), "before the decision");
    assert_eq!(bundles[1]["verdict"], "not_targeted");
    assert_eq!(bundles[1]["instances"], json!({"GPU": [2]}), "chosen by the rules");
    let text = gpu_table("pg-task.yaml");
    assert!(text.starts_with(
        "placed on v100-1, GPU instances [2], in bundle 0 of placement group pg-serve\n"
    ));
    assert!(text.contains("attempt 1 of 1: placement group pg-serve\n"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Tasks into bundles, pending and infeasible groups.

#[test]
fn tasks_into_bundles_wait_or_fail_with_the_bundle_reason() {
    let dir = TempDir::new().unwrap();
    let cluster = example("gpu-cluster.yaml");
    let into = |name: &str, resources: &str, target: &str| {
        let text = format!(
            "resources: {resources}\nscheduling_strategy: {{type: PLACEMENT_GROUP, {target}}}\n"
        );
        report(&cluster, &write(&dir, name, &text))
    };
    // Any bundle: the first that can take it.
    let any = into("any.yaml", "{GPU: 1}", "group: pg-serve");
    assert_eq!(any["decision"]["bundle"], json!({"group": "pg-serve", "bundle": 0}));
    // More than bundle 1 holds in total: infeasible.
    let big = into("big.yaml", "{GPU: 2}", "group: pg-serve, bundle: 1");
    assert_eq!(big["decision"]["outcome"], "infeasible");
    assert_eq!(big["diagnosis"]["attempts"][0]["rejected"][0]["reason"], "insufficient_total:GPU");
    assert_eq!(big["attempts"][0]["bundles"][1]["verdict"], "insufficient_total:GPU");
    // A bundle that does not exist: infeasible, with the note.
    let none = into("none.yaml", "{GPU: 1}", "group: pg-serve, bundle: 5");
    assert_eq!(none["decision"]["outcome"], "infeasible");
    assert!(none["diagnosis"]["summary"].as_str().unwrap().contains("bundle 5 does not exist"));
    // A group that is not reserved: pending.
    let later = into("later.yaml", "{GPU: 1}", "group: pg-later");
    assert_eq!(later["decision"]["outcome"], "pending");
    assert!(later["attempts"][0].get("bundles").is_none(), "no group, no bundles");
    let text = table(&cluster, &dir.path().join("later.yaml"));
    assert!(text.contains("placement group pg-later is not reserved in the cluster"), "{text}");
}

#[test]
fn a_group_that_cannot_be_reserved_now_is_pending_and_says_why() {
    let dir = TempDir::new().unwrap();
    // Five bundles, each on its own node, on four nodes with a free GPU.
    let request = write(
        &dir,
        "five.yaml",
        "placement_group:\n  id: five\n  strategy: strict_spread\n  bundles: [{GPU: 1}, {GPU: 1}, {GPU: 1}, {GPU: 1}, {GPU: 1}]\n",
    );
    let report = report(&example("gpu-cluster.yaml"), &request);
    assert_eq!(report["decision"], json!({"outcome": "pending"}));
    let alternative = &report["diagnosis"]["alternatives"][0];
    assert_eq!(alternative["alternative"], 0);
    assert_eq!(alternative["could_fit_later"], true);
    assert_eq!(
        alternative["note"],
        "STRICT_SPREAD needs 5 distinct nodes; only 4 can take these bundles now"
    );
    let text = table(&example("gpu-cluster.yaml"), &request);
    assert!(text.starts_with(
        "pending: bundles: STRICT_SPREAD needs 5 distinct nodes; only 4 can take these bundles now\n"
    ), "{text}");
    assert!(text.contains("no node for it together with the others (see the note)"), "{text}");
}

#[test]
fn a_group_no_node_could_ever_hold_is_infeasible_per_alternative() {
    let dir = TempDir::new().unwrap();
    let request = write(
        &dir,
        "big.yaml",
        "placement_group:\n  id: big\n  strategy: STRICT_PACK\n  bundles: [{GPU: 4}, {GPU: 8}]\n  \
         fallback_strategy:\n    - bundles: [{GPU: 16}]\n",
    );
    let report = report(&example("gpu-cluster.yaml"), &request);
    assert_eq!(report["decision"], json!({"outcome": "infeasible"}));
    let alternatives = report["diagnosis"]["alternatives"].as_array().unwrap();
    assert_eq!(alternatives.len(), 2);
    assert_eq!(alternatives[0]["failed"][0]["bundle"], 1, "the hardest bundle is planned first");
    assert_eq!(alternatives[1]["failed"][0]["rejected"][0]["reason"], "insufficient_total:GPU");
    assert_eq!(alternatives[1]["failed"][0]["rejected"][0]["nodes"], 6);
    let summary = report["diagnosis"]["summary"].as_str().unwrap();
    assert!(!summary.contains("bundle 1: bundle 1"), "the bundle is named once: {summary}");
    assert!(summary.contains("fallback_strategy[0]: STRICT_PACK needs one node"), "{summary}");
}

#[test]
fn groups_reserved_in_the_cluster_file_hold_their_resources() {
    let dir = TempDir::new().unwrap();
    // v100-1 has 8 GPUs, 2 of them reserved by pg-serve: 7 on it at once is pending.
    let request = write(
        &dir,
        "seven.yaml",
        "placement_group:\n  id: seven\n  bundles: [{GPU: 7}]\n  \
         bundle_label_selector: [{berth.io/accelerator-type: nvidia-v100}]\n",
    );
    let report = report(&example("gpu-cluster.yaml"), &request);
    assert_eq!(report["decision"]["outcome"], "pending");
    let rejected = &report["diagnosis"]["alternatives"][0]["failed"][0]["rejected"];
    assert!(rejected
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["reason"] == "insufficient_available:GPU"));
    // A group on a draining node is kept; tolerations and selectors of a reserved group are not
    // checked again (labels and taints may have changed since).
    let cluster = write(
        &dir,
        "cluster.yaml",
        "nodes:\n  - {id: a, resources: {CPU: 4, GPU: 2}, state: draining, taints: {team: x}}\n\
         placement_groups:\n  - id: g\n    bundles: [{resources: {GPU: 1}, node: a}]\n    \
         bundle_label_selector: [{zone: b}]\n",
    );
    let task = write(
        &dir,
        "task.yaml",
        "resources: {GPU: 1}\nscheduling_strategy: {type: PLACEMENT_GROUP, group: g}\n",
    );
    let report = self::report(&cluster, &task);
    assert_eq!(report["decision"]["node"], "a");
    assert_eq!(report["decision"]["instances"], json!({"GPU": [0]}));
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit status 2, and stderr names the file, the field and the rule.

fn assert_bad(output: &Output, file: &Path, field: &str, rule: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{field}: {err}");
    assert!(output.stdout.is_empty(), "no decision on bad input");
    assert!(err.contains(path(file)), "names the file: {err}");
    assert!(err.contains(&format!(": {field}: ")), "names the field {field}: {err}");
    assert!(err.contains(rule), "states the rule ({rule}): {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_group_requests_name_the_field() {
    let group = |rest: &str| format!("placement_group:\n  id: g\n{rest}");
    let cases: Vec<(String, &str, &str)> = vec![
        (group("  bundles: []\n"), "placement_group.bundles", "at least one bundle"),
        (group("  bundles: [{CPU: 1}, {}]\n"), "placement_group.bundles[1]", "at least one resource"),
        (group("  bundles: [{CPU: 1}, {GPU: 1.5}]\n"), "placement_group.bundles[1].GPU", "1.5 is not allowed"),
        (group("  bundles: [{CPU: -1}]\n"), "placement_group.bundles[0].CPU", "negative"),
        (
            group("  bundles: [{CPU: 1}]\n  fallback_strategy:\n    - bundles: [{nvidia.com/gpu: 1}, {GPU: 2.5}]\n"),
            "placement_group.fallback_strategy[0].bundles[1].GPU",
            "2.5 is not allowed",
        ),
        (
            group("  bundles: [{CPU: 1}, {CPU: 1}]\n  bundle_label_selector: [{}]\n"),
            "placement_group.bundle_label_selector",
            "1 selectors for 2 bundles",
        ),
        (
            group("  bundles: [{CPU: 1}]\n  fallback_strategy:\n    - bundles: [{CPU: 1}]\n      bundle_label_selector: [{}, {}]\n"),
            "placement_group.fallback_strategy[0].bundle_label_selector",
            "2 selectors for 1 bundles",
        ),
        (
            group("  bundles: [{CPU: 1}]\n  fallback_strategy:\n    - bundles: []\n"),
            "placement_group.fallback_strategy[0].bundles",
            "at least one bundle",
        ),
        (
            group("  bundles: [{CPU: 1}]\n  fallback_strategy:\n    - {label_selector: {}}\n"),
            "placement_group.fallback_strategy[0].label_selector",
            "unknown field",
        ),
        (
            group("  bundles: [{CPU: 1}]\n  bundle_label_selector: [{zone: \"in()\"}]\n"),
            "placement_group.bundle_label_selector[0].zone",
            "in() needs at least one value",
        ),
        (
            group("  bundles: [{CPU: 1}]\n  tolerations: {team: \"in()\"}\n"),
            "placement_group.tolerations.team",
            "in() needs at least one value",
        ),
        (group("  strategy: CLUSTER\n  bundles: [{CPU: 1}]\n"), "placement_group.strategy", "use PACK, SPREAD"),
        (group("  namespace: \"a b\"\n  bundles: [{CPU: 1}]\n"), "placement_group.namespace", "is invalid"),
        (group("  name: 7\n  bundles: [{CPU: 1}]\n"), "placement_group.name", "write it in quotes"),
        (group("  bundles: [{CPU: 1}]\n  priority: 2\n"), "placement_group.priority", "unknown field"),
        ("placement_group: {bundles: [{CPU: 1}]}\n".into(), "placement_group", "missing field `id`"),
        ("placement_group: {id: \"\", bundles: [{CPU: 1}]}\n".into(), "placement_group.id", "not empty"),
        ("placement_group: {id: pg-serve, bundles: [{CPU: 1}]}\n".into(), "placement_group.id", "already reserved"),
        (
            "resources: {CPU: 1}\nplacement_group: {id: g, bundles: [{CPU: 1}]}\n".into(),
            "placement_group",
            "not both",
        ),
        (
            "placement_group: {id: g, bundles: [{CPU: 1}]}\ntolerations: {a: b}\n".into(),
            "tolerations",
            "inside placement_group",
        ),
        (
            "placement_group: {id: g, bundles: [{CPU: 1}]}\nactor: {id: a}\n".into(),
            "actor",
            "not of a placement group request",
        ),
    ];
    let dir = TempDir::new().unwrap();
    for (text, field, rule) in cases {
        let request = write(&dir, "request.yaml", &text);
        let output = explain(&example("gpu-cluster.yaml"), &request, &[]);
        assert_bad(&output, &request, field, rule);
    }
}

#[test]
fn bad_placement_group_strategies_name_the_field() {
    let cases = [
        ("PLACEMENT_GROUP", "", "scheduling_strategy", "PLACEMENT_GROUP needs a group"),
        ("{type: PLACEMENT_GROUP}", "", "scheduling_strategy", "PLACEMENT_GROUP needs a group"),
        ("{type: PLACEMENT_GROUP, group: \"a b\"}", "", "scheduling_strategy.group", "is invalid"),
        (
            "{type: PLACEMENT_GROUP, group: g, bundle: -1}",
            "",
            "scheduling_strategy.bundle",
            "negative",
        ),
        (
            "{type: PLACEMENT_GROUP, group: g, bundle: first}",
            "",
            "scheduling_strategy.bundle",
            "bundle index",
        ),
        (
            "{type: DEFAULT, bundle: 0}",
            "",
            "scheduling_strategy",
            "bundle is only allowed with type PLACEMENT_GROUP",
        ),
        (
            "{type: PLACEMENT_GROUP, group: g, node_id: a}",
            "",
            "scheduling_strategy",
            "node_id is only allowed",
        ),
        (
            "{type: PLACEMENT_GROUP, group: g}",
            "label_selector: {a: b}\n",
            "label_selector",
            "does not apply",
        ),
        (
            "{type: PLACEMENT_GROUP, group: g}",
            "tolerations: {a: b}\n",
            "tolerations",
            "does not apply",
        ),
        (
            "{type: PLACEMENT_GROUP, group: g}",
            "fallback_strategy: [{label_selector: {}}]\n",
            "fallback_strategy",
            "does not apply",
        ),
    ];
    let dir = TempDir::new().unwrap();
    for (strategy, extra, field, rule) in cases {
        let text = format!("resources: {{CPU: 1}}\nscheduling_strategy: {strategy}\n{extra}");
        let request = write(&dir, "request.yaml", &text);
        let output = explain(&example("gpu-cluster.yaml"), &request, &[]);
        assert_bad(&output, &request, field, rule);
    }
}

#[test]
fn bad_reserved_groups_name_the_field() {
    let nodes = "nodes:\n  - {id: a, resources: {CPU: 4, GPU: 2}}\n  - {id: b, resources: {CPU: 4, GPU: 2}}\n  \
                 - {id: d, resources: {CPU: 4}, state: dead}\nplacement_groups:\n  - id: g\n";
    let cases = [
        ("    bundles:\n      - {resources: {GPU: 1}, node: a}\n      - {resources: {GPU: 1}, node: q}\n", "placement_groups[0].bundles[1].node", "there is no node q"),
        ("    bundles:\n      - {resources: {GPU: 1}, node: d}\n", "placement_groups[0].bundles[0].node", "node d is dead"),
        ("    bundles: [{resources: {GPU: 1}, node: a}]\n  - id: g\n    bundles: [{resources: {GPU: 1}, node: b}]\n", "placement_groups[1].id", "already used by placement_groups[0]"),
        ("    strategy: STRICT_SPREAD\n    bundles:\n      - {resources: {GPU: 1}, node: a}\n      - {resources: {GPU: 1}, node: a}\n", "placement_groups[0].bundles[1].node", "STRICT_SPREAD puts every bundle on a different node"),
        ("    strategy: STRICT_PACK\n    bundles:\n      - {resources: {GPU: 1}, node: a}\n      - {resources: {GPU: 1}, node: b}\n", "placement_groups[0].bundles[1].node", "STRICT_PACK puts every bundle on one node"),
        ("    bundles:\n      - {resources: {GPU: 1.5}, node: a}\n", "placement_groups[0].bundles[0].resources.GPU", "1.5 is not allowed"),
        ("    bundles:\n      - {resources: {}, node: a}\n", "placement_groups[0].bundles[0].resources", "at least one resource"),
        ("    bundles: []\n", "placement_groups[0].bundles", "at least one bundle"),
        ("    bundles:\n      - {resources: {GPU: 1}, node: a, instances: {GPU: [5]}}\n", "placement_groups[0].bundles[0].instances.GPU", "no instance 5"),
        ("    bundles:\n      - {resources: {GPU: 1}, node: a, instances: {GPU: [0]}}\n      - {resources: {GPU: 1}, node: a, instances: {GPU: [0]}}\n", "placement_groups[0].bundles[1].instances.GPU", "instance 0 has 0 free"),
        ("    bundles:\n      - {resources: {GPU: 2}, node: a}\n      - {resources: {GPU: 1}, node: a}\n", "placement_groups[0].bundles[1]", "after the allocations, actors and bundles listed before it"),
        ("    bundles:\n      - {resources: {GPU: 4}, node: a}\n", "placement_groups[0].bundles[0]", "needs 4 GPU, has 2 in total"),
        ("    bundles:\n      - {resources: {GPU: 1}, node: a}\n    bundle_label_selector: [{}, {}]\n", "placement_groups[0].bundle_label_selector", "2 selectors for 1 bundles"),
        ("    bundles:\n      - {GPU: 1}\n", "placement_groups[0].bundles[0].GPU", "unknown field"),
        ("    bundles:\n      - {resources: {GPU: 1}}\n", "placement_groups[0].bundles[0]", "missing field `node`"),
        ("    bundles: [{resources: {GPU: 1}, node: a}]\n    fallback_strategy: []\n", "placement_groups[0].fallback_strategy", "unknown field"),
        ("    strategy: pack-ish\n    bundles: [{resources: {GPU: 1}, node: a}]\n", "placement_groups[0].strategy", "unknown placement group strategy"),
    ];
    let dir = TempDir::new().unwrap();
    for (group, field, rule) in cases {
        let cluster = write(&dir, "cluster.yaml", &format!("{nodes}{group}"));
        let output = explain(&cluster, &example("pg-task.yaml"), &[]);
        assert_bad(&output, &cluster, field, rule);
    }
}

// ---------------------------------------------------------------------------------------------
// Determinism.

#[test]
fn the_group_examples_give_identical_output_every_time() {
    for request in ["pg-fallback.yaml", "pg-strict-spread.yaml", "pg-task.yaml"] {
        for format in ["table", "json"] {
            let run = || {
                let output = explain(
                    &example("gpu-cluster.yaml"),
                    &example(request),
                    &["--output", format, "--seed", "3"],
                );
                assert_eq!(output.status.code(), Some(0), "{request}: {}", stderr(&output));
                output.stdout
            };
            assert_eq!(run(), run(), "{request} {format}");
        }
    }
}
