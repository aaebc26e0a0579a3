//! `berth token` against a real head, as an admin would use it: make a read-only token, list
//! it, see it refused for a change and accepted for a read, revoke it, see it refused.

mod common;
use common::cluster::Cluster;

#[test]
fn a_read_token_reads_cannot_change_and_is_gone_once_revoked() {
    let cluster = Cluster::new();
    let (_head, _address) = cluster.head(&[]);

    let made = cluster.ok(&["token", "create", "--role", "read", "--name", "grafana"]);
    let mut lines = made.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.contains("(read token) created"), "{made}");
    let id = header.split_whitespace().next().unwrap().to_string();
    let secret = lines.next().expect("the secret on its own line").trim().to_string();
    assert_eq!(secret.len(), 64, "{made}");

    let list = cluster.ok(&["token", "list"]);
    assert!(list.contains(&id) && list.contains("grafana") && list.contains("read"), "{list}");
    assert!(!list.contains(&secret), "the list never shows a secret:\n{list}");

    let env = [("BERTH_TOKEN", secret.as_str())];
    let status = cluster.run_env(&["status"], &env);
    assert_eq!(status.code, Some(0), "a read token reads: {status}");
    let create =
        cluster.run_env(&["actor", "create", "--command", "sleep", "--resources", "CPU=1"], &env);
    let err = create.fails(1);
    assert!(err.contains("403") && err.contains("read-only token cannot POST"), "{err}");
    let err = cluster.run_env(&["token", "list"], &env).fails(1);
    assert!(err.contains("403"), "{err}");

    let revoked = cluster.ok(&["token", "revoke", &id]);
    assert!(revoked.contains("revoked"), "{revoked}");
    let err = cluster.run_env(&["status"], &env).fails(1);
    assert!(err.contains("401") || err.contains("refused the token"), "{err}");
    let err = cluster.run(&["token", "revoke", "admin"]).fails(1);
    assert!(err.contains("409") && err.contains("delete DATA_DIR/token"), "{err}");
}
