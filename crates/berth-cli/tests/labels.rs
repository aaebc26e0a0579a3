//! Labels, selectors, fallbacks, taints and tolerations end to end: the real binary on the
//! label examples, `berth validate`, and bad input in the new file fields.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use tempfile::TempDir;

mod common;
use common::{example, explain, path, report as json_report, stderr, stdout};

fn berth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth")).args(args).output().expect("the berth binary runs")
}

/// The JSON report of an example request on the labelled example cluster.
fn labelled(request: &str) -> Value {
    json_report(&example("labelled-cluster.yaml"), &example(request))
}

/// The table of an example request on the labelled example cluster.
fn labelled_table(request: &str) -> String {
    let output = explain(&example("labelled-cluster.yaml"), &example(request), &[]);
    assert_eq!(output.status.code(), Some(0), "{request}: {}", stderr(&output));
    let text = stdout(&output);
    // The decision is one line however long (scripts read it); the rest fits 100 columns.
    for line in text.lines().skip(1) {
        assert!(line.chars().count() <= 100, "{request}: too wide: {line}");
    }
    text
}

/// Node `name` of attempt `attempt`.
fn node<'a>(report: &'a Value, attempt: usize, name: &str) -> &'a Value {
    report["attempts"][attempt]["nodes"]
        .as_array()
        .expect("nodes is a list")
        .iter()
        .find(|n| n["node"] == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
}

/// The reason codes of the diagnosis's attempt `attempt`.
fn rejected(report: &Value, attempt: usize) -> Vec<String> {
    report["diagnosis"]["attempts"][attempt]["rejected"]
        .as_array()
        .expect("rejected is a list")
        .iter()
        .map(|r| r["reason"].as_str().expect("reason code").to_string())
        .collect()
}

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let file = dir.path().join(name);
    std::fs::write(&file, text).expect("temp file written");
    file
}

// ---------------------------------------------------------------------------------------------
// The label examples do what their comments say.

