//! `berth bench retention`: what a head costs after it ran many tasks, with and without
//! forgetting finished ones.
//!
//! For each policy (`keep-all`: nothing is ever forgotten, as before retention existed;
//! `default`: the head's defaults), two child processes share one temporary data directory
//! (embedded store):
//!
//! 1. **fill**: a head submits `--tasks` tasks through its handle and cancels each (no node:
//!    they wait, then finish as CANCELLED), 256 callers at a time, every change durable before
//!    its answer; then waits until what is due is forgotten and reports the head's resident
//!    memory above what it had before the first task, and the peak.
//! 2. **restart**: a new head starts on that directory; reports how long `start` took (open,
//!    load, rebuild, first commit: what a restart costs) and the memory it holds after.
//!
//! Each step has its own process, so one's freed memory does not hide another's.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use berth_api::rest::TaskSubmit;
use berth_head::config::Retention;
use berth_head::HeadConfig;
use serde::{Deserialize, Serialize};

/// Callers submitting at once.
const CALLERS: usize = 256;

/// One policy's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RetentionResult {
    /// `keep-all` or `default`.
    pub policy: String,
    /// Tasks created and finished.
    pub tasks: usize,
    /// Finished tasks the head still holds at the end.
    pub kept: usize,
    /// Seconds to create and finish them all.
    pub fill_s: f64,
    /// The head's resident memory after, above what it had before the first task.
    pub head_bytes: u64,
    /// Peak resident memory of the fill process.
    pub fill_peak_bytes: u64,
    /// Seconds `start` took on the filled data directory.
    pub restart_s: f64,
    /// Resident memory of the restarted head's process.
    pub restart_rss_bytes: u64,
    /// Bytes of the store file.
    pub store_bytes: u64,
}

fn retention(policy: &str) -> anyhow::Result<Retention> {
    match policy {
        "keep-all" => Ok(Retention {
            keep_for: Duration::from_secs(100 * 365 * 86_400),
            keep_count: usize::MAX,
        }),
        "default" => Ok(Retention::default()),
        other => bail!("unknown retention policy {other:?}: keep-all or default"),
    }
}

/// `VmRSS` and `VmHWM` of this process, bytes.
pub(crate) fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn config(dir: &Path, policy: &str) -> anyhow::Result<HeadConfig> {
    let mut config = HeadConfig::new(dir);
    config.bind = "127.0.0.1:0".parse().expect("an address");
    config.retention = retention(policy)?;
    Ok(config)
}

/// Step 1 (a child process): fill a head, report its memory.
pub fn fill(policy: &str, dir: &Path, tasks: usize) -> anyhow::Result<RetentionResult> {
    let config = config(dir, policy)?;
    let keep_count = config.retention.keep_count;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let head = berth_head::start(config)
            .await
            .map_err(|e| anyhow!("the head could not start: {e}"))?;
        let (before, _) = memory();
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut callers = Vec::new();
        for _ in 0..CALLERS {
            let (handle, next) = (head.handle.clone(), next.clone());
            callers.push(tokio::spawn(async move {
                let body = TaskSubmit {
                    command: "true".into(),
                    placement: berth_api::spec::PlacementSpec::from_json(
                        serde_json::json!({"resources": {"CPU": 1}}),
                    )
                    .unwrap(),
                    ..Default::default()
                };
                while next.fetch_add(1, Ordering::Relaxed) < tasks {
                    let task = handle.submit_task(body.clone()).await?;
                    handle.cancel_task(&task.task_id).await?;
                }
                Ok::<(), berth_head::HeadError>(())
            }));
        }
        for caller in callers {
            caller.await?.map_err(|e| anyhow!("a task was refused: {e}"))?;
        }
        let fill_s = started.elapsed().as_secs_f64();
        // Forgetting runs at the start of each cycle; wait for the one that catches up.
        let expected = tasks.min(keep_count);
        let mut views = head.handle.subscribe();
        let caught_up = views.wait_for(|v| v.tasks.len() <= expected);
        tokio::time::timeout(Duration::from_secs(120), caught_up)
            .await
            .map_err(|_| anyhow!("the head still holds more than {expected} tasks after 120 s"))?
            .map_err(|_| anyhow!("the head stopped"))?;
        let kept = head.handle.view().tasks.len();
        let (after, peak) = memory();
        head.crash().await;
        Ok(RetentionResult {
            policy: policy.to_string(),
            tasks,
            kept,
            fill_s,
            head_bytes: after.saturating_sub(before),
            fill_peak_bytes: peak,
            ..RetentionResult::default()
        })
    })
}

/// Step 2 (a child process): restart on the filled directory, report time and memory.
pub fn restart(policy: &str, dir: &Path) -> anyhow::Result<RetentionResult> {
    let config = config(dir, policy)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let started = Instant::now();
        let head = berth_head::start(config)
            .await
            .map_err(|e| anyhow!("the head could not restart: {e}"))?;
        let restart_s = started.elapsed().as_secs_f64();
        let (rss, _) = memory();
        let kept = head.handle.view().tasks.len();
        head.crash().await;
        let store_bytes = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".redb"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        Ok(RetentionResult {
            policy: policy.to_string(),
            kept,
            restart_s,
            restart_rss_bytes: rss,
            store_bytes,
            ..RetentionResult::default()
        })
    })
}

/// Runs both policies, each step in a child process; returns their figures.
pub fn run(tasks: usize, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Vec<RetentionResult>> {
    if tasks == 0 {
        bail!("--tasks: must be at least 1");
    }
    let exe = std::env::current_exe().context("cannot find this program to run the steps")?;
    let child = |step: &str, policy: &str, dir: &Path| -> anyhow::Result<RetentionResult> {
        let output = Command::new(&exe)
            .args(["bench", "retention", "--tasks", &tasks.to_string(), "--case"])
            .arg(format!("{step}:{policy}:{}", dir.display()))
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        if !output.status.success() {
            bail!("the {step} step of {policy} failed ({})", output.status);
        }
        serde_json::from_slice(&output.stdout)
            .with_context(|| format!("the {step} step of {policy} printed no result"))
    };
    let mut results = Vec::new();
    for policy in ["keep-all", "default"] {
        let dir = tempfile::tempdir().context("cannot create a temporary data directory")?;
        progress(&format!("{policy}: creating and finishing {tasks} tasks"));
        let mut result = child("fill", policy, dir.path())?;
        progress(&format!("{policy}: restarting on the filled store"));
        let restarted = child("restart", policy, dir.path())?;
        result.restart_s = restarted.restart_s;
        result.restart_rss_bytes = restarted.restart_rss_bytes;
        result.store_bytes = restarted.store_bytes;
        results.push(result);
    }
    Ok(results)
}

/// One step in this process (the hidden `--case STEP:POLICY:DIR`).
pub fn run_case(case: &str, tasks: usize) -> anyhow::Result<RetentionResult> {
    let mut parts = case.splitn(3, ':');
    let (Some(step), Some(policy), Some(dir)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("--case: expected STEP:POLICY:DIR");
    };
    match step {
        "fill" => fill(policy, Path::new(dir), tasks),
        "restart" => restart(policy, Path::new(dir)),
        other => bail!("--case: unknown step {other:?}"),
    }
}
