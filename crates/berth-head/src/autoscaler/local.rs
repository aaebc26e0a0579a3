//! The `local` provider: each node is a `berth start --address …` agent process on the head's
//! machine, as `berth up` runs its nodes, so the whole autoscaling loop runs on one machine.
//! Its output goes to `DATA_DIR/autoscaler/NODE_ID.out`; the agent keeps its own directory,
//! `DATA_DIR/agents/NODE_ID`, as any agent does. The agents stop with the head, and stop
//! their work when they do (`--stop-work-on-exit`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use berth_api::local::AGENT_TOKEN_ENV;
use berth_api::spec::node_types::NodeType;
use futures::future::BoxFuture;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::{described, Failure, Join, Provider};

/// How long a deleted agent gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub(crate) struct Local {
    program: PathBuf,
    join: Join,
    children: Mutex<HashMap<String, Child>>,
}

impl Local {
    pub(crate) fn new(program: PathBuf, join: Join) -> Local {
        Local { program, join, children: Mutex::new(HashMap::new()) }
    }

    fn spawn(&self, node_id: &str, node_type: &NodeType) -> Result<String, Failure> {
        let failure = |error: String| Failure { error, output: String::new() };
        let dir = self.join.data_dir.join("autoscaler");
        std::fs::create_dir_all(&dir)
            .map_err(|e| failure(format!("cannot create {}: {e}", dir.display())))?;
        let out_path = dir.join(format!("{node_id}.out"));
        let out = std::fs::File::create(&out_path)
            .map_err(|e| failure(format!("cannot create {}: {e}", out_path.display())))?;
        let err = out.try_clone().map_err(|e| failure(e.to_string()))?;
        let (resources, labels, taints, facts) = described(node_type);
        let mut command = Command::new(&self.program);
        command
            .arg("start")
            .args(["--address", &self.join.url])
            .arg("--data-dir")
            .arg(&self.join.data_dir)
            .args(["--node-id", node_id])
            // Only the type's resources: none of this machine's are added.
            .args(["--num-cpus", "0", "--num-gpus", "0", "--memory", "0"])
            .args(["--resources", &resources])
            .args(["--log-level", "warn", "--stop-work-on-exit", "--grace-period", "5"])
            .env(AGENT_TOKEN_ENV, &self.join.agent_token)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (flag, value) in [("--labels", &labels), ("--taints", &taints), ("--facts", &facts)] {
            if !value.is_empty() {
                command.args([flag, value]);
            }
        }
        // The local nodes live and die with the head, as `berth up`'s own: an agent whose head
        // process is gone (even killed) gets SIGTERM and stops, with its work. (The signal
        // follows the spawning thread, a runtime worker, which lives as long as the head.)
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let child = command
            .spawn()
            .map_err(|e| failure(format!("cannot start {}: {e}", self.program.display())))?;
        let pid = child.id().unwrap_or(0);
        self.children.lock().expect("not poisoned").insert(node_id.to_string(), child);
        Ok(format!("agent process {pid}; its output: {}", out_path.display()))
    }
}

impl Provider for Local {
    fn create<'a>(
        &'a self,
        node_id: &'a str,
        node_type: &'a NodeType,
    ) -> BoxFuture<'a, Result<String, Failure>> {
        Box::pin(async move { self.spawn(node_id, node_type) })
    }

    fn delete<'a>(
        &'a self,
        node_id: &'a str,
        _node_type: &'a str,
    ) -> BoxFuture<'a, Result<String, Failure>> {
        Box::pin(async move {
            let child = self.children.lock().expect("not poisoned").remove(node_id);
            match child {
                Some(child) => Ok(stop(child).await),
                // Started by an earlier head process: found by its command line.
                None => match find_agent(node_id) {
                    Some(pid) => {
                        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                        Ok(format!("sent SIGTERM to agent process {pid}"))
                    }
                    None => Ok("no agent process runs for it".to_string()),
                },
            }
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let children: Vec<Child> =
                self.children.lock().expect("not poisoned").drain().map(|(_, c)| c).collect();
            futures::future::join_all(children.into_iter().map(stop)).await;
        })
    }
}

/// SIGTERM, then SIGKILL after [`STOP_GRACE`]; says how it ended.
async fn stop(mut child: Child) -> String {
    let Some(pid) = child.id() else { return "the agent had exited".to_string() };
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => format!("agent process {pid} stopped ({})", describe(status)),
        Err(_) => {
            let _ = child.kill().await;
            format!("agent process {pid} killed after {} s", STOP_GRACE.as_secs())
        }
    }
}

fn describe(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(err) => err.to_string(),
    }
}

/// The process of a `berth start … --node-id NODE_ID` agent, from `/proc`.
fn find_agent(node_id: &str) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_agent = args.get(1).is_some_and(|a| *a == b"start");
        let names_node =
            args.windows(2).any(|w| w[0] == b"--node-id" && w[1] == node_id.as_bytes());
        if is_agent && names_node {
            return Some(pid);
        }
    }
    None
}
