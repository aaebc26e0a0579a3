//! A head with a standby, as a user runs them: two `berth start --head --store redis://…`
//! processes with their own data directories and tokens, an agent given both
//! addresses, the CLI given both. The active head is killed (-9); the standby takes over, the
//! agent follows without restarting its process, and the CLI finds the new head.

use std::time::Instant;

use berth_store::testutil::RedisServer;

mod common;
use common::cluster::{free_port, healthy, wait_for, Cluster, WAIT};

#[test]
fn the_standby_takes_over_and_the_agent_and_cli_follow() {
    let redis = RedisServer::start_durable().expect("redis-server (scripts/test installs it)");
    let store = redis.url();
    let (a, b) = (Cluster::new(), Cluster::new());
    let (mut active, address_a) = a.head(&["--store", &store, "--lease-ttl", "1"]);
    // The standby has tokens of its own; it learns the active head's from the store.
    let port_b = free_port().to_string();
    let mut standby = b.spawn(
        "standby",
        &["start", "--head", "--port", &port_b, "--store", &store, "--lease-ttl", "1"],
    );
    let address_b = format!("127.0.0.1:{port_b}");
    // It serves /healthz while it stands by, and says so.
    wait_for("the standby answers", WAIT, || {
        standby.assert_running();
        healthy(&address_b)
    });
    let both = format!("{address_a},{address_b}");
    let refused = b.run(&["status", "--address", &address_b]);
    assert!(refused.fails(1).contains("standby"), "a standby names itself");

    let agent_token = std::fs::read_to_string(a.file("agent-token")).unwrap();
    let mut agent = a.agent_of(&both, "n1", agent_token.trim());
    a.wait_node("n1", "ALIVE");
    let actor = a.sleeper(&["--resources", "CPU=1"]);
    let before = a.wait_object(&actor, "is ALIVE", |v| v["state"] == "ALIVE");

    let killed = Instant::now();
    active.kill();
    // The CLI, given both addresses, reaches whichever head is active.
    let status = wait_for("the standby serves as the active head", WAIT, || {
        let run = a.run(&["status", "--address", &both]);
        match run.code {
            Some(0) if run.stdout.contains(&format!("Berth cluster at {address_b}")) => {
                Ok(run.stdout)
            }
            _ => Err(run.to_string()),
        }
    });
    let takeover = killed.elapsed();
    assert!(status.contains("Actors: 1 alive") || status.contains("ALIVE"), "{status}");
    wait_for("the agent registered with the new head", WAIT, || {
        let node = a.json(&["get", "node", "n1", "--address", &both]);
        (node["state"] == "ALIVE" && node["actors"] == 1).then_some(()).ok_or(node.to_string())
    });
    let after = a.json(&["get", &actor, "--address", &both]);
    assert_eq!(after["state"], "ALIVE", "{after}");
    assert_eq!(after["restarts"], 0, "{after}");
    assert_eq!(after["node_id"], before["node_id"]);
    println!("the CLI reached the new head {takeover:?} after the active one was killed");
    agent.signal(nix::sys::signal::Signal::SIGTERM);
    agent.wait_exit(WAIT);
    standby.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(standby.wait_exit(WAIT).success(), "{}", standby.log());
}
