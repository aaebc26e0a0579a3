//! The daemons' logs reach stderr and the data directory: a head's `berth.log` (JSON lines with
//! `--log-format json`), an agent's own `agents/<node>/berth.log` with the warning it logs when
//! its head goes away, and a bad `--log-level` refused with the flag named.

use nix::sys::signal::Signal;
use serde_json::Value;

mod common;
use common::cluster::{wait_for, Cluster, WAIT};

#[test]
fn warnings_of_head_and_agent_reach_their_log_files() {
    let cluster = Cluster::new();
    let (mut head, address) = cluster.head(&["--log-format", "json"]);
    let mut agent = cluster
        .spawn("agent", &["start", "--address", &address, "--node-id", "n1", "--num-cpus", "2"]);
    cluster.wait_node("n1", "ALIVE");

    // The head's file: JSON lines, fields first, with the start-up line.
    let head_log = std::fs::read_to_string(cluster.file("berth.log")).expect("the head's log");
    let serving: Value = head_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["message"] == "head serving")
        .unwrap_or_else(|| panic!("no `head serving` JSON line in:\n{head_log}"));
    assert_eq!(serving["level"], "INFO", "{serving}");
    assert_eq!(serving["fields"]["address"], address.as_str(), "{serving}");
    assert!(head.log().contains("\"head serving\""), "stderr has it too:\n{}", head.log());

    // The head goes away: the agent warns, in its own file (text lines).
    head.signal(Signal::SIGTERM);
    head.wait_exit(WAIT);
    let agent_log = cluster.data_dir().join("agents").join("n1").join("berth.log");
    let line = wait_for("the agent logs that it lost its head", WAIT, || {
        agent.assert_running();
        let text = std::fs::read_to_string(&agent_log).unwrap_or_default();
        text.lines()
            .find(|l| l.contains("WARN") && l.contains("lost the head"))
            .map(str::to_string)
            .ok_or(text)
    });
    assert!(line.contains("node_id"), "fields are in the line: {line}");
    agent.kill();
}

#[test]
fn a_bad_log_level_is_refused_naming_the_flag() {
    let cluster = Cluster::new();
    let run = cluster.run(&["start", "--head", "--port", "0", "--log-level", "berth=loud"]);
    let stderr = run.fails(2);
    assert!(stderr.contains("--log-level: \"berth=loud\" is not a level"), "{stderr}");
    assert!(!cluster.file("berth.log").exists(), "nothing written before the flags are checked");
}
