//! `berth explain --profile`: the seed's tables from the example files, and bad profiles.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use tempfile::TempDir;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

fn explain(cluster: &Path, request: &Path, profile: &Path, extra: &[&str]) -> Output {
    let path = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["explain", "--cluster", &path(cluster), "--request", &path(request)])
        .args(["--profile", &path(profile)])
        .args(extra)
        .output()
        .expect("the berth binary runs")
}

/// `--output json` on example files; asserts exit 0 and a quiet stderr.
fn report(cluster: &str, request: &str, profile: &str) -> Value {
    let output =
        explain(&example(cluster), &example(request), &example(profile), &["--output", "json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{request} with {profile}: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// Per node of the first attempt: `"<scorer> <raw>×<weight>, … = <total>"`, or the code of
/// its first rejection.
fn rows(report: &Value) -> Vec<String> {
    report["attempts"][0]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| {
            let name = node["node"].as_str().unwrap();
            if node["passed"] == false {
                return format!("{name}: {}", node["rejections"][0]["reason"].as_str().unwrap());
            }
            let scores: Vec<String> = node["scores"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| format!("{} {}×{}", s["scorer"].as_str().unwrap(), s["raw"], s["weight"]))
                .collect();
            format!("{name}: {} = {}", scores.join(", "), node["total"])
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The seed's tables.

#[test]
fn seed_retention_table() {
    // The seed's rows "node resources don't meet the task request" (score 0) are nodes the
    // resources_total filter rejects before any scorer runs.
    let cases = [
        (
            "sra-cpu-task.yaml",
            [
                "node1: sra_retention 100×2 = 200",
                "node2: sra_retention 50×2 = 100",
                "node3: sra_retention 0×2 = 0",
            ],
            "node1",
        ),
        (
            "sra-gpu-task-0.yaml",
            [
                "node1: insufficient_total:nvidia.com/t4",
                "node2: sra_retention 50×2 = 100",
                "node3: sra_retention 0×2 = 0",
            ],
            "node2",
        ),
        (
            "sra-gpu-task-1.yaml",
            [
                "node1: insufficient_total:nvidia.com/t4",
                "node2: insufficient_total:nvidia.com/a10",
                "node3: sra_retention 0×2 = 0",
            ],
            "node3",
        ),
    ];
    for (request, expected, placed) in cases {
        let report = report("sra-cluster.yaml", request, "profile-retention.yaml");
        assert_eq!(rows(&report), expected, "{request}");
        assert_eq!(report["decision"]["node"], placed, "{request}");
    }
}

#[test]
fn seed_retention_table_in_the_table_output() {
    let output = explain(
        &example("sra-cluster.yaml"),
        &example("sra-cpu-task.yaml"),
        &example("profile-retention.yaml"),
        &[],
    );
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.lines().next(), Some("placed on node1"));
    // Each node's row: its score line (raw × weight) and its total.
    for (node, score, total) in
        [("node1", "100×2", "200"), ("node2", "50×2", "100"), ("node3", "0×2", "0")]
    {
        let row = text.lines().find(|l| l.contains(&format!(" {node} "))).expect(node);
        assert!(row.contains(&format!(" {total} ")), "{row}");
        let after = text.split(row).nth(1).unwrap().lines().nth(1).unwrap();
        assert!(after.contains(&format!("sra_retention {score}")), "{row}\n{after}");
    }
}

#[test]
fn seed_proportional_worked_example() {
    // single-1000-0 runs; single-1000-1 would leave 58 CPUs, below 8 idle GPUs × 8.
    let report =
        report("proportional-cluster.yaml", "proportional-pod.yaml", "profile-proportional.yaml");
    assert_eq!(report["decision"], json!({"outcome": "pending"}));
    let attempt = &report["diagnosis"]["attempts"][0];
    assert_eq!(attempt["could_fit_later"], true);
    assert_eq!(
        attempt["rejected"],
        json!([{
            "reason": "kept_for_primary:CPU:nvidia.com/gpu",
            "text": "would leave too little CPU for idle nvidia.com/gpu",
            "nodes": 1
        }])
    );
    let node = &report["attempts"][0]["nodes"][0];
    let filter = node["filters"].as_array().unwrap().last().unwrap();
    assert_eq!(filter["filter"], "sra_proportional");
    assert_eq!(
        filter["text"],
        "leaves 58 CPU free, below the 64 CPU kept for 8 idle nvidia.com/gpu: 6 CPU short"
    );
    // Before single-1000-0 ran, the node took it: 74 − 8 = 66 CPUs left, at least 64.
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "c.yaml",
        "nodes:\n  - {id: nodeC0-0, resources: {CPU: 74, memory: 128G, nvidia.com/gpu: 8}}\n",
    );
    let output = explain(
        &cluster,
        &example("proportional-pod.yaml"),
        &example("profile-proportional.yaml"),
        &["--output", "json"],
    );
    let placed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(placed["decision"]["node"], "nodeC0-0");
}

#[test]
fn strategy_fit_packs_gpu_work_and_spreads_cpu_work() {
    let worker = report("ai-cluster.yaml", "pytorch-worker.yaml", "profile-strategy-fit.yaml");
    assert_eq!(
        rows(&worker),
        [
            // gpu-1: GPU 7/8 = 0.875, CPU 44/64 = 0.6875: 100 × (2 × 0.875 + 0.6875) / 3 = 81.25.
            "gpu-1: resource_strategy_fit 81.25×10 = 812.5",
            // gpu-2: GPU 2/8 = 0.25, CPU 56/64 = 0.875: 100 × 1.375 / 3 = 45.8333… (6 decimals).
            "gpu-2: resource_strategy_fit 45.833333×10 = 458.33333",
            "cpu-1: insufficient_total:nvidia.com/gpu",
            "cpu-2: insufficient_total:nvidia.com/gpu",
        ]
    );
    assert_eq!(worker["decision"]["node"], "gpu-1");
    assert_eq!(worker["decision"]["instances"], json!({"nvidia.com/gpu": [6]}));

    // CPU work spreads to the node with the most CPU free, here a GPU node ...
    let master = report("ai-cluster.yaml", "pytorch-master.yaml", "profile-strategy-fit.yaml");
    assert_eq!(master["decision"]["node"], "gpu-2");
    // ... unless retention keeps it off GPU nodes: the seed's AI scenario.
    let master = report("ai-cluster.yaml", "pytorch-master.yaml", "profile-ai.yaml");
    assert_eq!(
        rows(&master),
        [
            // CPU alone: free share after 4 more CPUs, 44/64, 56/64, 4/32 and 24/32.
            "gpu-1: resource_strategy_fit 68.75×10, sra_retention 0×10 = 687.5",
            "gpu-2: resource_strategy_fit 87.5×10, sra_retention 0×10 = 875",
            "cpu-1: resource_strategy_fit 12.5×10, sra_retention 100×10 = 1125",
            "cpu-2: resource_strategy_fit 75×10, sra_retention 100×10 = 1750",
        ]
    );
    assert_eq!(master["decision"]["node"], "cpu-2");
    let worker = report("ai-cluster.yaml", "pytorch-worker.yaml", "profile-ai.yaml");
    assert_eq!(worker["decision"]["node"], "gpu-1");
}

#[test]
fn nested_and_flat_profiles_explain_identically() {
    let dir = TempDir::new().unwrap();
    let nested = write(
        &dir,
        "nested.yaml",
        "sra:\n  policy: retention\n  resources: nvidia.com/t4, nvidia.com/a10\n  \
         retention: {weight: 2, nvidia.com/t4: 1, nvidia.com/a10: 1}\n",
    );
    for request in ["sra-cpu-task.yaml", "sra-gpu-task-0.yaml"] {
        let run = |profile: &Path| {
            explain(&example("sra-cluster.yaml"), &example(request), profile, &["--output", "json"])
                .stdout
        };
        assert_eq!(run(&nested), run(&example("profile-retention.yaml")), "{request}");
    }
}

#[test]
fn volcanos_released_form_explains_like_the_design_form() {
    for request in ["pytorch-master.yaml", "pytorch-worker.yaml"] {
        let design = report("ai-cluster.yaml", request, "profile-ai.yaml");
        let volcano = report("ai-cluster.yaml", request, "profile-volcano.yaml");
        assert_eq!(design, volcano, "{request}");
    }
}

#[test]
fn scores_are_the_seed_formula_on_shares_that_are_not_whole_percents() {
    // RSF: CPU LeastAllocated weight 2, memory MostAllocated weight 1, plugin weight 10;
    // retention: a.com/x weight 1, a.com/y weight 2, policy weight 3. Node n: 500 CPU and
    // memory, 200 of each used, a.com/x but no a.com/y; the request asks 100 of each.
    //   RSF = 100 × (2 × (500 − 300)/500 + 1 × 300/500) / 3 = 46.6666…; × 10 = 466.666…
    //   retention = 100 × (missing 2) / (sum 3) = 66.6666…; × 3 = 200
    // Each raw score is rounded to a millionth; the total is within 10⁻⁴ of the formula's.
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "cluster.yaml",
        concat!(
            "nodes:\n",
            "  - id: n\n",
            "    resources: {CPU: 500, memory: 500, a.com/x: 1}\n",
            "    allocations: [{CPU: 200, memory: 200}]\n",
        ),
    );
    let request = write(&dir, "request.yaml", "resources: {CPU: 100, memory: 100}\n");
    let fit = concat!(
        "resourceStrategyFitWeight: 10\n",
        "resources:\n",
        "  cpu: {type: LeastAllocated, weight: 2}\n",
        "  memory: {type: MostAllocated, weight: 1}\n",
    );
    let volcano = write(
        &dir,
        "volcano.yaml",
        &format!(
            "{fit}sra:\n  enable: true\n  resources: a.com/x, a.com/y\n  weight: 3\n  \
             resourceWeight: {{a.com/x: 1, a.com/y: 2}}\n"
        ),
    );
    let design = write(
        &dir,
        "design.yaml",
        &format!(
            "{fit}sra.policy: retention\nsra.resources: a.com/x, a.com/y\n\
             sra.retention.weight: 3\nsra.retention.a.com/x: 1\nsra.retention.a.com/y: 2\n"
        ),
    );
    let json = |profile: &Path| -> Value {
        let output = explain(&cluster, &request, profile, &["--output", "json"]);
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let report = json(&volcano);
    assert_eq!(report, json(&design), "both forms give the same report");
    assert_eq!(
        rows(&report),
        ["n: resource_strategy_fit 46.666667×10, sra_retention 66.666667×3 = 666.666671"]
    );
    let node = &report["attempts"][0]["nodes"][0];
    let formula = 100.0 * (2.0 * 0.4 + 0.6) / 3.0 * 10.0 + 100.0 * 2.0 / 3.0 * 3.0;
    let total = node["total"].as_f64().unwrap();
    assert!((total - formula).abs() < 1e-4, "{total} against the formula's {formula}");
    // The table shows the same exact numbers.
    let table = explain(&cluster, &request, &volcano, &[]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("resource_strategy_fit 46.666667×10") && text.contains("666.666671"),
        "{text}"
    );
}

#[test]
fn every_example_profile_loads() {
    for profile in [
        "profile-volcano.yaml",
        "profile-retention.yaml",
        "profile-proportional.yaml",
        "profile-strategy-fit.yaml",
        "profile-ai.yaml",
    ] {
        for format in ["table", "json"] {
            let output = explain(
                &example("cluster.yaml"),
                &example("actor.yaml"),
                &example(profile),
                &["--output", format],
            );
            assert_eq!(
                output.status.code(),
                Some(0),
                "{profile}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bad profiles: exit status 2; stderr names the file, the key and the rule.

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn bad_profile(text: &str, expected: &[&str]) {
    let dir = TempDir::new().unwrap();
    let profile = write(&dir, "profile.yaml", text);
    let output =
        explain(&example("sra-cluster.yaml"), &example("sra-cpu-task.yaml"), &profile, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
    assert!(output.stdout.is_empty(), "no decision on bad input");
    assert!(stderr.starts_with("error: profile file "), "{stderr}");
    assert!(stderr.contains(profile.to_str().unwrap()), "names the file: {stderr}");
    for part in expected {
        assert!(stderr.contains(part), "{part:?} in: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_profiles_name_the_key_and_the_rule() {
    bad_profile(
        "sra.policy: retention\nsra.resources: nvidia.com/t4\nsra.retention.weight: -2\n",
        &[":3:23: sra.retention.weight: -2 is negative", "3 | sra.retention.weight: -2\n", "^"],
    );
    bad_profile(
        "resources:\n  cpu: {type: Packed, weight: 1}\n",
        &[":2:15: resources.cpu.type: unknown strategy type \"Packed\"", "MostAllocated"],
    );
    bad_profile("sra.polcy: retention\n", &[":1:1: sra.polcy: unknown key"]);
    bad_profile("hybridWeight: lots\n", &["hybridWeight: expected a weight"]);
    bad_profile("sra:\n  policy: retention\n", &["sra.resources: is required"]);
    bad_profile("", &["the profile is empty"]);
    bad_profile("sra: [\n", &["unclosed"]);
}

#[test]
fn missing_profile_file() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("nope.yaml");
    let output =
        explain(&example("sra-cluster.yaml"), &example("sra-cpu-task.yaml"), &missing, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read profile file"), "{stderr}");
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
}
