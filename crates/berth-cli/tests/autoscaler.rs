//! The autoscaler end to end (seeds 003 and 004, autoscaler adaptation): the real binary,
//! `berth up --autoscale` with the `local` provider (agents as processes on this machine) and
//! `berth start --head --autoscaler` with a `command` provider script; work that waits gets
//! the node type the scheduler would put it on, idle nodes go, failures are retried and
//! reported, and a head restarted mid-launch does not launch twice.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::cluster::{created_id, wait_for, Cluster, WAIT};

/// A GPU type tainted `gpu_node=true`, and a CPU type; nodes idle 1 s are removed.
const LOCAL_TYPES: &str = "
provider: {type: local}
max_nodes: 6
idle_timeout_s: 1
launch_timeout_s: 60
node_types:
  cpu:
    resources: {CPU: 2}
    availability_zone: zone-a
  gpu:
    resources: {CPU: 4, GPU: 1}
    taints: {gpu_node: 'true'}
    accelerator_type: nvidia-l4
";

fn write(cluster: &Cluster, name: &str, text: &str) -> PathBuf {
    let path = cluster.data_dir().parent().expect("the test's root").join(name);
    std::fs::write(&path, text).expect("file written");
    path
}

fn status(cluster: &Cluster) -> Value {
    cluster.json(&["autoscaler", "status"])
}

/// Waits until the autoscaler's status satisfies `check`.
fn wait_status(cluster: &Cluster, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, WAIT, || {
        let status = status(cluster);
        if check(&status) {
            Ok(status)
        } else {
            Err(serde_json::to_string_pretty(&status).unwrap_or_default())
        }
    })
}

fn counter(status: &Value, name: &str) -> u64 {
    status["counters"][name].as_u64().unwrap_or(0)
}

/// The node type (the `berth.io/node-group` label) of the node `object` runs on.
fn type_of_node(cluster: &Cluster, object: &Value) -> String {
    let node = object["node_id"].as_str().or(object["placement"]["node_id"].as_str());
    let node = node.unwrap_or_else(|| panic!("placed: {object}"));
    let node = cluster.json(&["get", "node", node]);
    node["labels"]["berth.io/node-group"].as_str().unwrap_or("").to_string()
}

#[test]
fn waiting_work_gets_the_type_the_scheduler_would_choose_and_idle_nodes_go() {
    let cluster = Cluster::new();
    let types = write(&cluster, "types.yaml", LOCAL_TYPES);
    let mut up = cluster.spawn(
        "up",
        &[
            "up",
            "--autoscale",
            types.to_str().unwrap(),
            "--port",
            "0",
            "--rare-resource-isolation",
            "GPU",
        ],
    );
    cluster.wait_head(&mut up);
    assert!(cluster.nodes().is_empty(), "no node before work waits");

    // A GPU actor that tolerates gpu_node: only the GPU type can take it.
    let gpu = cluster.sleeper(&["--resources", "GPU=1", "--tolerations", "gpu_node=exists()"]);
    // A CPU actor under rare-resource isolation: the GPU type is tainted too, so the CPU type.
    let cpu = cluster.sleeper(&["--resources", "CPU=1"]);
    let gpu_actor = cluster.wait_object(&gpu, "is ALIVE", |a| a["state"] == "ALIVE");
    let cpu_actor = cluster.wait_object(&cpu, "is ALIVE", |a| a["state"] == "ALIVE");
    assert_eq!(type_of_node(&cluster, &gpu_actor), "gpu");
    assert_eq!(type_of_node(&cluster, &cpu_actor), "cpu");
    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 2, "one node per type: {nodes:?}");
    let gpu_node = nodes.iter().find(|n| n["labels"]["berth.io/node-group"] == "gpu").unwrap();
    let taints = gpu_node["taints"].to_string();
    assert!(taints.contains("gpu_node") && taints.contains("berth.io/rare-GPU"), "{taints}");
    assert_eq!(gpu_node["labels"]["berth.io/accelerator-type"], "nvidia-l4");

    // The next round sees both registered.
    let shown = wait_status(&cluster, "both registered", |s| counter(s, "registered") == 2);
    assert_eq!(counter(&shown, "launched"), 2, "{shown}");
    let text = cluster.ok(&["autoscaler", "status"]);
    assert!(text.contains("local provider"), "{text}");
    assert!(text.contains(&format!("for {gpu}")), "the decision says why: {text}");
    let metrics = cluster.ok(&["status"]);
    assert!(metrics.contains("Nodes: 2 alive"), "{metrics}");

    // Nothing left on them: both are removed after idle_timeout_s.
    cluster.ok(&["kill", &gpu]);
    cluster.ok(&["kill", &cpu]);
    let shown = wait_status(&cluster, "both idle nodes removed", |s| {
        counter(s, "removed") == 2 && s["nodes"].as_array().is_some_and(|n| n.is_empty())
    });
    let actions: Vec<&str> = shown["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["action"].as_str())
        .collect();
    assert!(actions.contains(&"remove"), "{actions:?}");
    up.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(up.wait_exit(WAIT).success(), "{}", up.log());
}

