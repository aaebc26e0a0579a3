//! Simulated agents for tests and benchmarks: many in-process agents speaking the real
//! protocol to a real head, each with an [`AckRunner`] instead of processes by default, or
//! with a [`ProcessRunner`] each ([`RunnerKind::Process`]: `berth up`,
//! a local cluster that runs real processes).
//!
//! A simulated node is an ordinary [`Agent`] task on the current tokio runtime with its own
//! gRPC connection (driven, with its heartbeats, on the agents' lane, as a real agent's is), so
//! the head sees exactly what it would see from real machines: one registration, one heartbeat
//! stream and one assignments stream per node. [`SimCluster::kill`]
//! aborts a node's task (its connection drops mid-stream and heartbeats stop: a dead machine);
//! [`SimCluster::restart`] brings it back under the same ID, still "running" what its runner
//! held, as an agent restart or a healed partition would.
//!
//! With process runners, [`SimCluster::shutdown`] stops the agents and then every process
//! they run (the agents live in this process, so their work ends with it); merely dropping the
//! cluster leaves the processes running, recorded for re-adoption by the next cluster started
//! on the same directory.

use std::collections::BTreeMap;
#[cfg(unix)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use thiserror::Error;
use tokio::sync::watch;

use crate::agent::{Agent, AgentError, AgentHandle, AgentStatus};
use crate::config::AgentConfig;
#[cfg(unix)]
use crate::process::{ProcessError, ProcessOptions, ProcessRunner};
use crate::runner::{AckRunner, Runner};

/// One simulated machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimNode {
    /// The node ID (required: it names the node in [`SimCluster`] calls).
    pub node_id: String,
    /// The IP address the node reports.
    pub address: String,
    /// Resource name to quantity text.
    pub resources: BTreeMap<String, String>,
    /// User labels.
    pub labels: BTreeMap<String, String>,
    /// Taints, key to value.
    pub taints: BTreeMap<String, String>,
    /// Facts (`accelerator-type`, `market-type`, `region`, `availability-zone`).
    pub facts: BTreeMap<String, String>,
    /// The exit code of every task the node runs.
    pub task_exit_code: i32,
}

impl SimNode {
    /// A node with no resources, labels, taints or facts, address 127.0.0.1, tasks exiting 0.
    pub fn new(node_id: impl Into<String>) -> SimNode {
        SimNode {
            node_id: node_id.into(),
            address: crate::config::DEFAULT_ADDRESS.to_string(),
            resources: BTreeMap::new(),
            labels: BTreeMap::new(),
            taints: BTreeMap::new(),
            facts: BTreeMap::new(),
            task_exit_code: 0,
        }
    }

    /// Adds a resource.
    pub fn resource(mut self, name: &str, amount: &str) -> SimNode {
        self.resources.insert(name.into(), amount.into());
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> SimNode {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str) -> SimNode {
        self.taints.insert(key.into(), value.into());
        self
    }

    /// Adds a fact.
    pub fn fact(mut self, key: &str, value: &str) -> SimNode {
        self.facts.insert(key.into(), value.into());
        self
    }

    /// Sets the exit code of the node's tasks.
    pub fn task_exit_code(mut self, code: i32) -> SimNode {
        self.task_exit_code = code;
        self
    }

    /// `n` varied nodes, the same for the same `seed`: about 60% CPU-only machines (4 to 64
    /// CPUs), 20% `nvidia-a100` (4 or 8 GPUs), 10% `nvidia-h100` (8 GPUs) and 10%
    /// `nvidia-l4` (1 or 2 GPUs); the first three are always one CPU, one A100 and one H100
    /// machine. Every node is in region `us-west1`, zone `us-west1-a`, `-b` or `-c`, 20% on the
    /// `spot` market; about 30% of GPU machines carry the taint `dedicated=ml` and 5% of CPU
    /// machines `dedicated=batch` (the fourth node is always a GPU node with `dedicated=ml`, so a
    /// small mix shows a taint); labels `team` and `disk`. IDs are `sim-00000`, `sim-00001`,
    /// ... (zero-padded so they sort in order), addresses `10.x.y.z`.
    pub fn mix(n: usize, seed: u64) -> Vec<SimNode> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let width = n.saturating_sub(1).to_string().len().max(5);
        (0..n).map(|i| mixed_node(&mut rng, i, width)).collect()
    }

