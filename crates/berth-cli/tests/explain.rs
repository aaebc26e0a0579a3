//! `berth explain` end to end: the real binary on the example files and on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tempfile::TempDir;

mod common;

/// The workspace's `examples/` folder.
fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example(name: &str) -> PathBuf {
    examples().join(name)
}

fn berth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth")).args(args).output().expect("the berth binary runs")
}

fn explain(cluster: &Path, request: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "explain",
        "--cluster",
        cluster.to_str().expect("UTF-8 path"),
        "--request",
        request.to_str().expect("UTF-8 path"),
    ];
    args.extend_from_slice(extra);
    berth(&args)
}

/// Runs `--output json` on an example request against the example cluster; asserts exit 0.
fn explain_json(request: &str) -> Value {
    let output = explain(&example("cluster.yaml"), &example(request), &["--output", "json"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{request}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// The reason codes of the diagnosis's first attempt.
fn rejected_codes(report: &Value) -> Vec<String> {
    report["diagnosis"]["attempts"][0]["rejected"]
        .as_array()
        .expect("rejected is a list")
        .iter()
        .map(|r| r["reason"].as_str().expect("reason code").to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The examples do what their comments say.

#[test]
fn every_example_request_runs_in_both_formats() {
    let mut requests: Vec<PathBuf> = std::fs::read_dir(examples())
        .expect("examples/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        // Requests only: cluster snapshots end in `cluster.yaml`, profiles start `profile-`
        // (those run in tests/profile.rs).
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.ends_with("cluster.yaml") && !n.starts_with("profile-"))
        })
        .collect();
    requests.sort();
    assert!(requests.len() >= 7, "examples: {requests:?}");
    for request in &requests {
        for format in ["table", "json"] {
            let output = explain(&example("cluster.yaml"), request, &["--output", format]);
            assert_eq!(
                output.status.code(),
                Some(0),
                "{}: {}",
                request.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(output.stderr.is_empty(), "{}", request.display());
        }
    }
}

#[test]
fn actor_is_placed_on_a_half_free_gpu() {
    let report = explain_json("actor.yaml");
    let decision = &report["decision"];
    assert_eq!(decision["outcome"], "placed");
    // gpu-1's GPU 3 and gpu-2's GPU 0 have 0.5 free each: an exact fit on either node, a tie.
    let node = common::tie_pick(&report, 0, &["gpu-1", "gpu-2"]);
    assert_eq!(decision["resources"]["CPU"], 1);
    assert_eq!(decision["resources"]["GPU"], 0.5);
    let half_free = if node == "gpu-1" { 3 } else { 0 };
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([half_free]));
    assert!(report["diagnosis"].is_null());
    let attempt = &report["attempts"][0];
    assert_eq!(attempt["attempt"], "DEFAULT");
    assert_eq!(attempt["shortlist"], serde_json::json!(["gpu-1", "gpu-2"]));
    let gpu2 = attempt["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "gpu-2")
        .expect("gpu-2 is listed");
    assert_eq!(gpu2["passed"], true);
    // A cluster with GPUs: the default profile's fragmentation-aware scorers.
    assert_eq!(gpu2["scores"][0]["scorer"], "fragmentation");
    assert_eq!(gpu2["scores"][0]["raw"], 87);
    assert_eq!(gpu2["scores"][0]["weight"], 30);
    assert_eq!(gpu2["scores"][1]["scorer"], "capacity");
    assert_eq!(gpu2["scores"][1]["weight"], 6);
    // A GPU request: balance. The learned shapes (this share, a whole node of the largest
    // kind, a whole GPU) ask at most 0.17 GPU per CPU; gpu-2's 12 free CPUs serve its idle GPU
    // before and after, so nothing is stranded: excess 0.5, ⌊100 / 1.5⌋ = 66.
    assert_eq!(gpu2["scores"][2]["scorer"], "balance");
    assert_eq!(gpu2["scores"][2]["raw"], 66);
    assert_eq!(gpu2["scores"][2]["weight"], 50);
    // A share: share packing too. This GPU and gpu-1's GPU 3 have 0.5 free, and this one ends
    // full: N(0) − N(0.5) + 1 ≤ −1, so at least 50 + 50 × 1 / (100 / 100) = 100 points (fewer
    // than 100 partly used GPUs count as 100; the score stops at 100).
    assert_eq!(gpu2["scores"][3]["scorer"], "packing");
    assert_eq!(gpu2["scores"][3]["raw"], 100);
    assert_eq!(gpu2["scores"][3]["weight"], 30);
    assert_eq!(gpu2["total"], 9432);
    // Every node of the cluster is listed, excluded ones with their reason.
    let nodes = attempt["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 7);
    let draining = nodes.iter().find(|n| n["node"] == "gpu-3").unwrap();
    assert_eq!(draining["state"], "draining");
    assert_eq!(draining["excluded"]["reason"], "draining");
    assert_eq!(draining["passed"], false);
}

#[test]
fn cpu_task_avoids_gpu_nodes() {
    let report = explain_json("cpu-task.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    // Any CPU node: none strands a GPU, so they tie, and the tie is broken at random (seeded).
    common::tie_pick(&report, 0, &["cpu-1", "cpu-2", "cpu-3"]);
    let shortlist = &report["attempts"][0]["shortlist"];
    assert_eq!(*shortlist, serde_json::json!(["cpu-1", "cpu-2", "cpu-3"]));
    assert_eq!(report["decision"]["instances"], serde_json::json!({}));
    let nodes = report["attempts"][0]["nodes"].as_array().unwrap();
    let gpu1 = nodes.iter().find(|n| n["node"] == "gpu-1").unwrap();
    assert_eq!(gpu1["preferences"][0]["preference"], "avoid_gpu_nodes");
    assert_eq!(gpu1["preferences"][0]["preferred"], false);
}

#[test]
fn spread_takes_the_first_node_that_fits() {
    let report = explain_json("spread.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    assert_eq!(report["decision"]["node"], "cpu-1");
    assert_eq!(report["attempts"][0]["attempt"], "SPREAD");
}

#[test]
fn hard_affinity_places_on_its_node_only() {
    let report = explain_json("affinity-hard.yaml");
    assert_eq!(report["decision"]["node"], "cpu-3");
    let nodes = report["attempts"][0]["nodes"].as_array().unwrap();
    let others: Vec<&Value> = nodes.iter().filter(|n| n["node"] != "cpu-3").collect();
    assert_eq!(others.len(), 6);
    assert!(others.iter().all(|n| n["excluded"]["reason"] == "not_affinity_node"));
}

#[test]
fn soft_affinity_spills_to_default_when_its_node_is_busy() {
    let report = explain_json("affinity-soft.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    // cpu-1 or cpu-2 (cpu-3, busy, has 2 CPU free): a tie among CPU nodes, at random.
    let node = common::tie_pick(&report, 1, &["cpu-1", "cpu-2"]);
    let attempts = report["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["attempt"], "soft node affinity to cpu-3");
    assert_eq!(attempts[0]["code"], "soft_node_affinity");
    assert!(attempts[0]["chosen"].is_null());
    assert_eq!(attempts[1]["attempt"], "DEFAULT");
    assert_eq!(attempts[1]["code"], "default");
    assert_eq!(attempts[1]["chosen"], node.as_str());
}

#[test]
fn sixteen_gpus_are_infeasible() {
    let report = explain_json("infeasible.yaml");
    assert_eq!(report["decision"], serde_json::json!({"outcome": "infeasible"}));
    let codes = rejected_codes(&report);
    assert_eq!(codes[0], "insufficient_total:GPU", "{codes:?}");
    assert!(codes.contains(&"draining".to_string()), "{codes:?}");
    assert!(codes.contains(&"dead".to_string()), "{codes:?}");
    assert_eq!(report["diagnosis"]["attempts"][0]["could_fit_later"], false);
    assert_eq!(report["diagnosis"]["attempts"][0]["nodes"], 7);
    assert_eq!(report["diagnosis"]["attempts"][0]["attempt"], "DEFAULT");
    assert_eq!(report["diagnosis"]["attempts"][0]["code"], "default");
    let summary = report["diagnosis"]["summary"].as_str().unwrap();
    assert!(summary.contains("too little GPU in total"), "{summary}");
}

#[test]
fn a_share_larger_than_any_free_gpu_piece_is_pending() {
    let report = explain_json("fragmented.yaml");
    assert_eq!(report["decision"], serde_json::json!({"outcome": "pending"}));
    let rejected = &report["diagnosis"]["attempts"][0]["rejected"];
    let fragmented = rejected
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["reason"] == "fragmented:GPU")
        .expect("fragmented:GPU is a reason");
    assert_eq!(fragmented["nodes"], 2);
    assert_eq!(fragmented["text"], "GPU fragmented across instances");
    assert_eq!(report["diagnosis"]["attempts"][0]["could_fit_later"], true);
    // gpu-2's two GPUs are each half used (the long allocation form): 1 GPU free in sum.
    let gpu2 = report["attempts"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "gpu-2")
        .expect("gpu-2 is listed");
    assert_eq!(gpu2["rejections"][0]["reason"], "fragmented:GPU");
    assert_eq!(
        gpu2["rejections"][0]["text"],
        "needs 0.75 GPU inside one instance; no single instance has that much free"
    );
    let free = gpu2["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["filter"] == "resources_free")
        .expect("resources_free ran");
    assert_eq!(free["passed"], true, "enough GPU is free in sum");
}

#[test]
fn table_output_starts_with_the_decision_and_fits_100_columns() {
    let output = explain(&example("cluster.yaml"), &example("actor.yaml"), &[]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.lines().next(), Some("placed on gpu-2, GPU instances [0]"));
    assert!(text.contains("fragmentation 87×30"), "{text}");
    assert!(text.contains("excluded: draining"), "{text}");
    assert!(text.contains("chosen"), "{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "too wide: {line}");
    }

    let output = explain(&example("cluster.yaml"), &example("fragmented.yaml"), &[]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("pending: DEFAULT: 0/7 nodes can take it now"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Determinism.

#[test]
fn same_files_and_seed_give_identical_output() {
    for request in ["actor.yaml", "cpu-task.yaml", "affinity-soft.yaml"] {
        for seed in ["0", "7"] {
            let run = || {
                explain(
                    &example("cluster.yaml"),
                    &example(request),
                    &["--output", "json", "--seed", seed],
                )
                .stdout
            };
            let first = run();
            assert!(!first.is_empty());
            assert_eq!(first, run(), "{request} seed {seed}");
        }
    }
}

#[test]
fn the_seed_picks_among_the_shortlist() {
    // With top_k_fraction 1 every CPU node is shortlisted, so the pick is the seed's.
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "c.yaml",
        "scheduler: {top_k_fraction: 1}\nnodes:\n  - {id: a, resources: {CPU: 8}}\n  \
         - {id: b, resources: {CPU: 8}}\n  - {id: c, resources: {CPU: 8}}\n",
    );
    let request = write(&dir, "r.yaml", "resources: {CPU: 1}\n");
    let mut chosen = std::collections::BTreeSet::new();
    for seed in 0..32 {
        let output =
            explain(&cluster, &request, &["--output", "json", "--seed", &seed.to_string()]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["attempts"][0]["shortlist"].as_array().unwrap().len(), 3);
        chosen.insert(report["decision"]["node"].as_str().unwrap().to_string());
    }
    assert!(chosen.len() > 1, "different seeds pick different nodes: {chosen:?}");
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit status 2, and stderr names the file and the field.

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Asserts exit status 2 and that stderr names the file, the field and each of `rule`.
fn assert_bad_input(output: &Output, file: &Path, field: &str, rule: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "no decision on bad input");
    assert!(stderr.contains(file.to_str().unwrap()), "names the file {}: {stderr}", file.display());
    assert!(stderr.contains(field), "names the field {field}: {stderr}");
    for part in rule {
        assert!(stderr.contains(part), "states the rule ({part}): {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A cluster file with `text` against the example actor.
fn bad_cluster(text: &str, field: &str, rule: &[&str]) {
    let dir = TempDir::new().unwrap();
    let cluster = write(&dir, "cluster.yaml", text);
    let output = explain(&cluster, &example("actor.yaml"), &[]);
    assert_bad_input(&output, &cluster, field, rule);
}

/// A request file with `text` against the example cluster.
fn bad_request(text: &str, field: &str, rule: &[&str]) {
    let dir = TempDir::new().unwrap();
    let request = write(&dir, "request.yaml", text);
    let output = explain(&example("cluster.yaml"), &request, &[]);
    assert_bad_input(&output, &request, field, rule);
}

#[test]
fn negative_amount() {
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {CPU: 4}\n  - id: b\n    resources: {CPU: -1}\n",
        "nodes[1].resources.CPU",
        &["negative", ":5:22"],
    );
}

#[test]
fn non_numeric_amounts() {
    for amount in [".nan", "NaN", ".inf", "lots", "[1]"] {
        bad_request(&format!("resources: {{CPU: {amount}}}\n"), "resources.CPU", &[":1:"]);
    }
    bad_request("resources: {CPU: lots}\n", "resources.CPU", &["not a decimal number"]);
}

#[test]
fn more_than_four_decimals() {
    bad_request("resources: {CPU: 1.00001}\n", "resources.CPU", &["more than 4 decimal places"]);
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {memory: \"1.23456Gi\"}\n",
        "nodes[0].resources.memory",
        &["decimal"],
    );
}

#[test]
fn one_and_a_half_gpus_in_a_request() {
    bad_request(
        "resources: {CPU: 1, GPU: 1.5}\n",
        "resources.GPU",
        &["1.5 is not allowed", "whole number"],
    );
}

#[test]
fn unknown_keys() {
    bad_request(
        "resources: {CPU: 1}\nschedulng_strategy: SPREAD\n",
        "schedulng_strategy",
        &["unknown field"],
    );
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {CPU: 4}\n    zone: a\n",
        "nodes[0].zone",
        &["unknown field"],
    );
    bad_cluster("scheduler: {spread: 0.5}\nnodes: []\n", "scheduler.spread", &["unknown field"]);
}

#[test]
fn bad_node_id() {
    bad_cluster(
        "nodes:\n  - id: node/1\n    resources: {CPU: 4}\n",
        "nodes[0].id",
        &["\"node/1\" is invalid", "1 to 63 characters"],
    );
}

#[test]
fn duplicate_node_id() {
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {CPU: 4}\n  - id: b\n    resources: {CPU: 4}\n  \
         - id: a\n    resources: {CPU: 2}\n",
        "nodes[2].id",
        &["already used by nodes[0]", ":6:"],
    );
}

#[test]
fn allocation_that_does_not_fit() {
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {CPU: 4}\n    allocations:\n      - {CPU: 3}\n      \
         - {CPU: 2}\n",
        "nodes[0].allocations[1]",
        &[
            "does not fit on node a after the allocations listed before it",
            "needs 2 CPU, has 1 free",
        ],
    );
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {CPU: 4}\n    allocations:\n      - {GPU: 1}\n",
        "nodes[0].allocations[0]",
        &["does not fit on node a: needs 1 GPU, has 0 in total"],
    );
    // 0.9 GPU is free in total but no GPU has 0.75 free.
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {GPU: 2}\n    allocations:\n      - {GPU: 0.6}\n      \
         - {GPU: 0.5}\n      - {GPU: 0.75}\n",
        "nodes[0].allocations[2]",
        &["after the allocations listed before it", "inside one instance"],
    );
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {GPU: 4}\n    allocations:\n      - {GPU: 1.5}\n",
        "nodes[0].allocations[0].GPU",
        &["whole number"],
    );
}

/// Places `request` on a one-node cluster whose node `g` has `allocations`; returns the
/// decision.
fn place_on(node_resources: &str, allocations: &str, request: &str) -> Value {
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "cluster.yaml",
        &format!(
            "nodes:\n  - id: g\n    resources: {node_resources}\n    allocations:\n{allocations}"
        ),
    );
    let request = write(&dir, "request.yaml", request);
    let output = explain(&cluster, &request, &["--output", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    report["decision"].clone()
}

#[test]
fn long_allocation_form_holds_the_named_instances() {
    // Instance 0 held whole: the request gets instance 1.
    let decision = place_on(
        "{CPU: 8, GPU: 2}",
        "      - resources: {CPU: 1, GPU: 1}\n        instances: {GPU: [0]}\n",
        "resources: {GPU: 1}\n",
    );
    assert_eq!(decision["outcome"], "placed");
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([1]));
    // Instance 1 held whole, which the short form would never choose: the request gets 0.
    let decision = place_on(
        "{CPU: 8, GPU: 2}",
        "      - {resources: {CPU: 1, GPU: 1}, instances: {GPU: [1]}}\n",
        "resources: {GPU: 1}\n",
    );
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([0]));
    // The same allocation in the short form takes instance 0.
    let decision =
        place_on("{CPU: 8, GPU: 2}", "      - {CPU: 1, GPU: 1}\n", "resources: {GPU: 1}\n");
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([1]));
    // A share on instance 2: a half goes there (tightest fit), a whole GPU to instance 0.
    let shares = "      - {resources: {GPU: 0.5}, instances: {GPU: [2]}}\n";
    let decision = place_on("{GPU: 3}", shares, "resources: {GPU: 0.5}\n");
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([2]));
    let decision = place_on("{GPU: 3}", shares, "resources: {GPU: 2}\n");
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([0, 1]));
    // Two half-used GPUs, the seed's example: 0.75 cannot go anywhere.
    let halves = "      - {resources: {GPU: 0.5}, instances: {GPU: [0]}}\n      \
                  - {resources: {GPU: 0.5}, instances: {GPU: [1]}}\n";
    let decision = place_on("{GPU: 2}", halves, "resources: {GPU: 0.75}\n");
    assert_eq!(decision["outcome"], "pending");
    // Both forms in one list, and a resource named `resources` in the short form.
    let decision = place_on(
        "{CPU: 4, GPU: 2, resources: 4}",
        "      - {resources: 2, GPU: 0.5}\n      \
         - {resources: {resources: 1, GPU: 1}, instances: {GPU: [1]}}\n",
        "resources: {resources: 0.5, GPU: 0.5}\n",
    );
    assert_eq!(decision["outcome"], "placed");
    assert_eq!(decision["instances"]["GPU"], serde_json::json!([0]));
    let decision = place_on(
        "{CPU: 4, resources: 3}",
        "      - {resources: 2}\n      - {resources: {resources: 1}}\n",
        "resources: {resources: 0.5}\n",
    );
    assert_eq!(decision["outcome"], "pending", "all 3 `resources` are taken");
}

/// A cluster file whose node `a` (CPU 4, GPU 2) has `allocations`, against the example actor.
fn bad_allocations(allocations: &str, field: &str, rule: &[&str]) {
    bad_cluster(
        &format!(
            "nodes:\n  - id: a\n    resources: {{CPU: 4, GPU: 2}}\n    allocations:\n{allocations}"
        ),
        field,
        rule,
    );
}

#[test]
fn bad_instance_lists() {
    // An instance the node does not have.
    bad_allocations(
        "      - resources: {CPU: 1, GPU: 1}\n        instances: {GPU: [2]}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["node a", "there is no instance 2 (the node has 2)", ":6:20"],
    );
    // Too many and too few instances for the amount.
    bad_allocations(
        "      - {resources: {GPU: 1}, instances: {GPU: [0, 1]}}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["1 takes 1 instance(s), but 2 are named"],
    );
    bad_allocations(
        "      - {resources: {GPU: 2}, instances: {GPU: [0]}}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["2 takes 2 instance(s), but 1 are named"],
    );
    bad_allocations(
        "      - {resources: {GPU: 2}, instances: {GPU: [1, 1]}}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["instance 1 is named twice"],
    );
    // Instances of a resource that is not counted per instance, or not asked for.
    bad_allocations(
        "      - {resources: {CPU: 1, GPU: 1}, instances: {GPU: [0], CPU: [0]}}\n",
        "nodes[0].allocations[0].instances.CPU",
        &["only for unit-instance resources"],
    );
    bad_allocations(
        "      - {resources: {CPU: 1}, instances: {GPU: [0]}}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["only for unit-instance resources"],
    );
    // A GPU amount without its instances.
    bad_allocations(
        "      - {resources: {CPU: 1, GPU: 0.5}}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["name the instances it takes"],
    );
    // An instance already full, or with too little left, after the allocations before it.
    bad_allocations(
        "      - {GPU: 1}\n      - {resources: {GPU: 0.5}, instances: {GPU: [0]}}\n",
        "nodes[0].allocations[1].instances.GPU",
        &["instance 0 has 0 free, 0.5 is needed", ":6:"],
    );
    bad_allocations(
        "      - {resources: {GPU: 0.5}, instances: {GPU: [1]}}\n      \
         - {resources: {GPU: 1}, instances: {GPU: [1]}}\n",
        "nodes[0].allocations[1].instances.GPU",
        &["instance 1 has 0.5 free, 1 is needed"],
    );
    // Not enough in total or free is said as for the short form.
    bad_allocations(
        "      - {resources: {CPU: 8, GPU: 1}, instances: {GPU: [0]}}\n",
        "nodes[0].allocations[0]",
        &["does not fit on node a: needs 8 CPU, has 4 in total"],
    );
    bad_allocations(
        "      - {CPU: 3}\n      - {resources: {CPU: 2, GPU: 1}, instances: {GPU: [0]}}\n",
        "nodes[0].allocations[1]",
        &["does not fit on node a after the allocations listed before it: needs 2 CPU, has 1 free"],
    );
    // The amounts follow the request rules, at their own path.
    bad_allocations(
        "      - {resources: {GPU: 1.5}, instances: {GPU: [0, 1]}}\n",
        "nodes[0].allocations[0].resources.GPU",
        &["1.5 is not allowed", "whole number"],
    );
}

#[test]
fn malformed_long_allocations() {
    bad_allocations(
        "      - {resources: {GPU: 1}, instances: {GPU: [-1]}}\n",
        "nodes[0].allocations[0].instances.GPU[0]",
        &["-1 is negative"],
    );
    bad_allocations(
        "      - {resources: {GPU: 1}, instances: {GPU: 0}}\n",
        "nodes[0].allocations[0].instances.GPU",
        &["a list of instance IDs"],
    );
    bad_allocations(
        "      - {resources: {GPU: -1}}\n",
        "nodes[0].allocations[0].resources.GPU",
        &["negative"],
    );
    // The two forms do not mix.
    bad_allocations(
        "      - {CPU: 1, instances: {GPU: [0]}}\n",
        "nodes[0].allocations[0].instances",
        &["long form", "every amount inside resources"],
    );
    bad_allocations(
        "      - {resources: {GPU: 1}, CPU: 1}\n",
        "nodes[0].allocations[0].CPU",
        &["takes only the keys resources and instances"],
    );
    bad_allocations(
        "      - {resources: {GPU: 1}, instances: 1}\n",
        "nodes[0].allocations[0].instances",
        &["instances is a map of resource name to instance IDs"],
    );
    bad_allocations(
        "      - {instances: {GPU: [0]}}\n",
        "nodes[0].allocations[0]",
        &["needs resources"],
    );
}

#[test]
fn core_paths_quote_dotted_resource_names() {
    bad_cluster(
        "unit_instance_resources: [nvidia.com/gpu]\nnodes:\n  - id: a\n    \
         resources: {nvidia.com/gpu: 1.5}\n",
        "nodes[0].resources.\"nvidia.com/gpu\"",
        &["whole number"],
    );
    bad_cluster(
        "unit_instance_resources: [nvidia.com/gpu]\nnodes:\n  - id: a\n    \
         resources: {nvidia.com/gpu: 2}\n    allocations:\n      \
         - {resources: {nvidia.com/gpu: 1}, instances: {nvidia.com/gpu: [3]}}\n",
        "nodes[0].allocations[0].instances.\"nvidia.com/gpu\"",
        &["there is no instance 3"],
    );
}

#[test]
fn fractional_gpu_total() {
    bad_cluster(
        "nodes:\n  - id: a\n    resources: {GPU: 2.5}\n",
        "nodes[0].resources.GPU",
        &["whole number"],
    );
}

#[test]
fn unknown_strategy_name() {
    bad_request(
        "resources: {CPU: 1}\nscheduling_strategy: PACK\n",
        "scheduling_strategy",
        &["unknown scheduling strategy \"PACK\"", "DEFAULT, SPREAD, RANDOM"],
    );
    bad_request(
        "resources: {CPU: 1}\nscheduling_strategy: {type: STRICT_PACK}\n",
        "scheduling_strategy.type",
        &["unknown scheduling strategy"],
    );
}

#[test]
fn spill_on_unavailable_on_hard_affinity() {
    bad_request(
        "resources: {CPU: 1}\nscheduling_strategy:\n  type: NODE_AFFINITY\n  node_id: cpu-1\n  \
         spill_on_unavailable: true\n",
        "scheduling_strategy.spill_on_unavailable",
        &["only allowed when soft is true"],
    );
    bad_request(
        "resources: {CPU: 1}\nscheduling_strategy: {type: NODE_AFFINITY, node_id: cpu-1, soft: \
         true, fail_on_unavailable: true}\n",
        "scheduling_strategy.fail_on_unavailable",
        &["only allowed when soft is false"],
    );
    bad_request(
        "resources: {CPU: 1}\nscheduling_strategy: {type: NODE_AFFINITY, node_id: \"a b\"}\n",
        "scheduling_strategy.node_id",
        &["is invalid"],
    );
}

#[test]
fn preferred_node_that_does_not_exist() {
    bad_request(
        "resources: {CPU: 1}\npreferred_node: gpu-9\n",
        "preferred_node",
        &["no node gpu-9"],
    );
}

#[test]
fn malformed_yaml() {
    bad_request("resources: {CPU: 1\n", "resources", &["unclosed", ":1:"]);
    bad_cluster("nodes:\n  - id: a\n\tresources: {}\n", "cluster.yaml", &["tab"]);
    bad_cluster("nodes: 3\n", "nodes", &["sequence"]);
    bad_cluster("", "cluster.yaml", &["empty"]);
    bad_request("resources: {CPU: 1}\n---\nresources: {CPU: 2}\n", "request.yaml", &["multiple"]);
}

#[test]
fn missing_file() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("nope.yaml");
    let output = explain(&missing, &example("actor.yaml"), &[]);
    assert_bad_input(&output, &missing, "cannot read cluster file", &[]);
    let output = explain(&example("cluster.yaml"), dir.path(), &[]);
    assert_bad_input(&output, dir.path(), "cannot read request file", &[]);
}

#[test]
fn spread_threshold_above_one() {
    bad_cluster(
        "scheduler:\n  spread_threshold: 2\nnodes: []\n",
        "scheduler.spread_threshold",
        &["out of range", ":2:21"],
    );
    bad_cluster(
        "scheduler:\n  top_k_fraction: 0\nnodes: []\n",
        "scheduler.top_k_fraction",
        &["out of range"],
    );
}

#[test]
fn strict_booleans_and_resource_names() {
    bad_cluster(
        "scheduler: {avoid_gpu_nodes: no}\nnodes: []\n",
        "scheduler.avoid_gpu_nodes",
        &["true or false"],
    );
    bad_request(
        "resources: {\"G PU\": 1}\n",
        "resources.\"G PU\"",
        &["resource name \"G PU\" is invalid"],
    );
}

#[test]
fn usage_errors_exit_2() {
    let output = berth(&["explain", "--cluster", "x.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    let output =
        berth(&["explain", "--cluster", "x.yaml", "--request", "y.yaml", "--output", "xml"]);
    assert_eq!(output.status.code(), Some(2));
    let output = berth(&["explain", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in ["--cluster", "--request", "--seed", "--output"] {
        assert!(help.contains(flag), "{help}");
    }
}

#[test]
fn json_input_is_accepted() {
    let dir = TempDir::new().unwrap();
    let cluster =
        write(&dir, "c.json", r#"{"nodes": [{"id": "a", "resources": {"CPU": 4, "GPU": "1"}}]}"#);
    let request = write(
        &dir,
        "r.json",
        r#"{"resources": {"GPU": 1}, "scheduling_strategy": {"type": "node_affinity", "node_id": "a"}}"#,
    );
    let output = explain(&cluster, &request, &["--output", "json"]);
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["decision"]["node"], "a");
    assert_eq!(report["decision"]["instances"]["GPU"], serde_json::json!([0]));
}