#[test]
fn label_selector_example_places_on_the_only_matching_untainted_node() {
    let report = labelled("label-selector.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    assert_eq!(report["decision"]["node"], "cpu-b1");
    let attempt = &report["attempts"][0];
    assert_eq!(attempt["alternative"], 0);
    assert_eq!(
        attempt["label_selector"],
        json!({"berth.io/availability-zone": "us-west1-b", "berth.io/market-type": "!spot"})
    );
    for name in ["cpu-a1", "cpu-a2", "cpu-b2", "gpu-a1"] {
        assert_eq!(node(&report, 0, name)["excluded"]["reason"], "label_mismatch", "{name}");
    }
    let gpu = node(&report, 0, "gpu-b1");
    assert_eq!(gpu["excluded"], Value::Null);
    assert_eq!(gpu["rejections"][0]["reason"], "untolerated_taint:dedicated=ml");

    let table = labelled_table("label-selector.yaml");
    assert!(table.starts_with("placed on cpu-b1\n"), "{table}");
    assert!(table.contains("attempt 1 of 1: DEFAULT with label_selector"), "{table}");
    assert!(
        table.contains("{berth.io/availability-zone: us-west1-b, berth.io/market-type: !spot}"),
        "{table}"
    );
    assert!(table.contains("berth.io/market-type=spot"), "mismatched values shown: {table}");
}

#[test]
fn fallback_example_tries_the_m5_16xlarge_then_anything() {
    let report = labelled("fallback.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    // The CPU nodes strand no GPU, but the cluster's CPU runs out before its GPUs (69% of the
    // CPU free, 92% of the GPUs): best fit on CPU packs the request onto the fuller cpu-a1.
    assert_eq!(report["decision"]["node"], "cpu-a1");
    let attempts = report["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["alternative"], 0);
    assert_eq!(attempts[0]["label_selector"], json!({"instance_type": "m5.16xlarge"}));
    assert_eq!(attempts[0]["chosen"], Value::Null);
    let busy = node(&report, 0, "cpu-b1");
    assert_eq!(busy["rejections"][0]["reason"], "insufficient_available:CPU");
    assert_eq!(attempts[1]["alternative"], 1);
    assert_eq!(attempts[1]["label_selector"], json!({}));
    assert_eq!(attempts[1]["chosen"], "cpu-a1");

    let table = labelled_table("fallback.yaml");
    assert!(
        table.contains("attempt 1 of 2: DEFAULT with label_selector {instance_type: m5.16xlarge}"),
        "{table}"
    );
    assert!(
        table.contains("attempt 2 of 2: DEFAULT with fallback_strategy[0] {} (any node)"),
        "{table}"
    );
}

#[test]
fn every_alternative_tried_is_in_the_diagnosis() {
    let dir = TempDir::new().unwrap();
    let request = write(
        &dir,
        "r.yaml",
        "resources: {CPU: 8}\nlabel_selector: {instance_type: m5.16xlarge}\n\
         fallback_strategy:\n  - label_selector: {instance_type: nope}\n",
    );
    let report = json_report(&example("labelled-cluster.yaml"), &request);
    assert_eq!(report["decision"]["outcome"], "pending", "cpu-b1 frees up some day");
    let diagnosis = &report["diagnosis"];
    assert_eq!(diagnosis["attempts"][0]["alternative"], 0);
    assert_eq!(diagnosis["attempts"][1]["alternative"], 1);
    assert_eq!(rejected(&report, 1), ["label_mismatch"]);
    let summary = diagnosis["summary"].as_str().unwrap();
    assert!(summary.starts_with("DEFAULT with label_selector: 0/6 nodes"), "{summary}");
    assert!(summary.contains("; DEFAULT with fallback_strategy[0]: 0/6 nodes"), "{summary}");
}

#[test]
fn toleration_example_places_on_the_tainted_node() {
    let report = labelled("toleration.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    assert_eq!(report["decision"]["node"], "gpu-b1");
    assert_eq!(report["decision"]["instances"]["GPU"], json!([0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(report["attempts"][0]["alternative"], Value::Null);
    assert_eq!(
        node(&report, 0, "gpu-b1")["taints"],
        json!({"dedicated": "ml", "berth.io/rare-GPU": "true"})
    );
    let table = labelled_table("toleration.yaml");
    assert!(table.contains("tolerated: dedicated=ml,"), "{table}");

    // Without the toleration: infeasible, with the taint as the reason.
    let dir = TempDir::new().unwrap();
    let request = write(&dir, "r.yaml", "resources: {CPU: 8, GPU: 8}\n");
    let report = json_report(&example("labelled-cluster.yaml"), &request);
    assert_eq!(report["decision"]["outcome"], "infeasible");
    assert_eq!(rejected(&report, 0), ["insufficient_total:GPU", "untolerated_taint:dedicated=ml"]);
}

#[test]
fn node_label_example_prefers_soft_among_hard() {
    let report = labelled("node-label.yaml");
    // The two spot nodes tie (the cluster has GPUs: the default places the best node, ties
    // at random, seeded).
    common::tie_pick(&report, 0, &["cpu-a2", "cpu-b2"]);
    let attempt = &report["attempts"][0];
    assert_eq!(attempt["code"], "node_label");
    assert_eq!(attempt["alternative"], Value::Null);
    for name in ["gpu-a1", "gpu-b1"] {
        assert_eq!(node(&report, 0, name)["excluded"]["reason"], "label_mismatch", "{name}");
    }
    let soft = |name: &str| node(&report, 0, name)["preferences"][0].clone();
    assert_eq!(soft("cpu-a2"), json!({"preference": "soft_labels", "preferred": true}));
    assert_eq!(soft("cpu-b2"), json!({"preference": "soft_labels", "preferred": true}));
    assert_eq!(soft("cpu-a1"), json!({"preference": "soft_labels", "preferred": false}));

    let table = labelled_table("node-label.yaml");
    // Too wide for one line: each selector on its own.
    assert!(table.contains("attempt 1 of 1: NODE_LABEL\n"), "{table}");
    assert!(table.contains("\n  hard: {instance_type: in(m5.4xlarge,m5.16xlarge)}\n"), "{table}");
    assert!(table.contains("\n  soft: {berth.io/market-type: spot}\n"), "{table}");
}

#[test]
fn rare_resource_example_keeps_cpu_work_off_gpu_nodes() {
    let report = labelled("rare-resource.yaml");
    assert_eq!(report["decision"]["outcome"], "pending");
    let codes = rejected(&report, 0);
    assert!(codes.contains(&"untolerated_taint:berth.io/rare-GPU=true".to_string()), "{codes:?}");
    assert!(codes.contains(&"insufficient_available:CPU".to_string()), "{codes:?}");
    assert_eq!(node(&report, 0, "gpu-a1")["taints"], json!({"berth.io/rare-GPU": "true"}));
    assert_eq!(node(&report, 0, "cpu-b1")["taints"], json!({}));
    labelled_table("rare-resource.yaml");

    // Without rare_resources, avoid_gpu_nodes only prefers CPU nodes: it goes to gpu-a1.
    let dir = TempDir::new().unwrap();
    let text = std::fs::read_to_string(example("labelled-cluster.yaml")).unwrap();
    let without = text.replace("rare_resources: [GPU]\n", "");
    assert_ne!(text, without, "the example lists rare_resources");
    let cluster = write(&dir, "cluster.yaml", &without);
    let report = json_report(&cluster, &example("rare-resource.yaml"));
    assert_eq!(report["decision"]["node"], "gpu-a1");
}

#[test]
fn nodes_carry_default_and_user_labels() {
    let report = labelled("fallback.yaml");
    assert_eq!(
        node(&report, 0, "cpu-a1")["labels"],
        json!({
            "berth.io/accelerator-type": "",
            "berth.io/availability-region": "us-west1",
            "berth.io/availability-zone": "us-west1-a",
            "berth.io/market-type": "on-demand",
            "berth.io/node-group": "cpu-workers",
            "berth.io/node-id": "cpu-a1",
            "instance_type": "m5.4xlarge",
        })
    );
    assert_eq!(node(&report, 0, "gpu-b1")["labels"]["berth.io/accelerator-type"], "nvidia-h100");
}

#[test]
fn label_examples_are_deterministic() {
    for request in ["label-selector.yaml", "fallback.yaml", "node-label.yaml"] {
        for format in ["table", "json"] {
            let run = || {
                explain(
                    &example("labelled-cluster.yaml"),
                    &example(request),
                    &["--output", format, "--seed", "3"],
                )
                .stdout
            };
            assert_eq!(run(), run(), "{request} {format}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `berth validate`.

/// Runs `berth validate …`; asserts the exit status, and that an error (2) has a message on
/// stderr containing every one of `needles` and nothing on stdout.
fn validate(args: &[&str], status: i32, needles: &[&str]) -> Output {
    let mut all = vec!["validate"];
    all.extend_from_slice(args);
    let output = berth(&all);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(status), "{args:?}: {err}{}", stdout(&output));
    if status == 2 {
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(output.stdout.is_empty(), "{args:?}");
        for needle in needles {
            assert!(err.contains(needle), "{args:?}: {err} lacks {needle}");
        }
    } else {
        assert!(output.stderr.is_empty(), "{args:?}: {err}");
    }
    output
}

#[test]
fn validate_labels_normalises_or_names_the_bad_key() {
    let output = validate(&["labels", " team=ml, region=us-west1,empty="], 0, &[]);
    assert_eq!(stdout(&output), "empty=,region=us-west1,team=ml\n");
    let output = validate(&["labels", r#"{"team": "ml", "region": "us-west1"}"#], 0, &[]);
    assert_eq!(stdout(&output), "region=us-west1,team=ml\n");
    let output =
        validate(&["labels", "example.com/gpu_type=A100,berth.io/market-type=spot"], 0, &[]);
    assert_eq!(stdout(&output), "berth.io/market-type=spot,example.com/gpu_type=A100\n");

    let long = "v".repeat(64);
    let long_value = format!("k={long}");
    let cases: &[(&str, &[&str])] = &[
        ("Example.com/x=1", &["\"Example.com/x\"", "prefix"]),
        ("-team=ml", &["\"-team\"", "beginning and ending"]),
        ("team=m l", &["\"team\"", "\"m l\"", "a value is empty or 1 to 63"]),
        (&long_value, &["\"k\"", "63"]),
        ("berth.io/node-id=n1", &["berth.io/node-id", "cannot be given"]),
        ("a=1,a=2", &["\"a\"", "given twice"]),
        ("team", &["\"team\"", "not key=value"]),
        (r#"{"team": 4}"#, &["\"team\"", "number 4", "quotes"]),
        (r#"{"team": "ml", "team": "ai"}"#, &["\"team\"", "given twice"]),
        (r#"{"team": "ml""#, &["JSON"]),
    ];
    for (labels, needles) in cases {
        validate(&["labels", labels], 2, needles);
    }
}

#[test]
fn validate_labels_merges_the_labels_file_under_the_flag() {
    let dir = TempDir::new().unwrap();
    let file = write(&dir, "labels.yaml", "# from the pod\nzone: us-west1-a\nteam: ml\n");
    let output = validate(&["labels", "--labels-file", path(&file), "zone=us-west1-b"], 0, &[]);
    assert_eq!(stdout(&output), "team=ml,zone=us-west1-b\n", "the flag wins");
    let output = validate(&["labels", "--labels-file", path(&file)], 0, &[]);
    assert_eq!(stdout(&output), "team=ml,zone=us-west1-a\n");
    let empty = write(&dir, "empty.yaml", "# no labels\n");
    let output = validate(&["labels", "--labels-file", path(&empty), "a=b"], 0, &[]);
    assert_eq!(stdout(&output), "a=b\n");

    let bad = write(&dir, "bad.yaml", "zone: us-west1-a\n\"example.com/x\": \"a b\"\n");
    validate(
        &["labels", "--labels-file", path(&bad)],
        2,
        &["labels file", "bad.yaml:2", "\"example.com/x\"", "\"a b\""],
    );
    let number = write(&dir, "number.yaml", "replicas: 3\n");
    validate(&["labels", "--labels-file", path(&number)], 2, &["replicas", "quotes"]);
    let reserved = write(&dir, "reserved.yaml", "berth.io/node-id: x\n");
    validate(&["labels", "--labels-file", path(&reserved)], 2, &["berth.io/node-id"]);
    validate(
        &["labels", "--labels-file", path(&dir.path().join("missing.yaml"))],
        2,
        &["cannot read labels file"],
    );
    // One of the two is needed.
    validate(&["labels"], 2, &[]);
}

#[test]
fn validate_selector_exit_codes_follow_grep() {
    let selector = r#"{"region": "in(us-west,us-east)"}"#;
    let output = validate(&["selector", selector], 0, &[]);
    assert_eq!(stdout(&output), "{\"region\":\"in(us-west,us-east)\"}\n");
    let output =
        validate(&["selector", selector, "--node-labels", r#"{"region": "us-west"}"#], 0, &[]);
    assert_eq!(stdout(&output), "{\"region\":\"in(us-west,us-east)\"}\nmatches\n");
    let output = validate(&["selector", selector, "--node-labels", "region=eu-west"], 1, &[]);
    assert!(stdout(&output).contains("does not match: region: the node's value \"eu-west\""));
    let output = validate(&["selector", selector, "--node-labels", "zone=a"], 1, &[]);
    assert!(stdout(&output).contains("no such label"), "{}", stdout(&output));
    // Every operator, case-insensitive; the output is canonical.
    let every = r#"{"a": "x", "b": "!x", "c": "IN(x, y)", "d": "!in(x)", "e": "Exists()", "f": "!exists()", "g": "exists(),!in(z)"}"#;
    let node = "a=x,b=y,c=y,d=y,e=,g=w";
    let output = validate(&["selector", every, "--node-labels", node], 0, &[]);
    assert_eq!(
        stdout(&output).lines().next(),
        Some(
            r#"{"a":"x","b":"!x","c":"in(x,y)","d":"!in(x)","e":"exists()","f":"!exists()","g":"exists(),!in(z)"}"#
        )
    );
    validate(&["selector", every, "--node-labels", "a=x,b=y,c=y,d=y,e=,f=1,g=w"], 1, &[]);
    validate(&["selector", "{}", "--node-labels", ""], 0, &[]);

    let long = format!(r#"{{"region": "{}"}}"#, "v".repeat(64));
    let cases: &[(&str, &[&str])] = &[
        (r#"{"region": "in()"}"#, &["\"region\"", "in() needs at least one value"]),
        (r#"{"region": "in(a,"}"#, &["\"region\"", "not closed"]),
        (r#"{"region": "!!in(a)"}"#, &["\"region\"", "more than one '!'"]),
        (&long, &["\"region\"", "longer than 63 characters"]),
        (r#"{"region": "us west"}"#, &["\"region\"", "not a label value"]),
        (r#"{"region": "in(a/b)"}"#, &["\"region\"", "not a label value"]),
        (r#"{"region": "has(a)"}"#, &["\"region\"", "unknown operator"]),
        (r#"{"bad key": "a"}"#, &["\"bad key\"", "a name is 1 to 63"]),
        (r#"{"region": 1}"#, &["\"region\"", "number 1"]),
        (r#"{"region": null}"#, &["\"region\"", "null"]),
        ("region=us-west", &["JSON object"]),
        ("[]", &["JSON object"]),
    ];
    for (selector, needles) in cases {
        validate(&["selector", selector], 2, needles);
        // Invalid wins over a node: 2, not 1.
        validate(&["selector", selector, "--node-labels", "region=a"], 2, needles);
    }
    validate(
        &["selector", selector, "--node-labels", "re gion=a"],
        2,
        &["--node-labels", "\"re gion\""],
    );
    validate(&["selector", selector, "--node-labels", r#"{"region": 1}"#], 2, &["--node-labels"]);
    // The node's own labels may include berth.io/node-id.
    validate(
        &["selector", r#"{"berth.io/node-id": "n1"}"#, "--node-labels", "berth.io/node-id=n1"],
        0,
        &[],
    );
}

#[test]
fn validate_tolerations_exit_codes_follow_grep() {
    let exists = r#"{"gpu_node": "exists()"}"#;
    let output =
        validate(&["tolerations", exists, "--node-taints", r#"{"gpu_node": "true"}"#], 0, &[]);
    assert_eq!(stdout(&output), "{\"gpu_node\":\"exists()\"}\ntolerated\n");
    validate(
        &["tolerations", r#"{"gpu_type": "in(A100)"}"#, "--node-taints", "gpu_type=A100"],
        0,
        &[],
    );
    let output = validate(
        &["tolerations", r#"{"gpu_type": "in(A100)"}"#, "--node-taints", "gpu_type=V100"],
        1,
        &[],
    );
    assert!(stdout(&output).contains("not tolerated: taint gpu_type=V100"), "{}", stdout(&output));
    // Every taint must be tolerated.
    let output = validate(
        &["tolerations", r#"{"team": "ml"}"#, "--node-taints", "team=ml,memory-pressure=high"],
        1,
        &[],
    );
    assert!(stdout(&output).contains("memory-pressure=high"), "{}", stdout(&output));
    validate(
        &[
            "tolerations",
            r#"{"team": "ml", "memory-pressure": "exists()"}"#,
            "--node-taints",
            "team=ml,memory-pressure=high",
        ],
        0,
        &[],
    );
    // A node without taints is tolerated by anything; without a node, only validity is checked.
    validate(&["tolerations", "{}", "--node-taints", ""], 0, &[]);
    validate(&["tolerations", exists], 0, &[]);

    validate(
        &["tolerations", r#"{"gpu_node": "exists(x)"}"#],
        2,
        &["\"gpu_node\"", "takes no values"],
    );
    validate(
        &["tolerations", r#"{"gpu_node": "in()"}"#, "--node-taints", "gpu_node=true"],
        2,
        &["in() needs at least one value"],
    );
    validate(&["tolerations", r#"{"gpu_node": true}"#], 2, &["\"gpu_node\"", "boolean true"]);
    validate(
        &["tolerations", exists, "--node-taints", "gpu node=true"],
        2,
        &["--node-taints", "taint key \"gpu node\""],
    );
    validate(&["tolerations", exists, "--node-taints", "gpu_node"], 2, &["taint list item"]);
}

#[test]
fn validate_help_explains_the_exit_codes() {
    for args in [
        &["validate", "--help"][..],
        &["validate", "selector", "--help"],
        &["validate", "tolerations", "--help"],
    ] {
        let output = berth(args);
        assert_eq!(output.status.code(), Some(0));
        let help = stdout(&output);
        assert!(help.contains("Exit status"), "{help}");
        assert!(help.contains("0") && help.contains("1") && help.contains("2"), "{help}");
    }
    let help = stdout(&berth(&["validate", "labels", "--help"]));
    assert!(help.contains("--labels-file") && help.contains("Exit status"), "{help}");
}

// ---------------------------------------------------------------------------------------------
// Bad input in the new fields: exit 2, the file, the field path and the rule.

fn assert_bad(output: &Output, file: &Path, field: &str, rule: &[&str]) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(output.stdout.is_empty());
    assert!(err.contains(path(file)), "names the file: {err}");
    assert!(err.contains(&format!(": {field}: ")), "names {field}: {err}");
    for needle in rule {
        assert!(err.contains(needle), "{err} lacks {needle}");
    }
}

fn bad_cluster(text: &str, field: &str, rule: &[&str]) {
    let dir = TempDir::new().unwrap();
    let cluster = write(&dir, "cluster.yaml", text);
    assert_bad(&explain(&cluster, &example("cpu-task.yaml"), &[]), &cluster, field, rule);
}

fn bad_request(text: &str, field: &str, rule: &[&str]) {
    let dir = TempDir::new().unwrap();
    let request = write(&dir, "request.yaml", text);
    let output = explain(&example("labelled-cluster.yaml"), &request, &[]);
    assert_bad(&output, &request, field, rule);
}

/// Three nodes, the last with `extra` lines.
fn nodes_with(extra: &str) -> String {
    format!(
        "nodes:\n  - id: a\n    resources: {{}}\n  - id: b\n    resources: {{}}\n  \
         - id: c\n    resources: {{CPU: 1}}\n{extra}"
    )
}

#[test]
fn bad_labels_taints_and_facts() {
    bad_cluster(
        &nodes_with("    labels: {\"example.com/x\": \"a b\"}\n"),
        "nodes[2].labels.\"example.com/x\"",
        &["\"a b\"", "a value is empty or 1 to 63"],
    );
    bad_cluster(
        &nodes_with("    labels: {\"Example.com/x\": a}\n"),
        "nodes[2].labels.\"Example.com/x\"",
        &["prefix"],
    );
    bad_cluster(
        &nodes_with("    labels: {berth.io/node-id: c}\n"),
        "nodes[2].labels.\"berth.io/node-id\"",
        &["berth.io/node-id", "cannot be given"],
    );
    bad_cluster(&nodes_with("    labels: {team: 42}\n"), "nodes[2].labels.team", &["42", "quotes"]);
    // A label named `value` keeps its name in the path.
    bad_cluster(&nodes_with("    labels: {value: -x}\n"), "nodes[2].labels.value", &["\"-x\""]);
    bad_cluster(&nodes_with("    labels: [team]\n"), "nodes[2].labels", &["map of label key"]);
    bad_cluster(
        &nodes_with("    taints: {gpu_node: true}\n"),
        "nodes[2].taints.gpu_node",
        &["boolean true", "\"true\""],
    );
    bad_cluster(
        &nodes_with("    taints: {gpu_node: \"bad value\"}\n"),
        "nodes[2].taints.gpu_node",
        &["taint \"gpu_node\"", "\"bad value\""],
    );
    bad_cluster(
        &nodes_with("    taints: {\"gpu node\": \"true\"}\n"),
        "nodes[2].taints.\"gpu node\"",
        &["taint key \"gpu node\""],
    );
    bad_cluster(
        &nodes_with("    taints: {berth.io/rare-GPU: \"true\"}\n"),
        "nodes[2].taints.\"berth.io/rare-GPU\"",
        &["set by Berth", "rare_resources"],
    );
    bad_cluster(
        &nodes_with("    accelerator_type: nvidia a100\n"),
        "nodes[2].accelerator_type",
        &["\"nvidia a100\""],
    );
    bad_cluster(
        &nodes_with("    availability_zone: z1\n    labels: {berth.io/availability-zone: z2}\n"),
        "nodes[2].labels.\"berth.io/availability-zone\"",
        &["contradicts availability_zone"],
    );
    bad_cluster(&nodes_with("    zone: z1\n"), "nodes[2].zone", &["unknown field"]);
}

#[test]
fn bad_rare_resources() {
    bad_cluster(
        "rare_resources: [GPU, GPU]\nnodes: []\n",
        "rare_resources[1]",
        &["already listed"],
    );
    bad_cluster(
        "rare_resources: [nvidia.com/t4, \"nvidia.com:t4\"]\nnodes: []\n",
        "rare_resources[1]",
        &["berth.io/rare-nvidia.com-t4", "rare_resources[0]"],
    );
    bad_cluster("rare_resources: [\"G PU\"]\nnodes: []\n", "rare_resources[0]", &["\"G PU\""]);
}

#[test]
fn a_fact_and_a_label_that_agree_are_fine_and_user_labels_override_defaults() {
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "cluster.yaml",
        "nodes:\n  - id: a\n    resources: {CPU: 4}\n    availability_zone: z1\n    \
         labels: {berth.io/availability-zone: z1, berth.io/market-type: spot}\n",
    );
    let request = write(&dir, "r.yaml", "resources: {CPU: 1}\n");
    let report = json_report(&cluster, &request);
    let labels = &report["attempts"][0]["nodes"][0]["labels"];
    assert_eq!(labels["berth.io/availability-zone"], "z1");
    assert_eq!(labels["berth.io/market-type"], "spot");
}

#[test]
fn bad_selectors_fallbacks_and_tolerations() {
    bad_request(
        "resources: {CPU: 1}\nlabel_selector: {region: \"in()\"}\n",
        "label_selector.region",
        &["in() needs at least one value"],
    );
    bad_request(
        "resources: {CPU: 1}\nlabel_selector:\n  region: in(a,\n",
        "label_selector.region",
        &["not closed"],
    );
    bad_request(
        "resources: {CPU: 1}\nlabel_selector: {\"bad key\": a}\n",
        "label_selector.\"bad key\"",
        &["label key \"bad key\""],
    );
    bad_request(
        "resources: {CPU: 1}\nlabel_selector: {region: 1}\n",
        "label_selector.region",
        &["number 1", "quotes"],
    );
    bad_request(
        "resources: {CPU: 1}\nfallback_strategy:\n  - label_selector: {}\n  \
         - label_selector: {zone: \"!!in(a)\"}\n",
        "fallback_strategy[1].label_selector.zone",
        &["more than one '!'"],
    );
    bad_request(
        "resources: {CPU: 1}\nfallback_strategy:\n  - {label_selector: {}, bundles: []}\n",
        "fallback_strategy[0].bundles",
        &["unknown field"],
    );
    bad_request(
        "resources: {CPU: 1}\nfallback_strategy:\n  - {}\n",
        "fallback_strategy[0]",
        &["label_selector"],
    );
    bad_request(
        "resources: {CPU: 1}\ntolerations: {gpu_node: \"exists(a)\"}\n",
        "tolerations.gpu_node",
        &["exists() takes no values"],
    );
    bad_request(
        "resources: {CPU: 1}\ntolerations: {gpu_node: true}\n",
        "tolerations.gpu_node",
        &["boolean true"],
    );
}

#[test]
fn bad_node_label_strategies() {
    let strategy = |s: &str| format!("resources: {{CPU: 1}}\nscheduling_strategy: {s}\n");
    bad_request(
        &strategy("{type: NODE_LABEL, hard: {zone: \"in()\"}}"),
        "scheduling_strategy.hard.zone",
        &["in() needs at least one value"],
    );
    bad_request(
        &strategy("{type: NODE_LABEL, soft: {zone: \"a b\"}}"),
        "scheduling_strategy.soft.zone",
        &["not a label value"],
    );
    bad_request(&strategy("NODE_LABEL"), "scheduling_strategy", &["hard, soft or both"]);
    bad_request(&strategy("{type: NODE_LABEL}"), "scheduling_strategy", &["hard, soft or both"]);
    bad_request(
        &strategy("{type: NODE_LABEL, soft: true}"),
        "scheduling_strategy",
        &["soft is a map"],
    );
    bad_request(
        &strategy("{type: NODE_LABEL, hard: {a: b}, node_id: x}"),
        "scheduling_strategy",
        &["node_id is only allowed with type NODE_AFFINITY"],
    );
    bad_request(
        &strategy("{type: SPREAD, hard: {a: b}}"),
        "scheduling_strategy",
        &["hard is only allowed with type NODE_LABEL"],
    );
    bad_request(
        &strategy("{type: NODE_AFFINITY, node_id: a, soft: {a: b}}"),
        "scheduling_strategy",
        &["needs type NODE_LABEL"],
    );
}

#[test]
fn label_fields_in_json_files_and_selectors_on_every_strategy() {
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "c.json",
        r#"{"rare_resources": ["GPU"], "nodes": [
            {"id": "a", "resources": {"CPU": 4}, "availability_zone": "z1", "labels": {"team": "ml"}},
            {"id": "b", "resources": {"CPU": 4, "GPU": 1}, "availability_zone": "z2", "taints": {"gpu_node": "true"}}]}"#,
    );
    for strategy in ["DEFAULT", "SPREAD", "RANDOM"] {
        let request = write(
            &dir,
            "r.json",
            &format!(
                r#"{{"resources": {{"CPU": 1, "GPU": 1}}, "scheduling_strategy": "{strategy}",
                   "label_selector": {{"berth.io/availability-zone": "in(z1,z2)"}},
                   "tolerations": {{"gpu_node": "exists()"}}}}"#
            ),
        );
        let report = json_report(&cluster, &request);
        assert_eq!(report["decision"]["node"], "b", "{strategy}");
        assert_eq!(report["attempts"][0]["alternative"], 0, "{strategy}");
    }
}