    fn config(&self, head: &str, token: &str, options: &SimOptions) -> AgentConfig {
        let mut config = AgentConfig::new(head, token);
        config.node_id = Some(self.node_id.clone());
        config.address = self.address.clone();
        config.resources = self.resources.clone();
        config.labels = self.labels.clone();
        config.taints = self.taints.clone();
        config.facts = self.facts.clone();
        config.reconnect_backoff = options.reconnect_backoff;
        config
    }
}

#[derive(Clone, Copy)]
enum Machine {
    Cpu,
    A100,
    H100,
    L4,
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    // u32 sampling is the same on every platform (usize would not be).
    let len = u32::try_from(items.len()).expect("short lists");
    &items[rng.random_range(0..len) as usize]
}

fn mixed_node(rng: &mut ChaCha8Rng, i: usize, width: usize) -> SimNode {
    let roll = rng.random_range(0..100u32);
    let machine = match i {
        0 => Machine::Cpu,
        1 => Machine::A100,
        2 => Machine::H100,
        _ if roll < 60 => Machine::Cpu,
        _ if roll < 80 => Machine::A100,
        _ if roll < 90 => Machine::H100,
        _ => Machine::L4,
    };
    let a = i + 1;
    let mut node = SimNode::new(format!("sim-{i:0width$}"));
    node.address = format!("10.{}.{}.{}", (a >> 16) & 255, (a >> 8) & 255, a & 255);
    let (cpus, gpus, memory_gib, accelerator): (u32, u32, u32, Option<&str>) = match machine {
        Machine::Cpu => {
            let cpus = *pick(rng, &[4, 8, 16, 32, 64]);
            (cpus, 0, cpus * 4, None)
        }
        Machine::A100 => {
            let cpus = *pick(rng, &[48, 96]);
            (cpus, *pick(rng, &[4, 8]), cpus * 8, Some("nvidia-a100"))
        }
        Machine::H100 => (128, 8, 1024, Some("nvidia-h100")),
        Machine::L4 => (16, *pick(rng, &[1, 2]), 64, Some("nvidia-l4")),
    };
    node = node.resource("CPU", &cpus.to_string()).resource("memory", &format!("{memory_gib}Gi"));
    if gpus > 0 {
        node = node.resource("GPU", &gpus.to_string());
    }
    if let Some(accelerator) = accelerator {
        node = node.fact("accelerator-type", accelerator);
    }
    let zone = *pick(rng, &["a", "b", "c"]);
    let market = if rng.random_bool(0.2) { "spot" } else { "on-demand" };
    node = node
        .fact("region", "us-west1")
        .fact("availability-zone", &format!("us-west1-{zone}"))
        .fact("market-type", market);
    let team = if accelerator.is_some() {
        *pick(rng, &["ml", "research"])
    } else {
        *pick(rng, &["web", "data", "infra"])
    };
    let disk = *pick(rng, &["ssd", "hdd"]);
    node = node.label("team", team).label("disk", disk);
    // The fourth node is always a tainted GPU node, so even a small mix shows taints.
    if i == 3 && accelerator.is_none() {
        node = node.resource("GPU", "2").fact("accelerator-type", "nvidia-l4");
    }
    if i == 3 || (accelerator.is_some() && rng.random_bool(0.3)) {
        node = node.taint("dedicated", "ml");
    } else if accelerator.is_none() && rng.random_bool(0.05) {
        node = node.taint("dedicated", "batch");
    }
    node
}

/// What runs the assignments of simulated nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RunnerKind {
    /// An [`AckRunner`] per node: nothing runs (the default: tests and benchmarks).
    #[default]
    Ack,
    /// A [`ProcessRunner`] per node, in `root/<node_id>`, stopping with `grace` between
    /// SIGTERM and SIGKILL: real processes (Unix).
    #[cfg(unix)]
    Process {
        /// The directory holding one directory per node.
        root: PathBuf,
        /// The wait between SIGTERM and SIGKILL.
        grace: Duration,
        /// The keeper command for each node's directory ([`ProcessOptions::keeper`]).
        keeper: Option<Vec<std::ffi::OsString>>,
    },
}

