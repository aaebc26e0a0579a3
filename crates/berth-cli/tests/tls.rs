//! A head serving TLS (`--tls-cert`, `--tls-key`), used as an operator would: the CLI reaches it
//! at `https://` with `--ca`, an agent joins it over TLS, and whatever cannot prove the
//! head's identity (no CA, another CA) or speaks plain HTTP is refused.

mod common;
use common::cluster::{wait_for, Cluster, WAIT};
use common::path;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A CA's certificate (PEM) and, when `leaf` names hosts, a certificate for them signed by
/// that CA, with its key.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki() -> Pki {
    pki_for(&["localhost", "127.0.0.1"])
}

/// A CA, and a head certificate it signed for `names`.
fn pki_for(names: &[&str]) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    Pki { ca: ca.pem(), cert: leaf.pem(), key: leaf_key.serialize_pem() }
}

/// `berth start --head` serving TLS with `cert` and `key`, and its `https://` URL once it wrote
/// it to its address file (which is how the CLI on this machine knows to speak TLS).
fn tls_head(
    cluster: &Cluster,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> (common::cluster::Daemon, String) {
    let mut head = cluster.spawn(
        "head",
        &["start", "--head", "--port", "0", "--tls-cert", path(cert), "--tls-key", path(key)],
    );
    let url = wait_for("the head writes its https:// address", WAIT, || {
        head.assert_running();
        let text = std::fs::read_to_string(cluster.file("head-address")).unwrap_or_default();
        text.starts_with("https://").then(|| text.trim().to_string()).ok_or(text)
    });
    (head, url)
}

/// An agent for node `node` joining the head at `url` over TLS, trusting `ca`.
fn tls_agent(
    cluster: &Cluster,
    url: &str,
    ca: &std::path::Path,
    node: &str,
    extra: &[&str],
) -> common::cluster::Daemon {
    let mut args = vec!["start", "--address", url, "--ca", path(ca), "--node-id", node];
    args.extend_from_slice(extra);
    cluster.spawn(&format!("agent-{node}"), &args)
}

#[test]
fn a_tls_head_serves_the_cli_and_agents_and_refuses_what_cannot_verify_it() {
    let cluster = Cluster::new();
    let dir = cluster.data_dir().parent().unwrap().to_path_buf();
    let ours = pki();
    let theirs = pki();
    let write = |name: &str, text: &str| {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        file
    };
    let (ca, cert, key) =
        (write("ca.pem", &ours.ca), write("head.pem", &ours.cert), write("head.key", &ours.key));
    let other_ca = write("other-ca.pem", &theirs.ca);

    // A key that is not the certificate's is refused at start, naming the file.
    let wrong_key = write("wrong.key", &theirs.key);
    let run = cluster.run(&[
        "start",
        "--head",
        "--port",
        "0",
        "--tls-cert",
        path(&cert),
        "--tls-key",
        path(&wrong_key),
    ]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("wrong.key") && run.stderr.contains("TLS"), "{run}");

    let (mut head, url) = tls_head(&cluster, &cert, &key);
    let plain = url.trim_start_matches("https://").to_string();
    let env = [("BERTH_CA", path(&ca))];
    let status = cluster.run_env(&["status"], &env).ok();
    assert!(status.contains("nodes"), "{status}");

    // No CA: told what to give, before any connection.
    let err = cluster.run(&["status"]).fails(2);
    assert!(err.contains("https://") && err.contains("--ca"), "{err}");
    // Another CA: the head's certificate does not verify.
    let err = cluster.run(&["status", "--ca", path(&other_ca)]).fails(1);
    assert!(err.contains("could not prove it is the head") && err.contains("certificate"), "{err}");
    // Plain HTTP to the TLS port gets no answer.
    let err = cluster.run(&["status", "--address", &plain]).fails(1);
    assert!(err.contains("not HTTP") && err.contains(&format!("https://{plain}")), "{err}");

    // An agent joins over TLS with the CA, and its node goes ALIVE.
    let _agent =
        tls_agent(&cluster, &url, &ca, "tls-node", &["--num-cpus", "2", "--memory", "1Gi"]);
    wait_for("the agent's node is ALIVE over TLS", WAIT, || {
        let run = cluster.run_env(&["get", "node", "tls-node", "--output", "json"], &env);
        if run.code != Some(0) {
            return Err(run.to_string());
        }
        let node = run.json();
        if node["state"] == "ALIVE" {
            Ok(())
        } else {
            Err(node.to_string())
        }
    });
    // Work runs there, and its output streams back through the head over TLS.
    let submitted = cluster
        .run_env(
            &[
                "task",
                "submit",
                "--command",
                "echo",
                "--arg",
                "hello-over-tls",
                "--resources",
                "CPU=1",
            ],
            &env,
        )
        .ok();
    let task = common::cluster::created_id(&submitted, "task-");
    let followed = wait_for(&format!("berth logs {task} --follow"), WAIT, || {
        let run = cluster.run_env(&["logs", &task, "--follow"], &env);
        match run.code {
            Some(0) => Ok(run.stdout),
            _ => Err(run.to_string()),
        }
    });
    assert!(followed.lines().any(|l| l == "hello-over-tls"), "{followed}");

    // An agent without the CA for an https:// head is refused before it connects.
    let run = cluster.run(&["start", "--address", &url, "--node-id", "no-ca"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("ca") && run.stderr.contains("https://"), "{run}");
    head.assert_running();
}

/// Two ways a certificate that verifies against its CA is still not the head's: the head's
/// certificate names another host (the CLI and an agent refuse it), and an agent trusts another
/// CA (it never registers, and says why).
#[test]
fn a_certificate_for_another_host_or_from_another_ca_is_refused() {
    let cluster = Cluster::new();
    let dir = cluster.data_dir().parent().unwrap().to_path_buf();
    let write = |name: &str, text: &str| {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        file
    };
    // Signed by our CA, for a name that is not the address the clients use (127.0.0.1).
    let elsewhere = pki_for(&["head.elsewhere.example"]);
    let (ca, cert, key) = (
        write("ca.pem", &elsewhere.ca),
        write("head.pem", &elsewhere.cert),
        write("head.key", &elsewhere.key),
    );
    let (mut head, url) = tls_head(&cluster, &cert, &key);
    let err = cluster.run(&["status", "--address", &url, "--ca", path(&ca)]).fails(1);
    assert!(err.contains("could not prove it is the head") && err.contains("certificate"), "{err}");
    assert!(err.contains("NotValidForName") || err.contains("not valid for"), "{err}");

    let agent_token = std::fs::read_to_string(cluster.file("agent-token")).unwrap();
    let token = ["--token", agent_token.trim()];
    let mut wrong_name = tls_agent(&cluster, &url, &ca, "wrong-name", &token);
    let other = pki();
    let other_ca = write("other-ca.pem", &other.ca);
    let mut wrong_ca = tls_agent(&cluster, &url, &other_ca, "wrong-ca", &token);
    let refusals = [
        (&mut wrong_name, "certificate not valid for name \"127.0.0.1\""),
        // Both CAs have the same (empty) name: the chain is found, its signature is not ours.
        (&mut wrong_ca, "invalid peer certificate: BadSignature"),
    ];
    for (agent, why) in refusals {
        let log = wait_for("the agent says why it cannot register", WAIT, || {
            let log = agent.log();
            log.contains(why).then_some(log.clone()).ok_or(log)
        });
        assert!(log.contains("Register failed"), "{log}");
    }
    // Neither ever registered: the head knows no node.
    let env = [("BERTH_CA", path(&ca))];
    let nodes = cluster.run_env(&["list", "nodes", "--address", &url, "--output", "json"], &env);
    assert_ne!(nodes.code, Some(0), "the CLI refuses this head's name too: {nodes}");
    assert!(!head.log().contains("registered"), "{}", head.log());
    head.assert_running();
}
