//! `berth sim openb` end to end on a small generated trace (the full trace is not for CI):
//! the table, the JSON lines, the CSV, the SVG and the PNG; bad input and its exit status.

use std::path::Path;
use std::process::{Command, Output};

fn berth(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command.args(args).env_remove("BERTH_TRACES");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the berth binary runs")
}

/// A trace folder: 6 nodes of two models, 40 pods of every kind, with one gpu_spec.
fn trace_folder(dir: &Path) {
    let mut nodes = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
    for i in 0..4 {
        nodes.push_str(&format!("node-g{i},32000,131072,4,G2\n"));
    }
    for i in 0..2 {
        nodes.push_str(&format!("node-t{i},64000,262144,2,T4\n"));
    }
    std::fs::write(dir.join("openb_node_list_gpu_node.csv"), nodes).unwrap();
    let mut pods = String::from(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,\
         deletion_time,scheduled_time\n",
    );
    let kinds = [
        "4000,8192,1,500,",
        "8000,8192,1,1000,",
        "2000,1024,0,0,",
        "4000,4096,2,1000,",
        "2000,2048,1,300,T4",
    ];
    for i in 0..40 {
        pods.push_str(&format!("pod-{i},{},LS,Running,0,1,0\n", kinds[i % kinds.len()]));
    }
    std::fs::write(dir.join("openb_pod_list_default.csv"), pods).unwrap();
}

#[test]
fn a_small_run_writes_the_table_the_csv_and_the_plots() {
    let dir = tempfile::tempdir().unwrap();
    trace_folder(dir.path());
    let out = dir.path().join("out");
    let (traces, out_arg) = (dir.path().to_str().unwrap(), out.to_str().unwrap());
    let output =
        berth(&["sim", "openb", "--traces-dir", traces, "--seeds", "1..3", "--out", out_arg], &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.starts_with("trace default: GPU allocation (%)"), "{table}");
    for policy in ["random", "best-fit", "most-allocated-gpu", "default", "fragmentation"] {
        assert!(table.lines().any(|l| l.starts_with(policy)), "{policy}:\n{table}");
    }
    assert!(table.contains("k=100") && table.contains("k=130"), "{table}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("15 replays"), "{stderr}");

    // The CSV: a header, and rows whose numbers parse.
    let csv = std::fs::read_to_string(out.join("openb.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("trace,policy,k,seeds,alloc_mean,alloc_sd,frag_rate_mean,frag_rate_sd,frag_gpu_mean,frag_gpu_sd")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() > 5 * 40, "a row per policy and bucket reached: {}", rows.len());
    for row in &rows {
        assert_eq!(row.len(), 10, "{row:?}");
        assert_eq!(row[0], "default");
        for value in &row[2..] {
            value.parse::<f64>().unwrap_or_else(|_| panic!("{row:?}"));
        }
    }
    // The plots: an SVG document and a PNG image.
    let svg = std::fs::read_to_string(out.join("openb-default.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}", &svg[..80]);
    assert!(svg.contains("fragmentation"), "the legend names the policies");
    let png = std::fs::read(out.join("openb-default.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 10_000, "a drawn image, not an empty one: {} bytes", png.len());
}

#[test]
fn json_lines_by_path_with_a_profile() {
    let dir = tempfile::tempdir().unwrap();
    trace_folder(dir.path());
    let profile = dir.path().join("packer.yaml");
    std::fs::write(&profile, "bestFit: {weight: 1}\npick: best\n").unwrap();
    let pods = dir.path().join("openb_pod_list_default.csv");
    let nodes = dir.path().join("openb_node_list_gpu_node.csv");
    let out = dir.path().join("out");
    let args = [
        "sim",
        "openb",
        "--trace",
        pods.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
        "--policy",
        "best-fit",
        "--profile",
        profile.to_str().unwrap(),
        "--seeds",
        "7,8",
        "--out",
        out.to_str().unwrap(),
        "--output",
        "json",
    ];
    let output = berth(&args, &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let objects: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[0]["trace"], "default");
    assert_eq!(objects[0]["policy"], "best-fit");
    assert_eq!(objects[1]["policy"], "packer");
    assert_eq!(objects[1]["seeds"], serde_json::json!([7, 8]));
    for object in &objects {
        let alloc = object["alloc"].as_object().unwrap();
        assert!(alloc["100"].as_f64().unwrap() > 50.0, "{object}");
        for key in ["alloc_sd", "frag_rate"] {
            assert_eq!(object[key].as_object().unwrap().len(), alloc.len(), "{key}");
        }
    }
    // Same flags, same numbers.
    assert_eq!(String::from_utf8(berth(&args, &[]).stdout).unwrap(), stdout);
}

#[test]
fn bad_input_is_exit_status_2_with_the_place_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    trace_folder(dir.path());
    let traces = dir.path().to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let bad = dir.path().join("openb_pod_list_bad.csv");
    std::fs::write(
        &bad,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,0,1,1000\np1,1000,0,1,2000\n",
    )
    .unwrap();
    // (extra flags, words of the message)
    let cases: &[(&[&str], &str)] = &[
        (&["--trace", "bad"], "openb_pod_list_bad.csv:3: column gpu_milli: 2000 is out of range"),
        (&["--trace", "nope"], "--trace nope: there is no openb_pod_list_nope.csv"),
        (&["--policy", "fgd"], "--policy fgd: unknown policy"),
        (&["--seeds", "9..3"], "--seeds: \"9..3\" is empty"),
        (&["--profile", "missing.yaml"], "profile file missing.yaml"),
    ];
    for (flags, message) in cases {
        let mut args = vec!["sim", "openb", "--traces-dir", traces, "--out", out];
        args.extend_from_slice(flags);
        let output = berth(&args, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
    // The trace folder from the environment, and where it looked when there is none.
    let output =
        berth(&["sim", "openb", "--trace", "bad", "--out", out], &[("BERTH_TRACES", traces)]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("openb_pod_list_bad.csv:3"));
    let output = berth(&["sim", "openb", "--out", out], &[("BERTH_TRACES", "/nonexistent/traces")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("BERTH_TRACES=/nonexistent/traces: no such directory"));
}
