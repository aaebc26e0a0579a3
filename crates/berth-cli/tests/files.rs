//! What a head and an agent leave on disk is their owner's alone: the data directories are
//! 0700, and the store (every work's environment, secrets included), the tokens, the logs, the
//! agent's state and the work's logs are 0600. The admin token is never printed: stdout often
//! ends up in a service's log.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod common;
use common::cluster::{wait_for, Cluster, WAIT};

fn mode(path: &Path) -> u32 {
    let metadata =
        std::fs::metadata(path).unwrap_or_else(|e| panic!("{} is missing: {e}", path.display()));
    metadata.permissions().mode() & 0o777
}

/// Every file and directory below `root`, with its mode, where any group or other bit is set.
fn readable_by_others(root: &Path) -> Vec<String> {
    let mut open = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(metadata) = std::fs::symlink_metadata(&path) else { continue };
        if metadata.file_type().is_symlink() {
            continue;
        }
        // The work's own directories are the work's business (it runs as the same user).
        if path.components().any(|c| c.as_os_str() == "work") {
            continue;
        }
        if metadata.permissions().mode() & 0o077 != 0 {
            open.push(format!("{} {:o}", path.display(), metadata.permissions().mode() & 0o777));
        }
        if metadata.is_dir() {
            stack
                .extend(std::fs::read_dir(&path).into_iter().flatten().flatten().map(|e| e.path()));
        }
    }
    open
}

#[test]
fn no_secret_file_is_readable_by_other_users() {
    let cluster = Cluster::new();
    let (mut head, address) = cluster.head(&[]);
    let token = std::fs::read_to_string(cluster.file("agent-token")).unwrap();
    let mut agent = cluster.agent_of(&address, "n1", token.trim());
    cluster.wait_node("n1", "ALIVE");
    let actor = cluster.sleeper(&["--env", "SECRET=hunter2", "--resources", "CPU=1"]);
    cluster.wait_object(&actor, "is ALIVE", |a| a["state"] == "ALIVE");
    let logs = cluster.data_dir().join("agents/n1/logs");
    wait_for("the actor's logs exist", WAIT, || {
        let out = logs.join(format!("{actor}.out"));
        out.exists().then_some(()).ok_or_else(|| format!("no {}", out.display()))
    });

    let data = cluster.data_dir();
    assert_eq!(mode(data), 0o700);
    for file in ["berth.redb", "token", "agent-token", "berth.log", "store-mark.json"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    let agent_dir = data.join("agents/n1");
    for file in ["state.json", "state.journal", "berth.log"] {
        assert_eq!(mode(&agent_dir.join(file)), 0o600, "agents/n1/{file}");
    }
    assert_eq!(mode(&logs.join(format!("{actor}.err"))), 0o600);
    assert_eq!(readable_by_others(data), Vec::<String>::new());

    agent.kill();
    head.kill();
    let admin = std::fs::read_to_string(cluster.file("token")).unwrap();
    let printed = head.log();
    assert!(!printed.contains(admin.trim()), "the admin token was printed:\n{printed}");
    assert!(printed.contains("admin token: in "), "{printed}");
}
