//! The `berth` binary end to end against real heads, as a user runs it: `berth up`, a head
//! and agents as separate processes, the client commands and their exit statuses, a node
//! dying, a taint removed, and a head killed and started again on its data directory.
//!
//! Each test has its own temporary data directory (passed as `--data-dir` and
//! `$BERTH_DATA_DIR`), binds port 0 and finds the head through the `head-address` file it
//! writes. Every wait is a bounded poll (see `common::cluster`); every process a test starts
//! is ended when the test ends, passing or not.

use serde_json::Value;

mod common;
use common::cluster::{closed_port, created_id, wait_for, Cluster, WAIT};

/// The IDs of `nodes`.
fn ids(nodes: &[Value]) -> Vec<String> {
    nodes.iter().map(|n| n["node_id"].as_str().expect("a node ID").to_string()).collect()
}

/// The taints of a node's JSON as `key=value` strings.
fn taints(node: &Value) -> Vec<String> {
    node["taints"]
        .as_array()
        .expect("taints is a list")
        .iter()
        .map(|t| {
            format!("{}={}", t["key"].as_str().unwrap_or(""), t["value"].as_str().unwrap_or(""))
        })
        .collect()
}

/// The events of an object's history, in order.
fn events(object: &Value) -> Vec<String> {
    object["history"]
        .as_array()
        .expect("history is a list")
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// `berth up` with four local nodes, the everyday commands against it, and `berth stop`.
#[test]
fn up_then_every_day_commands_then_stop() {
    let cluster = Cluster::new();
    let mut up = cluster.spawn("up", &["up", "--nodes", "4", "--port", "0"]);
    let address = cluster.wait_head(&mut up);

    // The head serves before its local nodes have registered: wait for all four.
    let status = wait_for("berth status shows 4 alive nodes", WAIT, || {
        let run = cluster.run(&["status"]);
        match run.code {
            Some(0) if run.stdout.contains("Nodes: 4 alive, 0 draining, 0 dead") => Ok(run.stdout),
            _ => Err(run.to_string()),
        }
    });
    assert!(status.starts_with(&format!("Berth cluster at {address}\n")), "{status}");
    assert!(status.contains("Actors: none"), "{status}");

    // One line per node under the header, all alive.
    let table = cluster.ok(&["list", "nodes"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    assert!(lines[0].starts_with("NODE") && lines[0].contains("STATE"), "{table}");
    assert!(lines[1..].iter().all(|l| l.contains(" ALIVE ")), "{table}");

    // The JSON form parses, with the same four nodes.
    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 4, "{nodes:?}");
    assert!(nodes.iter().all(|n| n["state"] == "ALIVE"), "{nodes:?}");
    let node_ids = ids(&nodes);
    for (id, line) in node_ids.iter().zip(&lines[1..]) {
        assert!(line.starts_with(id.as_str()), "{id} in {table}");
    }

    // An actor: created, then ALIVE in the list.
    let created = cluster.ok(&[
        "actor",
        "create",
        "--command",
        "sleep",
        "--arg",
        "600",
        "--resources",
        "CPU=1",
        "--labels",
        "app=web",
    ]);
    let actor = created_id(&created, "actor-");
    let listed = wait_for(&format!("{actor} listed ALIVE"), WAIT, || {
        let text = cluster.ok(&["list", "actors", "--state", "ALIVE"]);
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(actor.as_str()));
        line.map(str::to_string).ok_or(text)
    });
    assert!(listed.contains("app=web") && listed.contains("CPU 1"), "{listed}");
    let json = cluster.json(&["get", &actor]);
    let node = json["node_id"].as_str().expect("placed on a node").to_string();
    assert!(node_ids.contains(&node), "{json}");
    assert!(listed.contains(&node), "{listed}");

    // Its detail, with the history.
    let detail = cluster.ok(&["get", &actor]);
    for part in [
        format!("actor:     {actor}"),
        "state:     ALIVE".into(),
        format!("node:      {node}"),
        "labels:    app=web".into(),
        "command:   sleep 600".into(),
        "history:".into(),
    ] {
        assert!(detail.contains(&part), "{part:?} in:\n{detail}");
    }
    let history = detail.split("history:").nth(1).unwrap_or("");
    for event in ["created", "placed", "started"] {
        assert!(history.contains(event), "{event} in:\n{detail}");
    }
    assert_eq!(events(&json), ["created", "placed", "started"], "{json}");

    // Why it is where it is.
    let why = cluster.ok(&["explain", &actor]);
    assert!(why.contains(&format!("{actor} is ALIVE on {node}")), "{why}");

    // A taint, shown by the change and by the node.
    let tainted = &node_ids[0];
    let changed = cluster.ok(&["taint", "--node-id", tainted, "--append", "gpu_node=true"]);
    assert!(changed.contains("gpu_node=true"), "{changed}");
    let shown = cluster.ok(&["get", "node", tainted]);
    let line = shown.lines().find(|l| l.starts_with("taints:")).unwrap_or("");
    assert!(line.contains("gpu_node=true"), "{shown}");
    assert!(taints(&cluster.json(&["get", "node", tainted])).contains(&"gpu_node=true".into()));

    // Killed: DEAD, at once and for good.
    let killed = cluster.ok(&["kill", &actor]);
    assert!(killed.contains(&actor) && killed.contains("DEAD"), "{killed}");
    let dead = cluster.json(&["get", &actor]);
    assert_eq!(dead["state"], "DEAD", "{dead}");
    let status = cluster.ok(&["status"]);
    assert!(status.contains("Actors: 1 DEAD"), "{status}");

    // `berth stop` ends the `up` process. The test is its parent: reap it while `berth stop`
    // waits for it to go (an unreaped zombie would still look alive to `berth stop`).
    let stop = cluster.start(&["stop"]);
    let exit = up.wait_exit(WAIT);
    assert!(exit.success(), "berth up exited {exit}:\n{}", up.log());
    let stopped = stop.finish(WAIT).ok();
    assert!(stopped.contains(&format!("stopped Berth (process {})", up.pid())), "{stopped}");
    assert!(!cluster.file("berth.pid").exists(), "the pid file is removed");
    assert!(!cluster.file("head-address").exists(), "the address file is removed");
    assert!(cluster.file("token").exists(), "the token stays");
    // Nothing left to stop.
    let again = cluster.ok(&["stop"]);
    assert!(again.contains("nothing to stop"), "{again}");
}

/// `berth stop --data-dir` ends what runs from that directory: its head and its agents (each
/// agent writes its pid file in its own directory under `agents/`).
#[test]
fn berth_stop_ends_the_head_and_its_agents() {
    let cluster = Cluster::new();
    let (mut head, address) = cluster.head(&[]);
    let token = std::fs::read_to_string(cluster.file("agent-token")).unwrap();
    let mut agent = cluster.agent_of(&address, "n1", token.trim());
    cluster.wait_node("n1", "ALIVE");
    let pid_file = cluster.data_dir().join("agents/n1/berth.pid");
    wait_for("the agent's pid file", WAIT, || {
        let text = std::fs::read_to_string(&pid_file).map_err(|e| e.to_string())?;
        (text.trim() == agent.pid().to_string()).then_some(()).ok_or(text)
    });
    // The test is the daemons' parent: it reaps them while `berth stop` waits for them to go.
    let stop = cluster.start(&["stop"]);
    let (head_exit, agent_exit) = (head.wait_exit(WAIT), agent.wait_exit(WAIT));
    assert!(head_exit.success() && agent_exit.success(), "{head_exit} {agent_exit}");
    let stopped = stop.finish(WAIT).ok();
    assert!(stopped.contains(&format!("stopped an agent (process {})", agent.pid())), "{stopped}");
    assert!(stopped.contains(&format!("stopped Berth (process {})", head.pid())), "{stopped}");
    assert!(!pid_file.exists(), "the agent removed its pid file");
}

/// The errors a user meets, each with its exit status and a message that says what is wrong.
#[test]
fn errors_exit_statuses_and_messages() {
    let cluster = Cluster::new();
    let (_head, address) = cluster.head(&[]);
    cluster.ok(&["status"]);

    // A wrong token: 1, and the message is about the token.
    let err = cluster.run_env(&["status"], &[("BERTH_TOKEN", "wrong")]).fails(1);
    assert!(err.contains("refused the token") && err.contains("$BERTH_TOKEN"), "{err}");

    // No token at all (another data directory, this head's address): 1, says what to do.
    let stranger = Cluster::new();
    let err = stranger.run(&["status", "--address", &address]).fails(1);
    assert!(err.contains("wants a token and none was sent"), "{err}");

    // Nothing listening: 1, "no head at".
    let closed = closed_port();
    let port = closed.port;
    let err = cluster.run(&["status", "--address", &format!("127.0.0.1:{port}")]).fails(1);
    assert!(err.contains(&format!("no head at 127.0.0.1:{port}")), "{err}");

    // The head refuses 1.5 GPUs (a rule of the cluster's, not of the value) with 400 and the
    // field: 1.
    let err =
        cluster.run(&["actor", "create", "--command", "x", "--resources", "GPU=1.5"]).fails(1);
    assert!(err.contains("400") && err.contains("resources.GPU"), "{err}");

    // An unknown ID: 404, 1.
    let err = cluster.run(&["get", "actor-999"]).fails(1);
    assert!(err.contains("not found") && err.contains("actor-999"), "{err}");

    // Bad flag values caught before anything is sent: 2 (a negative amount breaks the
    // body's own rules, read by the same types as the head's).
    let err = cluster.run(&["actor", "create", "--command", "x", "--resources", "CPU=-1"]).fails(2);
    assert!(err.contains("resources.CPU") && err.contains("negative"), "{err}");
    let err = cluster.run(&["actor", "create", "--command", "x", "--labels", "app"]).fails(2);
    assert!(err.contains("--labels"), "{err}");
    let err = cluster.run(&["actor", "create", "--command", "x", "--max-restarts", "-5"]).fails(2);
    assert!(err.contains("--max-restarts"), "{err}");
    let err = cluster.run(&["actor", "create", "--resources", "CPU=1"]).fails(2);
    assert!(err.contains("--command"), "{err}");
    let err = cluster.run(&["get", "gpu-1"]).fails(2);
    assert!(err.contains("berth get node"), "{err}");

    // None of that created anything.
    let status = cluster.ok(&["status"]);
    assert!(status.contains("Actors: none"), "{status}");
}

/// A head and two agents as processes; an agent dies, its actor waits on a taint, and goes to
/// the other node once the taint is removed.
#[test]
fn agent_dies_actor_waits_on_taint_then_moves() {
    let cluster = Cluster::new();
    let (_head, address) = cluster.head(&["--heartbeat-timeout", "2"]);
    let agent = |id: &str, extra: &[&str]| {
        let mut args = vec!["start", "--address", &address, "--node-id", id, "--num-cpus", "2"];
        args.extend_from_slice(extra);
        cluster.spawn(&format!("agent-{id}"), &args)
    };
    let mut a = agent("a", &["--labels", "zone=a"]);
    let _b = agent("b", &["--taints", "dedicated=ml"]);
    cluster.wait_node("a", "ALIVE");
    let b_node = cluster.wait_node("b", "ALIVE");
    assert_eq!(taints(&b_node), ["dedicated=ml"], "{b_node}");
    let table = cluster.ok(&["list", "nodes"]);
    assert_eq!(table.lines().filter(|l| l.contains(" ALIVE ")).count(), 2, "{table}");

    // No toleration: only `a` can take it.
    let created = cluster.ok(&[
        "actor",
        "create",
        "--command",
        "sleep",
        "--arg",
        "600",
        "--resources",
        "CPU=1",
        "--max-restarts",
        "1",
    ]);
    let actor = created_id(&created, "actor-");
    cluster.wait_object(&actor, "is ALIVE on a", |o| o["state"] == "ALIVE" && o["node_id"] == "a");

    // Agent `a` dies without a word; the head declares it dead after 2 s of silence.
    a.kill();
    let dead = cluster.wait_node("a", "DEAD");
    assert!(dead["dead_reason"].is_string(), "{dead}");
    let status = cluster.ok(&["status"]);
    assert!(status.contains("Nodes: 1 alive, 0 draining, 1 dead"), "{status}");

    // The actor restarts, but `b` is tainted: it waits, and says why.
    let waiting = cluster.wait_object(&actor, "waits to restart", |o| o["state"] == "RESTARTING");
    assert_eq!(waiting["restarts"], 1, "{waiting}");
    let why = wait_for(&format!("explain {actor} names the taint"), WAIT, || {
        let text = cluster.ok(&["explain", &actor]);
        if text.contains("untolerated taint dedicated=ml") {
            Ok(text)
        } else {
            Err(text)
        }
    });
    assert!(why.contains(&format!("{actor} is RESTARTING")), "{why}");
    assert!(why.contains("dead"), "{why}");

    // The taint goes: the actor comes back, on `b`.
    let removed = cluster.ok(&["taint", "--node-id", "b", "--remove", "dedicated=ml"]);
    assert!(removed.contains("taints: none"), "{removed}");
    let moved = cluster
        .wait_object(&actor, "is ALIVE on b", |o| o["state"] == "ALIVE" && o["node_id"] == "b");
    assert_eq!(moved["restarts"], 1, "{moved}");
    let history = events(&moved);
    let died = history.iter().position(|e| e == "node_died").expect("node_died in the history");
    assert!(history[died..].iter().any(|e| e == "started"), "{history:?}");
    let why = cluster.ok(&["explain", &actor]);
    assert!(why.contains(&format!("{actor} is ALIVE on b")), "{why}");
}

/// The head is killed (SIGKILL) and started again on the same data directory: the agent
/// comes back by itself, and the actor, the placement group and the taint are all still there.
#[test]
fn head_restart_keeps_actor_group_and_taint() {
    let cluster = Cluster::new();
    let (mut head, address) = cluster.head(&[]);
    let _agent = cluster
        .spawn("agent-n1", &["start", "--address", &address, "--node-id", "n1", "--num-cpus", "4"]);
    cluster.wait_node("n1", "ALIVE");

    let created = cluster.ok(&[
        "actor",
        "create",
        "--command",
        "sleep",
        "--arg",
        "600",
        "--resources",
        "CPU=1",
    ]);
    let actor = created_id(&created, "actor-");
    let created = cluster.ok(&["pg", "create", "--bundles", r#"[{"CPU":1}]"#]);
    let group = created_id(&created, "pg-");
    cluster.wait_object(&actor, "is ALIVE", |o| o["state"] == "ALIVE" && o["node_id"] == "n1");
    cluster.wait_object(&group, "is CREATED", |o| o["state"] == "CREATED");
    let changed = cluster.ok(&["taint", "--node-id", "n1", "--append", "maintenance=true"]);
    assert!(changed.contains("maintenance=true"), "{changed}");
    let before = cluster.json(&["get", "node", "n1"]);
    let registered = before["registered_at_ms"].as_u64().expect("registered_at_ms");

    // Killed without a chance to clean up.
    head.kill();
    drop(head);

    // Started again on the same data directory. The agent retries the address it was given,
    // so the new head takes the same port (retried while the old one is being released).
    let port = address.rsplit(':').next().expect("HOST:PORT");
    let (head, again) = wait_for("the head starts again on its port", WAIT, || {
        let mut head = cluster.spawn("head-again", &["start", "--head", "--port", port]);
        let up = wait_for("the new head serves or exits", WAIT, || {
            if head.exited().is_some() {
                return Ok(false);
            }
            match std::fs::read_to_string(cluster.file("berth.pid")) {
                Ok(pid) if pid.trim() == head.pid().to_string() => Ok(true),
                _ => Err(head.log()),
            }
        });
        if up {
            let address = cluster.wait_head(&mut head);
            Ok((head, address))
        } else {
            Err(head.log())
        }
    });
    // The CLI finds it through the address file it wrote again.
    assert_eq!(again, address);
    assert_eq!(std::fs::read_to_string(cluster.file("head-address")).unwrap().trim(), address);
    assert!(
        head.log().contains("reloaded: 1 nodes, 1 actors, 0 tasks, 1 placement groups"),
        "{}",
        head.log()
    );

    // The agent registers again by itself.
    wait_for("the agent registers with the new head", WAIT, || {
        let node = cluster.json(&["get", "node", "n1"]);
        match node["registered_at_ms"].as_u64() {
            Some(at) if at > registered && node["state"] == "ALIVE" => Ok(()),
            _ => Err(node.to_string()),
        }
    });

    // Everything is as it was.
    let json = cluster.json(&["get", &actor]);
    assert_eq!(
        (&json["state"], &json["node_id"], &json["restarts"]),
        (&"ALIVE".into(), &"n1".into(), &0.into()),
        "{json}"
    );
    let detail = cluster.ok(&["get", &actor]);
    assert!(detail.contains("state:     ALIVE") && detail.contains("restarts:  0"), "{detail}");
    let pg = cluster.json(&["get", &group]);
    assert_eq!(pg["state"], "CREATED", "{pg}");
    assert_eq!(pg["bundles"][0]["node_id"], "n1", "{pg}");
    let node = cluster.json(&["get", "node", "n1"]);
    assert_eq!(node["state"], "ALIVE", "{node}");
    assert!(taints(&node).contains(&"maintenance=true".into()), "{node}");
    let status = cluster.ok(&["status"]);
    for part in
        ["Nodes: 1 alive, 0 draining, 0 dead", "Actors: 1 ALIVE", "Placement groups: 1 CREATED"]
    {
        assert!(status.contains(part), "{part:?} in:\n{status}");
    }
}

/// `berth label`, `berth node set-resources` and `--rare-resource-isolation` on `berth up`,
/// with their bad input: exit 2 before anything is sent, 1 with the head's field and rule.
#[test]
fn node_labels_resources_and_rare_isolation_from_the_cli() {
    let cluster = Cluster::new();
    let mut up = cluster
        .spawn("up", &["up", "--nodes", "2", "--port", "0", "--rare-resource-isolation", "my_res"]);
    cluster.wait_head(&mut up);
    wait_for("2 alive nodes", WAIT, || {
        let run = cluster.run(&["status"]);
        match run.code {
            Some(0) if run.stdout.contains("Nodes: 2 alive") => Ok(run.stdout),
            _ => Err(run.to_string()),
        }
    });
    let status = cluster.ok(&["status"]);
    assert!(status.contains("Rare-resource isolation: my_res"), "{status}");
    let node = ids(&cluster.nodes())[0].clone();

    let changed = cluster.ok(&["label", &node, "zone=a", "tier=gold"]);
    assert!(changed.contains("tier=gold") && changed.contains("zone=a"), "{changed}");
    let changed = cluster.ok(&["label", &node, "tier-"]);
    assert!(!changed.contains("tier=") && changed.contains("zone=a"), "{changed}");
    let shown = cluster.json(&["get", "node", &node]);
    assert_eq!(shown["labels"]["zone"], "a", "{shown}");

    let changed = cluster.ok(&["node", "set-resources", &node, "my_res=2"]);
    assert!(changed.contains("my_res 0/2"), "{changed}");
    let shown = cluster.json(&["get", "node", &node]);
    assert!(taints(&shown).contains(&"berth.io/rare-my_res=true".into()), "{shown}");

    // Malformed: 2, nothing sent.
    let err = cluster.run(&["label", &node, "zone"]).fails(2);
    assert!(err.contains("expected key=value (set) or key- (remove)"), "{err}");
    let err = cluster.run(&["node", "set-resources", &node, "GPU"]).fails(2);
    assert!(err.contains("not KEY=VALUE"), "{err}");
    // Refused by the head: 1, with the field and the rule.
    let err = cluster.run(&["label", &node, "bad key!=v"]).fails(1);
    assert!(err.contains("400") && err.contains("bad key!"), "{err}");
    let err = cluster.run(&["node", "set-resources", &node, "GPU=1.5"]).fails(1);
    assert!(err.contains("400") && err.contains("GPU") && err.contains("whole"), "{err}");
    let err = cluster.run(&["node", "set-resources", "ghost", "CPU=1"]).fails(1);
    assert!(err.contains("not found") && err.contains("ghost"), "{err}");
    let other = Cluster::new();
    let err = other.run(&["up", "--port", "0", "--rare-resource-isolation", "bad name!"]).fails(1);
    assert!(err.contains("--rare-resource-isolation"), "{err}");
}

/// `berth list actors --watch` and `berth get ID --watch`: the objects as they are, then each
/// change as a line, as it happens.
#[test]
fn watch_prints_changes_as_they_happen() {
    use std::io::BufRead;
    let cluster = Cluster::new();
    let mut up = cluster.spawn("up", &["up", "--nodes", "1", "--port", "0"]);
    cluster.wait_head(&mut up);
    let node = wait_for("a node", WAIT, || {
        let nodes = cluster.nodes();
        nodes
            .first()
            .map(|n| n["node_id"].as_str().unwrap().to_string())
            .ok_or_else(|| "none yet".to_string())
    });
    // Each watcher's lines arrive on a channel, so reading them is bounded in time.
    let watch = |args: &[&str]| {
        let mut child = cluster
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("berth starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        (child, rx)
    };
    let until = |rx: &std::sync::mpsc::Receiver<String>, what: &dyn Fn(&str) -> bool| -> String {
        loop {
            let line = rx.recv_timeout(WAIT).expect("a line within the wait");
            if what(&line) {
                return line;
            }
        }
    };
    let (mut list, lines) = watch(&["list", "actors", "--watch"]);
    let (mut nodes, node_lines) = watch(&["get", "node", &node, "--watch"]);
    let first = until(&node_lines, &|l| l.contains(&node));
    assert!(first.contains("ADDED") && first.contains("ALIVE"), "{first}");

    let id = cluster.sleeper(&["--resources", "CPU=1"]);
    let alive = until(&lines, &|l| l.contains(&id) && l.contains("ALIVE"));
    assert!(alive.contains("MODIFIED") && alive.contains(&format!("node {node}")), "{alive}");
    // The node's resources changed with it.
    until(&node_lines, &|l| l.contains("MODIFIED") && l.contains(&node));

    // One object, JSON: the head's change events.
    let (mut one, json_lines) = watch(&["get", &id, "--watch", "--output", "json"]);
    let event: Value = serde_json::from_str(&until(&json_lines, &|_| true)).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["object"]["actor_id"].as_str()),
        (Some("ADDED"), Some(id.as_str()))
    );
    for child in [&mut list, &mut nodes, &mut one] {
        let _ = child.kill();
        let _ = child.wait();
    }
    // Filters the stream cannot apply: 2.
    let err = cluster.run(&["list", "actors", "--watch", "--namespace", "x"]).fails(2);
    assert!(err.contains("--namespace"), "{err}");
}
