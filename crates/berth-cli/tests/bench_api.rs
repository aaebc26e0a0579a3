//! `berth bench api` as it runs: phases 1 to 5 with their simulated agents in a process of
//! their own, and the CPU time of each phase told apart (the head, the client, the agents);
//! phase 6 in one process, its simulated agents in a second one that reads the agent token on
//! its input and answers memory questions; and the agents' process refusing bad input.

use std::io::Write;
use std::process::{Command, Stdio};

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// Runs `berth ARGS` with nothing on its input, to its end.
fn berth(args: &[&str]) -> std::process::Output {
    Command::new(BERTH).args(args).stdin(Stdio::null()).output().expect("the berth binary runs")
}

#[test]
fn a_quick_run_measures_every_phase_and_tells_the_heads_cpu_from_its_clients_and_agents() {
    // A window other than the default: phase 6's child process must take it too.
    let args = ["bench", "api", "--quick", "--output", "json", "--assignment-window", "5"];
    let output = berth(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON");
    assert_eq!(result["assignment_window_ms"], 5, "{result}");
    for rate in ["actors_per_s", "groups_per_s", "batch_actors_per_s", "watched_actors_per_s"] {
        assert!(result[rate].as_f64().is_some_and(|r| r > 0.0), "{rate}: {result}");
    }
    assert_eq!(result["watchers_complete"], result["watchers"], "{result}");
    let cpus = [
        &result["actor_load"]["cpu"],
        &result["batch_load"]["cpu"],
        &result["watched_cpu"],
        &result["unwatched_cpu"],
    ];
    for cpu in cpus {
        let part = |name: &str| cpu[name].as_f64().unwrap_or_else(|| panic!("{name}: {cpu}"));
        let (head, client, agents) = (part("head_us"), part("client_us"), part("agents_us"));
        // Every part did work (the clock ticks every 10 ms: each phase is far longer), and the
        // total is the sum of the parts.
        assert!(head > 0.0 && client > 0.0 && agents > 0.0, "{cpu}");
        assert!((part("total_us") - (head + client + agents)).abs() < 1e-6, "{cpu}");
    }
}

#[test]
fn zero_runs_are_refused_with_the_flag_named() {
    let output = berth(&["bench", "api", "--quick", "--runs", "0"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("--runs: must be at least 1"), "{stderr}");
}

#[test]
fn a_window_over_a_second_is_refused_with_the_flag_named() {
    let output = berth(&["bench", "api", "--quick", "--assignment-window", "1001"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let rule = "--assignment-window: 1001 ms is more than 1000 ms";
    assert!(!output.status.success() && stderr.contains(rule), "{stderr}");
}

#[test]
fn phase_6_runs_its_agents_in_a_process_of_their_own_and_reports_both_memories() {
    let output = berth(&["bench", "api", "--case", "scale:200:4:50"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let scale: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert!(scale["alive_s"].as_f64().unwrap() > 0.0, "{scale}");
    for field in [
        "bytes_per_actor",
        "marginal_bytes_per_actor",
        "agents_bytes_per_actor",
        "agents_marginal_bytes_per_actor",
    ] {
        // Numbers (growth may be zero on so few actors), the agents' too: they had a process.
        assert!(scale[field].as_f64().is_some_and(f64::is_finite), "{field}: {scale}");
    }
}

#[test]
fn the_agents_process_refuses_a_missing_token_and_bad_sizes() {
    let run = |case: &str, input: &str| {
        let mut child = Command::new(BERTH)
            .args(["bench", "api", "--case", case])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the berth binary runs");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        (output.status.success(), String::from_utf8_lossy(&output.stderr).to_string())
    };
    let (ok, stderr) = run("agents:1:1:127.0.0.1:9", "\n");
    assert!(!ok && stderr.contains("agent token on the first line"), "{stderr}");
    let (ok, stderr) = run("agents:0:1:127.0.0.1:9", "token\n");
    assert!(!ok && stderr.contains("NODES must be a whole number of at least 1"), "{stderr}");
}
