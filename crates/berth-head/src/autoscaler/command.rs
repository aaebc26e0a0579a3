//! The `command` provider: a user's executable creates and deletes machines, run as
//! `PROGRAM ARGS… create|delete TYPE NODE_ID` with the node's description in its environment:
//!
//! | variable | value |
//! | --- | --- |
//! | `BERTH_ADDRESS` | the head's URL, for `berth start --address` |
//! | `BERTH_AGENT_TOKEN` | the agent token, for `berth start --token` |
//! | `BERTH_NODE_ID`, `BERTH_NODE_TYPE` | the node's ID (`--node-id`) and type |
//! | `BERTH_NODE_RESOURCES` | its resources as JSON (`--resources`) |
//! | `BERTH_NODE_LABELS`, `BERTH_NODE_TAINTS`, `BERTH_NODE_FACTS` | `k=v,…` (`--labels`, `--taints`, `--facts`) |
//!
//! Exit status 0 is success. A run that fails or outlasts the timeout (it is killed) is retried
//! after 1 s, 2 s, …; the last output is recorded either way.

use std::process::Stdio;
use std::time::Duration;

use berth_api::local::AGENT_TOKEN_ENV;
use berth_api::spec::node_types::NodeType;
use futures::future::BoxFuture;
use tokio::process::Command;

use super::{described, tail, Failure, Join, Provider};

pub(crate) struct CommandProvider {
    argv: Vec<String>,
    timeout: Duration,
    retries: u32,
    join: Join,
}

impl CommandProvider {
    pub(crate) fn new(
        argv: Vec<String>,
        timeout: Duration,
        retries: u32,
        join: Join,
    ) -> CommandProvider {
        CommandProvider { argv, timeout, retries, join }
    }

    async fn run(
        &self,
        action: &str,
        node_id: &str,
        type_name: &str,
        node_type: Option<&NodeType>,
    ) -> Result<String, Failure> {
        let mut last = Failure { error: String::new(), output: String::new() };
        for attempt in 0..=self.retries {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
            }
            match self.once(action, node_id, type_name, node_type).await {
                Ok(output) => return Ok(output),
                Err(failure) => {
                    tracing::warn!(action, node = node_id, attempt, error = %failure.error, "autoscaler command failed");
                    last = failure;
                }
            }
        }
        last.error = format!("{} (after {} attempts)", last.error, self.retries + 1);
        Err(last)
    }

    async fn once(
        &self,
        action: &str,
        node_id: &str,
        type_name: &str,
        node_type: Option<&NodeType>,
    ) -> Result<String, Failure> {
        let mut command = Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .args([action, type_name, node_id])
            .env("BERTH_ADDRESS", &self.join.url)
            .env(AGENT_TOKEN_ENV, &self.join.agent_token)
            .env("BERTH_NODE_ID", node_id)
            .env("BERTH_NODE_TYPE", type_name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A run past the timeout is dropped, and with it killed.
            .kill_on_drop(true);
        if let Some(node_type) = node_type {
            let (resources, labels, taints, facts) = described(node_type);
            command
                .env("BERTH_NODE_RESOURCES", resources)
                .env("BERTH_NODE_LABELS", labels)
                .env("BERTH_NODE_TAINTS", taints)
                .env("BERTH_NODE_FACTS", facts);
        }
        let child = command.spawn().map_err(|e| Failure {
            error: format!("cannot run {}: {e}", self.argv[0]),
            output: String::new(),
        })?;
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Err(Failure { error: e.to_string(), output: String::new() }),
            Err(_) => {
                return Err(Failure {
                    error: format!(
                        "{} {action} took longer than {} s and was killed",
                        self.argv[0],
                        self.timeout.as_secs_f64()
                    ),
                    output: String::new(),
                })
            }
        };
        let mut text = output.stdout;
        text.extend_from_slice(&output.stderr);
        let text = tail(&text);
        if output.status.success() {
            Ok(text)
        } else {
            Err(Failure {
                error: format!("{} {action} {}", self.argv[0], output.status),
                output: text,
            })
        }
    }
}

impl Provider for CommandProvider {
    fn create<'a>(
        &'a self,
        node_id: &'a str,
        node_type: &'a NodeType,
    ) -> BoxFuture<'a, Result<String, Failure>> {
        Box::pin(self.run("create", node_id, &node_type.name, Some(node_type)))
    }

    fn delete<'a>(
        &'a self,
        node_id: &'a str,
        node_type: &'a str,
    ) -> BoxFuture<'a, Result<String, Failure>> {
        Box::pin(self.run("delete", node_id, node_type, None))
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        // The machines it created are the user's: they outlive the head.
        Box::pin(async {})
    }
}