/// How simulated agents behave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimOptions {
    /// The agents' wait before registering again (100 ms by default: quick, not busy).
    pub reconnect_backoff: Duration,
    /// Keep tasks running until stopped instead of exiting at once ([`RunnerKind::Ack`]).
    pub hold_tasks: bool,
    /// What runs the assignments ([`RunnerKind::Ack`] by default).
    pub runner: RunnerKind,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            reconnect_backoff: Duration::from_millis(100),
            hold_tasks: false,
            runner: RunnerKind::Ack,
        }
    }
}

/// What went wrong with a simulated cluster.
#[derive(Debug, Error)]
pub enum SimError {
    /// A node without an ID.
    #[error("simulated node #{index}: node_id is empty; every simulated node needs an ID")]
    EmptyNodeId {
        /// Its position in the list given.
        index: usize,
    },
    /// Two nodes with one ID.
    #[error("simulated node {0:?} is given twice")]
    DuplicateNode(String),
    /// An ID no node has.
    #[error("there is no simulated node {0:?}")]
    UnknownNode(String),
    /// A node's process runner could not be created (its directory).
    #[cfg(unix)]
    #[error("simulated node {node_id:?}: {source}")]
    Runner {
        /// The node.
        node_id: String,
        /// Why.
        #[source]
        source: ProcessError,
    },
    /// A node's agent could not be created (its configuration is invalid).
    #[error("simulated node {node_id:?}: {source}")]
    Agent {
        /// The node.
        node_id: String,
        /// Why.
        #[source]
        source: AgentError,
    },
    /// A bounded wait ran out.
    #[error(
        "{count} simulated node(s) did not reach the awaited state within {timeout:?}: {sample}"
    )]
    Timeout {
        /// The timeout.
        timeout: Duration,
        /// How many live nodes were still waited for.
        count: usize,
        /// The first few, with their last errors.
        sample: String,
    },
    /// A node's agent stopped during a wait.
    #[error("simulated node {node_id:?}'s agent stopped: {reason}")]
    Stopped {
        /// The node.
        node_id: String,
        /// Its last error.
        reason: String,
    },
    /// Agents that ended with an error, reported by [`SimCluster::shutdown`].
    #[error("{} simulated agent(s) failed; first: {}: {}", .0.len(), .0[0].0, .0[0].1)]
    Failed(Vec<(String, AgentError)>),
}

/// A simulated node's runner.
#[derive(Clone, Debug)]
enum NodeRunner {
    Ack(Arc<AckRunner>),
    #[cfg(unix)]
    Process(Arc<ProcessRunner>),
}

impl NodeRunner {
    fn new(node: &SimNode, head: &str, options: &SimOptions) -> Result<NodeRunner, SimError> {
        match &options.runner {
            RunnerKind::Ack => Ok(NodeRunner::Ack(Arc::new(
                AckRunner::new().task_exit_code(node.task_exit_code).hold_tasks(options.hold_tasks),
            ))),
            #[cfg(unix)]
            RunnerKind::Process { root, grace, keeper } => {
                let options = ProcessOptions {
                    grace: *grace,
                    node_id: Some(node.node_id.clone()),
                    head: Some(head.to_string()),
                    ca_file: None,
                    // The processes run on this machine, whatever address the node shows.
                    node_ip: Some("127.0.0.1".into()),
                    keeper: keeper.clone(),
                };
                ProcessRunner::new(root.join(&node.node_id), options)
                    .map(|runner| NodeRunner::Process(Arc::new(runner)))
                    .map_err(|source| SimError::Runner { node_id: node.node_id.clone(), source })
            }
        }
    }

    fn as_dyn(&self) -> Arc<dyn Runner> {
        match self {
            NodeRunner::Ack(runner) => runner.clone(),
            #[cfg(unix)]
            NodeRunner::Process(runner) => runner.clone(),
        }
    }
}

struct SimAgent {
    node: SimNode,
    runner: NodeRunner,
    status: watch::Receiver<AgentStatus>,
    handle: Option<AgentHandle>,
}

