//! The autoscaler task: every round it asks the owner for a plan (`owner/autoscale.rs`) and has
//! the provider create and delete the machines, reporting each answer back. The planning is
//! `berth-autoscaler`'s; this is only the I/O around it.
//!
//! - `autoscaler/local.rs`: the `local` provider (agents as processes on the head's machine).
//! - `autoscaler/command.rs`: the `command` provider (a user's executable).

mod command;
mod local;

use std::sync::Arc;
use std::time::Duration;

use berth_api::spec::node_types::{NodeType, ProviderSettings};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::command::AutoscaleOutcome;
use crate::command::Command;

/// The most of a provider's output kept per node.
const MAX_OUTPUT: usize = 2048;

/// Why a provider could not create or delete a machine.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: String,
    pub(crate) output: String,
}

/// Where new machines join: what every provider hands its agents.
#[derive(Clone, Debug)]
pub(crate) struct Join {
    /// The head's URL.
    pub(crate) url: String,
    /// The agent token.
    pub(crate) agent_token: String,
    /// The head's data directory.
    pub(crate) data_dir: std::path::PathBuf,
}

/// Creates and deletes machines.
pub(crate) trait Provider: Send + Sync + 'static {
    /// Creates a machine of `node_type` whose agent registers as `node_id`; the output is
    /// recorded. Returning means the request was made, not that the node registered.
    fn create<'a>(
        &'a self,
        node_id: &'a str,
        node_type: &'a NodeType,
    ) -> BoxFuture<'a, Result<String, Failure>>;
    /// Deletes the machine of `node_id`.
    fn delete<'a>(
        &'a self,
        node_id: &'a str,
        node_type: &'a str,
    ) -> BoxFuture<'a, Result<String, Failure>>;
    /// The head is stopping.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// The provider the settings name.
pub(crate) fn provider(
    settings: &ProviderSettings,
    program: &std::path::Path,
    join: Join,
) -> Arc<dyn Provider> {
    match settings {
        ProviderSettings::Local => Arc::new(local::Local::new(program.to_path_buf(), join)),
        ProviderSettings::Command { argv, timeout, retries } => {
            Arc::new(command::CommandProvider::new(argv.clone(), *timeout, *retries, join))
        }
    }
}

/// Runs rounds every `interval` until `stop`.
pub(crate) async fn run(
    commands: mpsc::Sender<Command>,
    provider: Arc<dyn Provider>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut running = JoinSet::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        while running.try_join_next().is_some() {}
        let (reply, answer) = oneshot::channel();
        if commands.send(Command::Autoscale { reply }).await.is_err() {
            break;
        }
        // Dropped unanswered when the head stops.
        let Ok(actions) = answer.await else { break };
        for (node_id, node_type) in actions.create {
            let (provider, commands) = (provider.clone(), commands.clone());
            running.spawn(async move {
                let outcome = match provider.create(&node_id, &node_type).await {
                    Ok(output) => AutoscaleOutcome::Created { node_id, output },
                    Err(f) => {
                        AutoscaleOutcome::CreateFailed { node_id, error: f.error, output: f.output }
                    }
                };
                let _ = commands.send(Command::AutoscaleOutcome(outcome)).await;
            });
        }
        for (node_id, node_type) in actions.delete {
            let (provider, commands) = (provider.clone(), commands.clone());
            running.spawn(async move {
                let outcome = match provider.delete(&node_id, &node_type).await {
                    Ok(output) => AutoscaleOutcome::Deleted { node_id, output },
                    Err(f) => AutoscaleOutcome::DeleteFailed {
                        node_id,
                        error: format!("{} {}", f.error, f.output.trim()).trim().to_string(),
                    },
                };
                let _ = commands.send(Command::AutoscaleOutcome(outcome)).await;
            });
        }
    }
    running.abort_all();
    provider.shutdown().await;
}

/// The last [`MAX_OUTPUT`] bytes of `bytes`, as text.
fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(MAX_OUTPUT);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.into_owned()
}

/// A node type's resources as `--resources` JSON and its labels, taints and facts as `k=v,…`.
fn described(node_type: &NodeType) -> (String, String, String, String) {
    let resources: serde_json::Map<String, serde_json::Value> = node_type
        .resources
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.to_string())))
        .collect();
    let labels = node_type.labels.to_string();
    let taints =
        node_type.taints.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let f = &node_type.facts;
    let facts = [
        ("accelerator-type", &f.accelerator_type),
        ("market-type", &f.market_type),
        ("node-group", &f.node_group),
        ("availability-zone", &f.availability_zone),
        ("region", &f.availability_region),
    ]
    .iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
    .collect::<Vec<_>>()
    .join(",");
    (serde_json::Value::Object(resources).to_string(), labels, taints, facts)
}
