//! `--watch` of `berth get` and `berth list`: the head's change stream (`GET /api/v1/watch`),
//! one line per change, until Ctrl-C. The stream starts with the objects as they are; after a
//! dropped connection it resumes from the last change printed, and when the head no longer
//! keeps that far back (it restarted, or this client fell behind) it starts over from the
//! objects as they are, saying so on stderr.

use std::io::Write;
use std::time::Duration;

use berth_api::rest::WatchQuery;
use serde_json::Value;

use super::{Client, ClientError, Output};

/// The pause before reconnecting after the stream ended.
const RECONNECT: Duration = Duration::from_secs(1);

/// Prints the changes `query` selects until the head cannot be reached or `out` fails.
pub fn follow(
    client: &Client,
    query: WatchQuery,
    output: Output,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut since = query.since;
    loop {
        let this = WatchQuery { since, ..query.clone() };
        let mut failed: Option<std::io::Error> = None;
        let mut on_event = |event: &str, data: &str| {
            let printed = match event {
                "change" => {
                    let Ok(change) = serde_json::from_str::<Value>(data) else { return true };
                    since = change["version"].as_u64().or(since);
                    let line = match output {
                        Output::Json => data.to_string(),
                        Output::Table => line(&change),
                    };
                    writeln!(out, "{line}").and_then(|()| out.flush())
                }
                "expired" => {
                    eprintln!("berth: fell behind the head's change log; starting over from now");
                    since = None;
                    Ok(())
                }
                _ => Ok(()),
            };
            match printed {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        };
        match client.watch(&this, &mut on_event) {
            Ok(()) => {}
            Err(ClientError::Api { status: 410, .. }) => {
                eprintln!("berth: the head no longer keeps changes that far back; starting over");
                since = None;
                continue;
            }
            Err(err) => return Err(err.into()),
        }
        if let Some(err) = failed {
            // Stdout closed (`| head`): done.
            return if err.kind() == std::io::ErrorKind::BrokenPipe {
                Ok(())
            } else {
                Err(err.into())
            };
        }
        std::thread::sleep(RECONNECT);
    }
}

/// `04:55:01  MODIFIED  actor  actor-3  ALIVE  node n1`.
pub fn line(change: &Value) -> String {
    let object = &change["object"];
    let id = ["actor_id", "task_id", "group_id", "node_id"]
        .iter()
        .find_map(|k| object[k].as_str())
        .unwrap_or("?");
    let mut text = format!(
        "{}  {:<8}  {}  {id}  {}",
        clock(),
        change["type"].as_str().unwrap_or("?"),
        change["kind"].as_str().unwrap_or("?"),
        object["state"].as_str().unwrap_or("?"),
    );
    if change["kind"] != "node" {
        if let Some(node) = object["node_id"].as_str() {
            text.push_str(&format!("  node {node}"));
        }
    }
    text
}

/// The time of day, UTC.
fn clock() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_one_line() {
        let change = serde_json::json!({"version": 5, "type": "MODIFIED", "kind": "actor",
            "object": {"actor_id": "actor-3", "state": "ALIVE", "node_id": "n1"}});
        let text = line(&change);
        assert!(text.ends_with("  MODIFIED  actor  actor-3  ALIVE  node n1"), "{text}");
        let node = serde_json::json!({"version": 6, "type": "ADDED", "kind": "node",
            "object": {"node_id": "n1", "state": "ALIVE"}});
        assert!(line(&node).ends_with("  ADDED     node  n1  ALIVE"), "{}", line(&node));
    }
}