/// Many simulated nodes against one head. Dropping the cluster shuts every agent down.
pub struct SimCluster {
    head: String,
    token: String,
    options: SimOptions,
    agents: BTreeMap<String, SimAgent>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("head", &self.head)
            .field("nodes", &self.agents.len())
            .field("alive", &self.agents.values().filter(|a| a.handle.is_some()).count())
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    /// Starts one agent per node against the head at `head` with the default [`SimOptions`].
    /// Must be called on a tokio runtime; returns at once (see [`SimCluster::wait_registered`]).
    pub fn start(head: &str, token: &str, nodes: Vec<SimNode>) -> Result<SimCluster, SimError> {
        SimCluster::start_with(head, token, nodes, SimOptions::default())
    }

    /// [`SimCluster::start`] with `options`. Every node is checked before any agent starts.
    pub fn start_with(
        head: &str,
        token: &str,
        nodes: Vec<SimNode>,
        options: SimOptions,
    ) -> Result<SimCluster, SimError> {
        let mut agents = BTreeMap::new();
        let mut ready = Vec::with_capacity(nodes.len());
        for (index, node) in nodes.into_iter().enumerate() {
            if node.node_id.is_empty() {
                return Err(SimError::EmptyNodeId { index });
            }
            if agents.contains_key(&node.node_id) {
                return Err(SimError::DuplicateNode(node.node_id));
            }
            let runner = NodeRunner::new(&node, head, &options)?;
            let agent = Agent::new(node.config(head, token, &options), runner.as_dyn())
                .map_err(|source| SimError::Agent { node_id: node.node_id.clone(), source })?;
            let status = agent.status();
            ready.push((node.node_id.clone(), agent));
            agents.insert(node.node_id.clone(), SimAgent { node, runner, status, handle: None });
        }
        for (node_id, agent) in ready {
            agents.get_mut(&node_id).expect("inserted above").handle = Some(agent.spawn());
        }
        Ok(SimCluster { head: head.into(), token: token.into(), options, agents })
    }

    /// The number of nodes, dead or alive.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    /// The node IDs, in order.
    pub fn node_ids(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    /// The node `node_id` as given.
    pub fn node(&self, node_id: &str) -> Option<&SimNode> {
        self.agents.get(node_id).map(|a| &a.node)
    }

    /// The runner of `node_id`, what it "runs", when it is an [`AckRunner`].
    pub fn runner(&self, node_id: &str) -> Option<Arc<AckRunner>> {
        match &self.agents.get(node_id)?.runner {
            NodeRunner::Ack(runner) => Some(runner.clone()),
            #[cfg(unix)]
            NodeRunner::Process(_) => None,
        }
    }

    /// The runner of `node_id` when it is a [`ProcessRunner`] ([`RunnerKind::Process`]).
    #[cfg(unix)]
    pub fn process_runner(&self, node_id: &str) -> Option<Arc<ProcessRunner>> {
        match &self.agents.get(node_id)?.runner {
            NodeRunner::Process(runner) => Some(runner.clone()),
            NodeRunner::Ack(_) => None,
        }
    }

    /// The status of `node_id`'s agent (its last, if killed).
    pub fn status(&self, node_id: &str) -> Option<AgentStatus> {
        self.agents.get(node_id).map(|a| a.status.borrow().clone())
    }

    /// True when `node_id`'s agent is running (not killed, not stopped).
    pub fn is_alive(&self, node_id: &str) -> bool {
        self.agents
            .get(node_id)
            .is_some_and(|a| a.handle.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// Waits at most `timeout` until every live node holds a session. Killed nodes are not
    /// waited for.
    pub async fn wait_registered(&self, timeout: Duration) -> Result<(), SimError> {
        self.wait_until(timeout, |_, status| status.is_registered()).await
    }

    /// Waits at most `timeout` until `condition(node_id, status)` holds for every live node;
    /// fails early when a node's agent stops.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        condition: impl Fn(&str, &AgentStatus) -> bool,
    ) -> Result<(), SimError> {
        let deadline = tokio::time::Instant::now() + timeout;
        for (node_id, agent) in self.agents.iter().filter(|(_, a)| a.handle.is_some()) {
            let mut rx = agent.status.clone();
            let waited = tokio::time::timeout_at(
                deadline,
                rx.wait_for(|s| condition(node_id, s) || s.stopped),
            )
            .await
            .map(|r| r.map(|status| status.clone()));
            match waited {
                Ok(Ok(status)) if condition(node_id, &status) => {}
                Ok(Ok(status)) => {
                    return Err(SimError::Stopped {
                        node_id: node_id.clone(),
                        reason: status.last_error.clone().unwrap_or_else(|| "shut down".into()),
                    })
                }
                Ok(Err(_)) => {
                    let status = rx.borrow().clone();
                    if !condition(node_id, &status) {
                        return Err(SimError::Stopped {
                            node_id: node_id.clone(),
                            reason: status.last_error.unwrap_or_else(|| "shut down".into()),
                        });
                    }
                }
                Err(_) => return Err(self.timeout(timeout, &condition)),
            }
        }
        Ok(())
    }

    fn timeout(
        &self,
        timeout: Duration,
        condition: &impl Fn(&str, &AgentStatus) -> bool,
    ) -> SimError {
        let waiting: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, a)| a.handle.is_some())
            .filter_map(|(id, a)| {
                let status = a.status.borrow();
                (!condition(id, &status)).then(|| match &status.last_error {
                    Some(e) => format!("{id} ({e})"),
                    None => id.clone(),
                })
            })
            .collect();
        let mut sample = waiting.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        if waiting.len() > 5 {
            sample.push_str(", ...");
        }
        SimError::Timeout { timeout, count: waiting.len(), sample }
    }