#[test]
fn strict_spread_of_three_gets_three_nodes_and_what_no_type_serves_is_reported() {
    let cluster = Cluster::new();
    let types = write(&cluster, "types.yaml", LOCAL_TYPES);
    let mut up =
        cluster.spawn("up", &["up", "--autoscale", types.to_str().unwrap(), "--port", "0"]);
    cluster.wait_head(&mut up);

    // Eight GPUs on one node: no type has them. Reported with each type's reason; nothing
    // is launched for it.
    let big = cluster.sleeper(&["--resources", "GPU=8", "--tolerations", "gpu_node=exists()"]);
    let plan = cluster.json(&["autoscaler", "plan"]);
    let item = &plan["items"][0];
    assert_eq!(item["id"], big.as_str());
    assert_eq!(item["verdict"], "unservable", "{plan}");
    let detail = item["detail"].to_string();
    assert!(detail.contains("cpu: needs 8 GPU, has 0 in total"), "{detail}");
    assert!(detail.contains("gpu: needs 8 GPU, has 1 in total"), "{detail}");
    let text = cluster.ok(&["autoscaler", "plan"]);
    assert!(text.contains("no node type can take it"), "{text}");

    let pg = created_id(
        &cluster.ok(&[
            "pg",
            "create",
            "--bundles",
            r#"[{"CPU": 1}, {"CPU": 1}, {"CPU": 1}]"#,
            "--strategy",
            "STRICT_SPREAD",
        ]),
        "pg-",
    );
    let group = cluster.wait_object(&pg, "is CREATED", |g| g["state"] == "CREATED");
    let nodes: std::collections::BTreeSet<String> = group["bundles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["node_id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(nodes.len(), 3, "three distinct nodes: {group}");
    let shown = status(&cluster);
    assert_eq!(counter(&shown, "launched"), 3, "only the group's: {shown}");
    let actor = cluster.json(&["get", &big]);
    assert_eq!(actor["state"], "PENDING");
    up.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(up.wait_exit(WAIT).success(), "{}", up.log());
}

/// A `command` provider script: records each call in `calls`, then fails when `fail` exists.
fn script(cluster: &Cluster, calls: &Path, fail: &Path) -> PathBuf {
    let path = write(
        cluster,
        "nodes.sh",
        &format!(
            "#!/bin/sh\necho \"$1 $2 $3 $BERTH_NODE_RESOURCES $BERTH_NODE_TAINTS\" >> {calls}\n\
             if [ -e {fail} ]; then echo 'no capacity in zone-a' >&2; exit 3; fi\necho created\n",
            calls = calls.display(),
            fail = fail.display()
        ),
    );
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("executable");
    path
}

fn calls(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[test]
fn a_failing_command_is_retried_then_reported_and_a_silent_node_is_given_up() {
    let cluster = Cluster::new();
    let calls_path = cluster.data_dir().parent().unwrap().join("calls");
    let fail = write(&cluster, "fail", "");
    let program = script(&cluster, &calls_path, &fail);
    let types = write(
        &cluster,
        "types.yaml",
        &format!(
            "provider: {{type: command, command: [{}], retries: 1, timeout_s: 20}}\n\
             launch_timeout_s: 1\nnode_types:\n  cpu: {{resources: {{CPU: 2}}, taints: {{team: ml}}}}\n",
            program.display()
        ),
    );
    let (_head, address) = cluster.head(&["--autoscaler", types.to_str().unwrap()]);
    let task = created_id(
        &cluster.ok(&[
            "task",
            "submit",
            "--command",
            "true",
            "--resources",
            "CPU=1",
            "--tolerations",
            "team=ml",
        ]),
        "task-",
    );
    let shown = wait_status(&cluster, "the launch failed", |s| counter(s, "failed") >= 1);
    let made = calls(&calls_path);
    assert_eq!(made.len(), 2, "one try and one retry: {made:?}");
    assert!(made[0].starts_with("create cpu cpu-"), "{made:?}");
    assert!(made[0].contains(r#"{"CPU":"2"}"#) && made[0].contains("team=ml"), "{made:?}");
    let failed = shown["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["action"] == "launch_failed")
        .expect("a launch_failed decision");
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.contains("exit status: 3") && reason.contains("after 2 attempts"), "{reason}");
    assert!(reason.contains("no capacity in zone-a"), "the script's output: {reason}");

    // Now the script succeeds but no agent ever registers: given up after launch_timeout_s,
    // and deleted.
    std::fs::remove_file(&fail).unwrap();
    let shown = wait_status(&cluster, "a silent node given up", |s| counter(s, "given_up") >= 1);
    assert!(counter(&shown, "launched") >= 1, "{shown}");
    wait_for("the given-up node deleted", WAIT, || {
        let made = calls(&calls_path);
        made.iter()
            .any(|c| c.starts_with("delete cpu cpu-"))
            .then_some(())
            .ok_or(format!("{made:?}"))
    });
    // The task still waits, and /metrics counts what happened.
    assert_eq!(cluster.json(&["get", &task])["state"], "PENDING");
    let token = std::fs::read_to_string(cluster.file("token")).unwrap();
    berth_head::tls::install_crypto_provider();
    let metrics = reqwest::blocking::Client::new()
        .get(format!("http://{address}/metrics"))
        .bearer_auth(token.trim())
        .send()
        .and_then(|r| r.text())
        .expect("/metrics answers");
    for line in [
        r#"berth_autoscaler_events_total{event="failed"} 1"#,
        r#"berth_autoscaler_events_total{event="given_up"}"#,
        r#"berth_autoscaler_nodes{state="launching"}"#,
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
}

#[test]
fn a_head_restarted_mid_launch_does_not_launch_again() {
    let cluster = Cluster::new();
    let calls_path = cluster.data_dir().parent().unwrap().join("calls");
    let never = cluster.data_dir().parent().unwrap().join("never");
    let program = script(&cluster, &calls_path, &never);
    let types = write(
        &cluster,
        "types.yaml",
        &format!(
            "provider: {{type: command, command: [{}]}}\nlaunch_timeout_s: 600\n\
             node_types:\n  cpu: {{resources: {{CPU: 2}}}}\n",
            program.display()
        ),
    );
    let (mut head, _) = cluster.head(&["--autoscaler", types.to_str().unwrap()]);
    let actor = cluster.sleeper(&["--resources", "CPU=1"]);
    let made = wait_for("the script is called", WAIT, || {
        let made = calls(&calls_path);
        (!made.is_empty()).then_some(made.clone()).ok_or(format!("{made:?}"))
    });
    let node_id = made[0].split_whitespace().nth(2).unwrap().to_string();
    wait_status(&cluster, "the launch is recorded", |s| counter(s, "launched") == 1);
    // A crash, not a clean stop: the record is all the new head has.
    head.kill();
    let (_head, address) = cluster.head(&["--autoscaler", types.to_str().unwrap()]);
    // A round ran on the new head (it made a plan) and counted the launching node.
    let shown = wait_status(&cluster, "a plan on the restarted head", |s| {
        s["last_plan"]["items"][0]["verdict"] == "fits"
    });
    assert_eq!(shown["last_plan"]["items"][0]["target"], node_id.as_str(), "{shown}");
    assert_eq!(shown["nodes"][0]["state"], "launching", "{shown}");
    assert_eq!(calls(&calls_path).len(), 1, "no second launch");

    // The machine comes up: its agent registers with the launched ID, and the actor runs.
    let mut agent = cluster.spawn(
        "agent",
        &[
            "start",
            "--address",
            &address,
            "--node-id",
            &node_id,
            "--num-cpus",
            "2",
            "--num-gpus",
            "0",
        ],
    );
    let placed = cluster.wait_object(&actor, "is ALIVE", |a| a["state"] == "ALIVE");
    assert_eq!(placed["node_id"], node_id.as_str(), "{placed}");
    wait_status(&cluster, "the node is registered", |s| counter(s, "registered") == 1);
    agent.signal(nix::sys::signal::Signal::SIGTERM);
    agent.wait_exit(WAIT);
}

#[test]
fn a_bad_autoscaler_file_is_refused_with_its_field_and_rule() {
    let cluster = Cluster::new();
    let types = write(
        &cluster,
        "types.yaml",
        "node_types:\n  cpu:\n    resources: {CPU: 2}\n    min_nodes: 3\n    max_nodes: 1\n",
    );
    let run =
        cluster.run(&["start", "--head", "--port", "0", "--autoscaler", types.to_str().unwrap()]);
    let err = run.fails(2);
    assert!(err.contains("node_types.cpu.min_nodes: 3 is more than max_nodes (1)"), "{err}");
    // Offline planning reads the same file.
    let good = write(&cluster, "good.yaml", LOCAL_TYPES);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let plan = cluster.json(&[
        "autoscaler",
        "plan",
        "--autoscaler",
        good.to_str().unwrap(),
        "--cluster",
        examples.join("cluster.yaml").to_str().unwrap(),
        "--request",
        examples.join("pg-strict-spread.yaml").to_str().unwrap(),
    ]);
    assert_eq!(plan["items"][0]["verdict"], "unservable", "{plan}");
}
