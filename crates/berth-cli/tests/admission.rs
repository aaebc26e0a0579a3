//! A head under a common 1,024 open-file limit, held by 2,000 connections that never send a
//! byte: it says at start that it serves fewer connections than asked, and goes on serving
//! `berth status` and creations, the idle connections making room for them.

mod common;
use std::net::TcpStream;

use common::cluster::{wait_for, Cluster, WAIT};

/// Raises this process's own open-file limit, to hold the connections it opens.
fn raise_own_limit(wanted: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(hard >= wanted, "this test needs an open-file hard limit of {wanted}, not {hard}");
    if soft < wanted {
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).unwrap();
    }
}

#[test]
fn two_thousand_idle_connections_under_a_1024_file_limit_leave_the_head_serving() {
    raise_own_limit(2_300);
    let cluster = Cluster::new();
    let mut head =
        cluster.spawn_with_open_files("head", &["start", "--head", "--port", "0"], 1_024);
    let address = cluster.wait_head(&mut head);
    let log = head.log();
    assert!(log.contains("the open-file limit is too low for --max-connections"), "{log}");

    let idle: Vec<TcpStream> =
        (0..2_000).map(|_| TcpStream::connect(&address).expect("a connection")).collect();
    // The kernel completes the 2,000 handshakes before the head has accepted them all: while
    // it works through that backlog (evicting idle connections to make room), a client may be
    // refused, as at any moment every admission slot is taken. Once it has, the idle
    // connections it holds must never keep a client out.
    wait_for("the head took in the burst of idle connections", WAIT, || {
        let run = cluster.run(&["status"]);
        (run.code == Some(0)).then_some(()).ok_or(run.to_string())
    });
    for round in 0..3 {
        let status = cluster.ok(&["status"]);
        assert!(status.contains("Nodes:"), "round {round}: {status}");
        let created = cluster.ok(&[
            "task",
            "submit",
            "--command",
            "true",
            "--resources",
            "CPU=1",
            "--output",
            "json",
        ]);
        assert!(created.contains("\"task_id\""), "round {round}: {created}");
    }
    head.assert_running();
    drop(idle);
}