    /// Kills `node_id`'s agent as a dead machine would die: its task is aborted, its streams
    /// drop and its heartbeats stop. The runner keeps its work, so [`SimCluster::restart`]
    /// announces it again. Killing a dead node does nothing.
    pub async fn kill(&mut self, node_id: &str) -> Result<(), SimError> {
        let agent =
            self.agents.get_mut(node_id).ok_or_else(|| SimError::UnknownNode(node_id.into()))?;
        if let Some(handle) = agent.handle.take() {
            handle.kill().await;
        }
        Ok(())
    }

    /// Starts `node_id`'s agent again (killing it first if it runs), under the same node ID
    /// and with the work its runner held: a restarted agent or a healed partition.
    pub async fn restart(&mut self, node_id: &str) -> Result<(), SimError> {
        self.kill(node_id).await?;
        let (head, token, options) = (&self.head, &self.token, &self.options);
        let agent =
            self.agents.get_mut(node_id).ok_or_else(|| SimError::UnknownNode(node_id.into()))?;
        let new = Agent::new(agent.node.config(head, token, options), agent.runner.as_dyn())
            .map_err(|source| SimError::Agent { node_id: node_id.into(), source })?;
        agent.status = new.status();
        agent.handle = Some(new.spawn());
        Ok(())
    }

    /// [`SimCluster::restart`] after the machine "rebooted": nothing runs any more (a process
    /// runner stops its processes).
    pub async fn restart_empty(&mut self, node_id: &str) -> Result<(), SimError> {
        self.kill(node_id).await?;
        match &self.agents[node_id].runner {
            NodeRunner::Ack(runner) => runner.forget_all(),
            #[cfg(unix)]
            NodeRunner::Process(runner) => runner.stop_all().await,
        }
        self.restart(node_id).await
    }

