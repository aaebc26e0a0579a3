//! Measured usage end to end: a head and an agent as separate `berth` processes, a task that
//! keeps a CPU busy (`sh -c 'while :; do :; done'`), and what the agent measured read back
//! from the REST node object (`berth get node`) and `/metrics`. Only "more than nothing" is
//! asserted about the figures (the machine's load is not the test's to predict); every wait is
//! a bounded poll on what the head answers.

#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::cluster::{created_id, wait_for, Cluster, WAIT};

/// `GET path` at `address` with the admin token, over plain HTTP/1.0: the answer's body.
fn get(cluster: &Cluster, address: &str, path: &str) -> Result<String, String> {
    let token = std::fs::read_to_string(cluster.file("token")).map_err(|e| e.to_string())?;
    let mut stream = TcpStream::connect(address).map_err(|e| format!("connect {address}: {e}"))?;
    let timeout = Some(Duration::from_secs(5));
    stream.set_read_timeout(timeout).and_then(|()| stream.set_write_timeout(timeout)).ok();
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: berth\r\nAuthorization: Bearer {}\r\n\r\n",
        token.trim()
    );
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    match answer.split_once("\r\n\r\n") {
        Some((head, body))
            if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") =>
        {
            Ok(body.to_string())
        }
        _ => Err(format!("GET {path}: {answer}")),
    }
}

/// The sample of `name{node="node_id"}` in a `/metrics` text.
fn sample(metrics: &str, name: &str, node_id: &str) -> Option<f64> {
    let prefix = format!("{name}{{node=\"{node_id}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

#[test]
fn a_busy_task_shows_cpu_in_its_measurement_and_its_nodes() {
    let cluster = Cluster::new();
    let (_head, address) = cluster.head(&[]);
    let agent_token = std::fs::read_to_string(cluster.file("agent-token")).unwrap();
    let _agent = cluster.agent_of(&address, "busy-1", agent_token.trim());
    cluster.wait_node("busy-1", "ALIVE");

    let submitted = cluster.ok(&[
        "task",
        "submit",
        "--command",
        "sh",
        "--arg",
        "-c",
        "--arg",
        "while :; do :; done",
        "--resources",
        "CPU=1",
    ]);
    let task = created_id(&submitted, "task-");
    cluster.wait_object(&task, "is RUNNING", |t| t["state"] == "RUNNING");

    // CPU figures need two looks (two heartbeats) at the running task.
    let node = wait_for("the node's measurement shows the busy task", WAIT, || {
        let node: Value = serde_json::from_str(&get(&cluster, &address, "/api/v1/nodes/busy-1")?)
            .map_err(|e| e.to_string())?;
        let measured = &node["measured"];
        let work = measured["work"].as_array().cloned().unwrap_or_default();
        let busy = work.iter().find(|w| w["work_id"] == task.as_str());
        match busy {
            Some(w)
                if w["cpu_millicores"].as_u64().unwrap_or(0) > 0
                    && measured["cpu_millicores"].as_u64().unwrap_or(0) > 0 =>
            {
                Ok(node.clone())
            }
            _ => Err(node.to_string()),
        }
    });
    let measured = &node["measured"];
    assert!(measured["cpus"].as_u64().unwrap() >= 1, "{node}");
    assert!(measured["memory_total_bytes"].as_u64().unwrap() > 0, "{node}");
    assert!(
        measured["memory_used_bytes"].as_u64() <= measured["memory_total_bytes"].as_u64(),
        "{node}"
    );
    let work = measured["work"].as_array().unwrap();
    let busy = work.iter().find(|w| w["work_id"] == task.as_str()).unwrap();
    assert_eq!(busy["attempt"], 1, "{node}");
    assert!(busy["memory_bytes"].as_u64().unwrap() > 0, "{node}");
    assert!(busy["processes"].as_u64().unwrap() >= 1, "{node}");

    // The CLI's view of the node carries it too; lists leave the attempts out.
    let listed = cluster.nodes();
    let listed = listed.iter().find(|n| n["node_id"] == "busy-1").unwrap();
    assert!(listed["measured"]["cpus"].as_u64().unwrap() >= 1, "{listed}");
    assert!(listed["measured"].get("work").is_none(), "{listed}");

    // /metrics: the node's gauges.
    let metrics = wait_for("/metrics has the node's gauges", WAIT, || {
        let text = get(&cluster, &address, "/metrics")?;
        match sample(&text, "berth_node_cpu_used_cores", "busy-1") {
            Some(cores) if cores > 0.0 => Ok(text),
            _ => Err(text),
        }
    });
    assert!(sample(&metrics, "berth_node_cpus", "busy-1").unwrap() >= 1.0, "{metrics}");
    assert!(sample(&metrics, "berth_node_memory_total_bytes", "busy-1").unwrap() > 0.0);
    assert!(!metrics.contains(&task), "no series per task: {metrics}");

    // The dashboard's task page shows it beside what was reserved.
    let page = get(&cluster, &address, &format!("/ui/tasks/{task}")).unwrap();
    assert!(page.contains("(attempt 1); reserved CPU 1"), "{page}");

    cluster.ok(&["kill", &task]);
}
