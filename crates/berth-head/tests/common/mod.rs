//! What several integration tests share: a real head with simulated agents whose runners
//! start real processes, and a bounded wait on the published view.

use std::time::Duration;

use berth_agent::{RunnerKind, SimCluster, SimNode, SimOptions};
use berth_head::{HeadConfig, RunningHead, View};

/// Kills whatever the runner directories still record when the test ends, pass or fail.
pub struct Processes(pub tempfile::TempDir);

impl Drop for Processes {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(self.0.path()).into_iter().flatten().flatten() {
            berth_agent::process::kill_recorded(&entry.path());
        }
    }
}

pub async fn cluster(
    nodes: Vec<SimNode>,
) -> (RunningHead, SimCluster, Processes, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(data.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.heartbeat_timeout = Duration::from_secs(10);
    let head = berth_head::start(config).await.unwrap();
    let processes = Processes(tempfile::tempdir().unwrap());
    let options = process_options(processes.0.path());
    let sim = SimCluster::start_with(
        &head.address.to_string(),
        head.agent_token.as_str(),
        nodes,
        options,
    )
    .unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();
    (head, sim, processes, data)
}

/// Simulated agents whose runners start real processes, each in `root/NODE`.
pub fn process_options(root: &std::path::Path) -> SimOptions {
    SimOptions {
        runner: RunnerKind::Process {
            root: root.to_path_buf(),
            grace: Duration::from_millis(500),
            keeper: None,
        },
        ..SimOptions::default()
    }
}

pub async fn until(head: &RunningHead, what: &str, done: impl Fn(&View) -> bool) {
    let mut view = head.handle.subscribe();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if done(&view.borrow_and_update().clone()) {
                return;
            }
            view.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}