    /// Shuts every agent down and waits for them, then stops every process the nodes' process
    /// runners run (SIGTERM, SIGKILL after their grace period) and waits for that too. Fails
    /// if any agent had stopped with an error (a refused token, a refused registration).
    pub async fn shutdown(self) -> Result<(), SimError> {
        let mut runners = Vec::new();
        let mut handles: Vec<(String, AgentHandle)> = Vec::new();
        for (node_id, agent) in self.agents {
            runners.push(agent.runner);
            if let Some(handle) = agent.handle {
                handles.push((node_id, handle));
            }
        }
        // Ask all first, then wait: the agents stop concurrently.
        for (_, handle) in &handles {
            handle.request_stop();
        }
        let mut failed = Vec::new();
        for (node_id, handle) in handles {
            if let Err(e) = handle.stop().await {
                failed.push((node_id, e));
            }
        }
        // The agents are gone; their processes go now, all nodes at once.
        let mut stopping = tokio::task::JoinSet::new();
        for runner in runners {
            #[cfg(unix)]
            if let NodeRunner::Process(runner) = runner {
                stopping.spawn(async move { runner.stop_all().await });
            }
            #[cfg(not(unix))]
            drop(runner);
        }
        while stopping.join_next().await.is_some() {}
        if failed.is_empty() {
            Ok(())
        } else {
            Err(SimError::Failed(failed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_deterministic_and_varied() {
        let a = SimNode::mix(200, 7);
        assert_eq!(a, SimNode::mix(200, 7));
        assert_ne!(a, SimNode::mix(200, 8));
        let ids: Vec<_> = a.iter().map(|n| n.node_id.as_str()).collect();
        assert_eq!(ids[0], "sim-00000");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "IDs sort in order");
        let accel = |n: &SimNode| n.facts.get("accelerator-type").cloned();
        let count = |f: &dyn Fn(&SimNode) -> bool| a.iter().filter(|n| f(n)).count();
        let cpu = count(&|n| accel(n).is_none());
        assert!((90..=150).contains(&cpu), "{cpu} CPU-only nodes");
        assert!(count(&|n| accel(n).is_none() && n.resources.contains_key("GPU")) == 0);
        for model in ["nvidia-a100", "nvidia-h100", "nvidia-l4"] {
            assert!(count(&|n| accel(n).as_deref() == Some(model)) > 0, "{model}");
        }
        for zone in ["us-west1-a", "us-west1-b", "us-west1-c"] {
            assert!(count(&|n| n.facts["availability-zone"] == zone) > 20, "{zone}");
        }
        assert!(count(&|n| n.taints.get("dedicated").map(String::as_str) == Some("ml")) > 0);
        assert!(count(&|n| n.facts["market-type"] == "spot") > 0);
        let addresses: std::collections::BTreeSet<_> = a.iter().map(|n| &n.address).collect();
        assert_eq!(addresses.len(), a.len());
    }

    #[test]
    fn the_first_three_are_one_of_each_main_kind() {
        let nodes = SimNode::mix(3, 1);
        assert!(!nodes[0].facts.contains_key("accelerator-type"));
        assert_eq!(nodes[1].facts["accelerator-type"], "nvidia-a100");
        assert_eq!(nodes[2].facts["accelerator-type"], "nvidia-h100");
        assert!(SimNode::mix(0, 1).is_empty());
        assert_eq!(SimNode::mix(100_000, 1).last().unwrap().node_id, "sim-99999");
    }

    #[test]
    fn every_mixed_node_is_a_valid_agent_config() {
        for node in SimNode::mix(500, 3) {
            node.config("127.0.0.1:7070", "t", &SimOptions::default()).validate().unwrap();
        }
    }

    #[tokio::test]
    async fn bad_node_lists_are_refused() {
        let err = SimCluster::start("127.0.0.1:1", "t", vec![SimNode::new("")]).unwrap_err();
        assert!(matches!(err, SimError::EmptyNodeId { index: 0 }), "{err}");
        let err = SimCluster::start("127.0.0.1:1", "t", vec![SimNode::new("a"), SimNode::new("a")])
            .unwrap_err();
        assert!(err.to_string().contains("\"a\" is given twice"), "{err}");
        let err =
            SimCluster::start("127.0.0.1:1", "t", vec![SimNode::new("a").label("bad key", "x")])
                .unwrap_err();
        assert!(err.to_string().contains("labels.bad key"), "{err}");
        let err = SimCluster::start("nowhere", "t", vec![SimNode::new("a")]).unwrap_err();
        assert!(err.to_string().contains("head: "), "{err}");
    }

    #[tokio::test]
    async fn unknown_nodes_are_named() {
        let mut cluster = SimCluster::start("127.0.0.1:1", "t", vec![SimNode::new("a")]).unwrap();
        let err = cluster.kill("b").await.unwrap_err();
        assert_eq!(err.to_string(), "there is no simulated node \"b\"");
        assert!(cluster.restart("b").await.is_err());
        assert!(cluster.is_alive("a"));
        cluster.kill("a").await.unwrap();
        assert!(!cluster.is_alive("a"));
        assert!(cluster.status("a").unwrap().stopped);
        // A dead node is not waited for.
        cluster.wait_registered(Duration::from_secs(1)).await.unwrap();
        cluster.shutdown().await.unwrap();
    }
}
