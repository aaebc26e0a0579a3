//! `berth bench failover` as it runs: two head processes on a real Redis (with the persistence
//! the head requires), the active one killed with SIGKILL each round; every figure reported,
//! in the order the takeover happens; and its bad input refused naming the flag.

use std::process::{Command, Stdio};

use berth_store::testutil::RedisServer;

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

fn berth(args: &[&str]) -> std::process::Output {
    Command::new(BERTH).args(args).stdin(Stdio::null()).output().expect("the berth binary runs")
}

#[test]
fn a_small_run_measures_two_takeovers() {
    let redis = RedisServer::start_durable().expect("redis-server (scripts/test installs it)");
    let store = redis.store_url("bench");
    let args = ["bench", "failover", "--store", &store, "--actors", "200", "--nodes", "3"];
    let mut all = args.to_vec();
    all.extend(["--runs", "2", "--output", "json"]);
    let output = berth(&all);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let rounds: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object a round"))
        .collect();
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    for round in &rounds {
        let figure = |name: &str| round[name].as_f64().unwrap_or_else(|| panic!("{name}: {round}"));
        let (serving, agents) = (figure("serving_s"), figure("agents_s"));
        // The standby serves before anything registers with it or is acknowledged by it.
        assert!(serving > 0.0 && agents >= serving, "{round}");
        assert!(figure("first_creation_s") >= serving * 0.5, "{round}");
    }
}

#[test]
fn it_needs_a_store_and_a_sane_lease() {
    let output = berth(&["bench", "failover"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs --store"));
    let output =
        berth(&["bench", "failover", "--store", "redis://127.0.0.1:1/0", "--lease-ttl", "0"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--lease-ttl"));
}
