//! `berth bench api`: the head's speed through its REST API, with simulated agents.
//!
//! One process runs a real head (embedded store in a temporary directory: every creation is
//! durable before its 201), a simulated cluster whose agents speak the real gRPC protocol and
//! acknowledge their assignments, and an HTTP client with many connections. All share this
//! machine's cores, as a head and its busiest client would. Six measurements:
//!
//! 1. **Actor creations per second**: `--actors` POSTs of one-CPU actors, each answered 201
//!    only once durable; rate = actors / wall time from the first request to the last answer.
//!    Beside it, from `/metrics`: the share of the phase the head's owner task was busy
//!    (`berth_owner_cycle_seconds`: near 100 % means that one task bounds it), and the store's
//!    commits (`berth_store_commit_seconds`, `berth_store_ops_total`): how many per second, of
//!    how many writes, and the share of the phase spent committing (near 100 %: the commits,
//!    each ending with an fsync, bound it).
//! 2. **10,000 ALIVE**: a burst of 10,000 more actors; the time from the first request until
//!    the head's view shows all of them ALIVE (placed, assigned, started by their agents, and
//!    the starts durable).
//! 3. **Placement groups per second**: `--groups` POSTs of two-bundle groups.
//! 4. **Batched actor creations per second**: `batch_actors` actors in `POST
//!    /api/v1/actors:batch` requests of `batch_size` items, over a few connections; each
//!    answer only once its whole batch is durable, and every item must be 201. The owner's
//!    and the store's load beside it, as in 1.
//! 5. **Creations while watched**: `watched_actors` actors created as in 1 while `watchers`
//!    clients follow `GET /api/v1/watch`, each for the actors of its own label; every watcher
//!    must see each of its actors ADDED exactly once and then ALIVE, versions rising. The rate
//!    is set beside that of as many actors created just before without watchers, with the
//!    same bodies (labels of other teams, which no watcher follows), so that the two differ
//!    by the watching only (the head then holds the same state: phase 1's rate was measured on
//!    a smaller one).
//! 6. **At scale**: a fresh head and `scale_nodes` simulated nodes; `scale_actors` actors
//!    created in batches, timed from the first request until the view shows all of them
//!    ALIVE; and the head's process's resident memory grown per actor (the head and the
//!    client; the simulated agents run in a process of their own, whose growth is reported
//!    beside it), over all of them and over the second half (created once the first half is
//!    ALIVE: the cost of one more actor, without what the head holds once whatever its size,
//!    such as the change log, full long before the half way).
//!
//! Layout: this file holds the phases and [`command`] (`berth bench api`'s flags into
//! [`ApiBench`], the runs, the output). Under `api/`: `conn.rs`, the load's lean HTTP/1.1
//! connections and the watchers' event streams (not `berth_client`'s client, whose work per
//! request would be charged to the head: see there); `agents.rs`, the simulated agents'
//! process; `cpu.rs`, CPU time by who spent it; `report.rs`, the table. `/metrics` is read
//! with `berth_client`'s HTTP settings.

mod agents;
mod conn;
mod cpu;
mod report;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use berth_agent::SimCluster;
use berth_api::rest::ActorState;
use berth_head::HeadConfig;
use serde::Serialize;

use self::agents::{scale_nodes, AgentsProcess};
use self::conn::{Answer, Conn};
use super::{BenchArgs, BenchOutput};

/// Settings of `berth bench api`.
#[derive(Clone, Debug)]
pub struct ApiBench {
    /// Actors created in the throughput phase.
    pub actors: usize,
    /// Actors of the ALIVE burst.
    pub burst: usize,
    /// Placement groups created.
    pub groups: usize,
    /// Simulated nodes.
    pub nodes: usize,
    /// Concurrent HTTP connections.
    pub concurrency: usize,
    /// The heads' assignment window ([`HeadConfig::assignment_window`]).
    pub assignment_window: Duration,
    /// Actors created through batches.
    pub batch_actors: usize,
    /// Items per batch.
    pub batch_size: usize,
    /// Watch clients of phase 5.
    pub watchers: usize,
    /// Actors created while they watch.
    pub watched_actors: usize,
    /// Actors of phase 6.
    pub scale_actors: usize,
    /// Simulated nodes of phase 6.
    pub scale_nodes: usize,
    /// Runs phase 6 in a child process of this program (`bench api --case`
    /// [`scale_case`]) instead of this one, so that its memory figures do not count what the
    /// earlier phases freed but the allocator still holds.
    pub scale_in: Option<std::path::PathBuf>,
    /// Runs phase 6's simulated agents in a child process of this program (`bench api --case
    /// agents:…`, see [`agents`]), so that this process's memory is the head's and the
    /// client's; without it (the unit tests) they run in this process.
    pub agents_in: Option<std::path::PathBuf>,
}

/// Connections of the batch phase: a few large requests keep the head busy; more only queue.
const BATCH_CONNECTIONS: usize = 4;

/// The figures.
#[derive(Clone, Debug, Serialize)]
pub struct ApiResult {
    /// Simulated nodes.
    pub nodes: usize,
    /// Concurrent connections.
    pub concurrency: usize,
    /// The heads' assignment window, milliseconds.
    pub assignment_window_ms: u64,
    /// Actors created in phase 1.
    pub actors: usize,
    /// Durable actor creations per second.
    pub actors_per_s: f64,
    /// Median answer time of a creation, ms.
    pub actor_p50_ms: f64,
    /// 99th percentile, ms.
    pub actor_p99_ms: f64,
    /// What the head did during phase 1: the owner's and the store's busy shares, commits.
    pub actor_load: Load,
    /// Actors of the burst.
    pub burst: usize,
    /// Seconds from the burst's first request to all of it ALIVE.
    pub burst_alive_s: f64,
    /// Groups created.
    pub groups: usize,
    /// Durable placement groups per second.
    pub groups_per_s: f64,
    /// Actors created through batches.
    pub batch_actors: usize,
    /// Items per batch.
    pub batch_size: usize,
    /// Durable batched actor creations per second.
    pub batch_actors_per_s: f64,
    /// Median answer time of a batch, ms.
    pub batch_p50_ms: f64,
    /// 99th percentile, ms.
    pub batch_p99_ms: f64,
    /// The same during the batch phase.
    pub batch_load: Load,
    /// Watch clients of phase 5.
    pub watchers: usize,
    /// Durable actor creations per second while they watch.
    pub watched_actors_per_s: f64,
    /// The same, just before, without watchers.
    pub unwatched_actors_per_s: f64,
    /// The CPU per actor created while they watch (see [`Load::cpu`]): the head's dispatch
    /// and writes, and the client's reading.
    pub watched_cpu: Option<cpu::Use>,
    /// The same, just before, without watchers.
    pub unwatched_cpu: Option<cpu::Use>,
    /// Watchers that saw every change of theirs exactly once, in order.
    pub watchers_complete: usize,
    /// Actors of phase 6.
    pub scale_actors: usize,
    /// Its nodes.
    pub scale_nodes: usize,
    /// Seconds from the first request until all of them were ALIVE.
    pub scale_alive_s: f64,
    /// Resident memory grown per actor, bytes, of the head's process (the head and the
    /// client; the agents too when they ran in it).
    pub scale_bytes_per_actor: f64,
    /// Resident memory grown per actor over the second half of phase 6's actors: the cost of
    /// one more actor, without what the head holds once whatever its size.
    pub scale_marginal_bytes_per_actor: f64,
    /// The same two of the agents' process, when they ran in one of their own.
    pub scale_agents_bytes_per_actor: Option<f64>,
    /// See [`ApiResult::scale_agents_bytes_per_actor`].
    pub scale_agents_marginal_bytes_per_actor: Option<f64>,
}

struct Phase {
    seconds: f64,
    latencies_ms: Vec<f64>,
}

/// Runs `total` POSTs of `body` to `url` over `concurrency` connections; every answer must be
/// 201.
async fn post_many(
    url: String,
    token: &str,
    body: serde_json::Value,
    total: usize,
    concurrency: usize,
) -> anyhow::Result<Phase> {
    let body = bytes::Bytes::from(serde_json::to_vec(&body)?);
    post_each(url, token, Arc::new(move |_| body.clone()), total, concurrency).await
}

/// Like [`post_many`], the `i`th body being `body(i)`.
async fn post_each(
    url: String,
    token: &str,
    body: Bodies,
    total: usize,
    concurrency: usize,
) -> anyhow::Result<Phase> {
    let created: Created = Arc::new(|_, answer| answer.status == 201);
    post_load(url, token, Posts { count: total, body, created }, concurrency).await
}

/// Creates `total` copies of `item` through `url` (a `…:batch` route) in batches of `size`
/// over `connections`; every item must be created. Returns the time taken and each batch's
/// answer time.
async fn post_batches(
    url: String,
    token: &str,
    item: serde_json::Value,
    (total, size, connections): (usize, usize, usize),
) -> anyhow::Result<Phase> {
    let batches = total.div_ceil(size.max(1));
    let count = move |batch: usize| size.min(total - batch * size);
    // Every full batch is the same text: written once, so the client's work stays its sending.
    let full = bytes::Bytes::from(batch_body(&item, size));
    let body: Bodies = Arc::new(move |batch| {
        let count = count(batch);
        if count == size {
            full.clone()
        } else {
            batch_body(&item, count).into()
        }
    });
    let created: Created = Arc::new(move |batch, answer| {
        let statuses = serde_json::from_slice::<Statuses>(&answer.body).map(|a| a.items);
        answer.status == 200
            && statuses.is_ok_and(|items| {
                items.len() == count(batch) && items.iter().all(|i| i.status == 201)
            })
    });
    post_load(url, token, Posts { count: batches, body, created }, connections).await
}

/// The `i`th body of a phase.
type Bodies = Arc<dyn Fn(usize) -> bytes::Bytes + Send + Sync>;
/// Whether the answer to the `i`th body says it was created.
type Created = Arc<dyn Fn(usize, &Answer) -> bool + Send + Sync>;

/// What a phase POSTs: `count` bodies, the `i`th `body(i)`, each answer checked by
/// `created(i, answer)`.
struct Posts {
    count: usize,
    body: Bodies,
    created: Created,
}

/// Sends `posts` to `url` over `connections` connections, each POST as soon as the connection's
/// last answer came; fails at the first answer that is not a creation. Returns the time taken
/// (connections opened before the clock starts) and each POST's answer time, sorted.
async fn post_load(
    url: String,
    token: &str,
    posts: Posts,
    connections: usize,
) -> anyhow::Result<Phase> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::open(&url, token).await?);
    }
    let started = Instant::now();
    let mut workers = Vec::new();
    for mut conn in conns {
        let (url, next, body, created) =
            (url.clone(), next.clone(), posts.body.clone(), posts.created.clone());
        let count = posts.count;
        workers.push(tokio::spawn(async move {
            let mut latencies_ms = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(latencies_ms);
                }
                let sent = Instant::now();
                let answer = conn.post(body(i)).await?;
                if !created(i, &answer) {
                    let text = String::from_utf8_lossy(&answer.body);
                    bail!("{url} answered {}: {text:.300}", answer.status);
                }
                latencies_ms.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut latencies_ms = Vec::with_capacity(posts.count);
    for worker in workers {
        latencies_ms.extend(worker.await.context("a client task panicked")??);
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies_ms.sort_by(f64::total_cmp);
    Ok(Phase { seconds, latencies_ms })
}

/// `{"items": [item × count]}` as JSON text.
fn batch_body(item: &serde_json::Value, count: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "items": vec![item; count] })).expect("JSON")
}

/// What the bench checks of a batch's answer: each item's status. The rest of each item (the
/// created actor) is skipped, not built: the client shares the head's cores, so it reads only
/// what it checks.
#[derive(serde::Deserialize)]
struct Statuses {
    items: Vec<ItemStatus>,
}

#[derive(serde::Deserialize)]
struct ItemStatus {
    status: u16,
}

/// What a watcher checks of a change (borrowed from the event's text; other fields skipped).
#[derive(serde::Deserialize)]
struct Seen<'a> {
    version: u64,
    #[serde(rename = "type", borrow)]
    change: &'a str,
    #[serde(borrow)]
    object: SeenActor<'a>,
}

#[derive(serde::Deserialize)]
struct SeenActor<'a> {
    #[serde(borrow)]
    actor_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    state: &'a str,
}

/// Follows `GET /api/v1/watch?kind=actor&label=team=t{team}&listing=false` until each of the
/// `expected` actors has been seen ALIVE; true when every one was ADDED exactly once and the
/// versions only rose. Bounded by `deadline`.
async fn watch_team(
    base: String,
    token: String,
    team: usize,
    expected: usize,
    ready: tokio::sync::mpsc::Sender<Readiness>,
    deadline: Instant,
) -> anyhow::Result<bool> {
    let url = format!("{base}/api/v1/watch?kind=actor&label=team=t{team}&listing=false");
    let opened = conn::EventStream::open(&url, &token).await;
    // Told either way, then let go of: the bench waits until every watcher follows, and stops
    // at the first that cannot (it had waited forever for one that failed).
    let _ = ready.send(opened.as_ref().map(|_| ()).map_err(|e| format!("{e:#}"))).await;
    drop(ready);
    let mut events = opened?;
    let (mut text, mut last, mut ok) = (Vec::<u8>::new(), 0u64, true);
    // An event ends at a blank line. Found by memchr's vectorised search: a byte-by-byte scan
    // was 1.9 % of the watched phase's CPU (`perf`), all of it charged to the watching.
    let blank_line = memchr::memmem::Finder::new(b"\n\n");
    let mut added = std::collections::HashMap::<String, usize>::new();
    let mut alive = std::collections::HashSet::<String>::new();
    while alive.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(more) = tokio::time::timeout(left, events.read(&mut text)).await else {
            return Ok(false);
        };
        if !more? {
            return Ok(false);
        }
        // The whole events read, each in place (no copy per event), then dropped at once: the
        // client shares the head's cores, so it does only what a watcher must.
        let mut read = 0;
        while let Some(end) = blank_line.find(&text[read..]) {
            let block = &text[read..read + end];
            read += end + 2;
            let Some(data) = data_line(block) else { continue };
            let change: Seen = serde_json::from_slice(data)?;
            ok &= change.version > last;
            last = change.version;
            let id = change.object.actor_id.into_owned();
            if change.change == "ADDED" {
                *added.entry(id.clone()).or_default() += 1;
            }
            if change.object.state == "ALIVE" {
                alive.insert(id);
            }
        }
        text.drain(..read);
    }
    Ok(ok && added.len() == expected && added.values().all(|&n| n == 1))
}

/// What a watcher tells the bench once it follows its stream, or why it cannot.
type Readiness = Result<(), String>;

/// The `data:` line of an event (ours have one; keep-alive comments have none), found without
/// a byte-by-byte scan of the JSON before it ends.
fn data_line(event: &[u8]) -> Option<&[u8]> {
    let start =
        if event.starts_with(b"data:") { 5 } else { memchr::memmem::find(event, b"\ndata:")? + 6 };
    let rest = &event[start..];
    Some(&rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())])
}

/// Raises this process's limit of open files to at least `wanted` (within the hard limit).
fn raise_open_files(wanted: usize) -> anyhow::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let wanted = wanted as u64;
    if soft >= wanted {
        return Ok(());
    }
    if hard < wanted {
        bail!("the bench needs {wanted} open files and the hard limit is {hard} (ulimit -Hn)");
    }
    setrlimit(Resource::RLIMIT_NOFILE, wanted, hard)?;
    Ok(())
}

/// Phase 6 on its own head.
async fn at_scale(settings: &ApiBench, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Scale> {
    let dir = tempfile::tempdir().context("cannot create a temporary data directory")?;
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().expect("an address");
    config.assignment_window = settings.assignment_window;
    config.heartbeat_timeout = Duration::from_secs(60);
    let head =
        berth_head::start(config).await.map_err(|e| anyhow!("the head could not start: {e}"))?;
    let per_node = settings.scale_actors.div_ceil(settings.scale_nodes.max(1)) + 1;
    let nodes = settings.scale_nodes.max(1);
    let address = head.address.to_string();
    let mut agents = match &settings.agents_in {
        Some(program) => Agents::Process(Box::new(
            AgentsProcess::start(program, &address, head.agent_token.as_str(), nodes, per_node)
                .await?,
        )),
        None => {
            let nodes = scale_nodes(nodes, per_node);
            let sim = SimCluster::start(&address, head.agent_token.as_str(), nodes)
                .map_err(|e| anyhow!("{e}"))?;
            sim.wait_registered(Duration::from_secs(120)).await.map_err(|e| anyhow!("{e}"))?;
            Agents::InProcess(sim)
        }
    };
    progress(&format!(
        "{} actors until ALIVE on {} nodes",
        settings.scale_actors, settings.scale_nodes
    ));
    // Created in two halves, each waited for until ALIVE: the memory grown over the second
    // half is the cost of one more actor, without what a head holds once whatever its size
    // (the change log, full long before the half way; the store's page cache; buffers).
    let first_half = settings.scale_actors / 2;
    let before = agents.resident().await?;
    let started = Instant::now();
    let item = serde_json::json!({"command": "sleep", "args": ["3600"], "resources": {"CPU": 1}});
    let url = format!("http://{}/api/v1/actors:batch", head.address);
    let token = head.token.as_str();
    let batches = |count| (count, settings.batch_size, BATCH_CONNECTIONS);
    post_batches(url.clone(), token, item.clone(), batches(first_half)).await?;
    all_alive(&head.handle, first_half).await?;
    let half = agents.resident().await?;
    let second_half = settings.scale_actors - first_half;
    post_batches(url, token, item, batches(second_half)).await?;
    all_alive(&head.handle, settings.scale_actors).await?;
    let seconds = started.elapsed().as_secs_f64();
    let after = agents.resident().await?;
    agents.stop().await?;
    head.shutdown().await;
    let per_actor =
        |from: u64, to: u64, actors: usize| to.saturating_sub(from) as f64 / actors.max(1) as f64;
    let agents = |from: Option<u64>, actors| Some(per_actor(from?, after.1?, actors));
    Ok(Scale {
        alive_s: seconds,
        bytes_per_actor: per_actor(before.0, after.0, settings.scale_actors),
        marginal_bytes_per_actor: per_actor(half.0, after.0, second_half),
        agents_bytes_per_actor: agents(before.1, settings.scale_actors),
        agents_marginal_bytes_per_actor: agents(half.1, second_half),
    })
}

/// Phase 6's agents: in this process, or in one of their own.
enum Agents {
    InProcess(SimCluster),
    Process(Box<AgentsProcess>),
}

impl Agents {
    /// Resident bytes of this process (the head's) and of the agents' own, if they have one;
    /// each read after its allocator returned the pages it holds free.
    async fn resident(&mut self) -> anyhow::Result<(u64, Option<u64>)> {
        super::release_free_memory();
        let own = super::retention::memory().0;
        match self {
            Agents::InProcess(_) => Ok((own, None)),
            Agents::Process(process) => Ok((own, Some(process.memory().await?))),
        }
    }

    /// The agents' process's ID, when they run in one.
    fn pid(&self) -> Option<u32> {
        match self {
            Agents::InProcess(_) => None,
            Agents::Process(process) => process.pid(),
        }
    }

    async fn stop(self) -> anyhow::Result<()> {
        match self {
            Agents::InProcess(sim) => {
                let _ = sim.shutdown().await;
                Ok(())
            }
            Agents::Process(process) => process.stop().await,
        }
    }
}

/// Phase 6's figures.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Scale {
    /// Seconds from the first request until all actors were ALIVE.
    pub alive_s: f64,
    /// Resident memory grown per actor, bytes.
    pub bytes_per_actor: f64,
    /// The same over the second half.
    pub marginal_bytes_per_actor: f64,
    /// The agents' process's, when they ran in one of their own.
    #[serde(default)]
    pub agents_bytes_per_actor: Option<f64>,
    /// The same over the second half.
    #[serde(default)]
    pub agents_marginal_bytes_per_actor: Option<f64>,
}

/// Phase 6 alone, in this process (a child of `berth bench api`: see [`ApiBench::scale_in`]).
pub fn run_scale(settings: &ApiBench, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Scale> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(at_scale(settings, progress))
}

/// The `--case` that runs phase 6 of `settings` alone: `scale:ACTORS:NODES:BATCH`.
pub fn scale_case(settings: &ApiBench) -> String {
    format!("scale:{}:{}:{}", settings.scale_actors, settings.scale_nodes, settings.batch_size)
}

/// Sets phase 6's sizes from a [`scale_case`] text.
pub fn apply_scale_case(case: &str, settings: &mut ApiBench) -> anyhow::Result<()> {
    let parts: Vec<&str> = case.split(':').collect();
    let ["scale", actors, nodes, batch] = parts[..] else {
        bail!("--case: `bench api` takes scale:ACTORS:NODES:BATCH, not {case:?}");
    };
    let number = |field: &str, text: &str| -> anyhow::Result<usize> {
        match text.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("--case: {field} must be a whole number of at least 1, not {text:?}"),
        }
    };
    settings.scale_actors = number("ACTORS", actors)?;
    settings.scale_nodes = number("NODES", nodes)?;
    settings.batch_size = number("BATCH", batch)?;
    Ok(())
}

/// Phase 6 in a child process, `program bench api --case scale:…`: its memory figures then
/// start from a fresh process, not one holding what phases 1 to 5 freed.
fn scale_in_child(program: &std::path::Path, settings: &ApiBench) -> anyhow::Result<Scale> {
    let mut command = std::process::Command::new(program);
    command.args(["bench", "api", "--case", &scale_case(settings)]);
    let window = settings.assignment_window.as_millis().to_string();
    command.args(["--assignment-window", &window]);
    let output = command
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !output.status.success() {
        bail!("phase 6 (at scale) failed ({})", output.status);
    }
    serde_json::from_slice(&output.stdout).context("phase 6 (at scale) printed no result")
}

/// Waits until the head's view shows `wanted` actors ALIVE (at most 300 s).
async fn all_alive(handle: &berth_head::HeadHandle, wanted: usize) -> anyhow::Result<()> {
    let alive = async {
        loop {
            let view = handle.view();
            if view.actors.values().filter(|a| a.state == ActorState::Alive).count() >= wanted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(300), alive)
        .await
        .map_err(|_| anyhow!("{wanted} actors were not ALIVE within 300 s"))
}

/// The head's running totals that tell what bounds a phase, from `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    /// Seconds the owner task has been busy (`berth_owner_cycle_seconds_sum`).
    owner_seconds: f64,
    /// Store commits (`berth_store_commit_seconds_count`).
    commits: f64,
    /// Seconds spent committing, the fsync included (`berth_store_commit_seconds_sum`).
    commit_seconds: f64,
    /// Writes committed (`berth_store_ops_total`).
    writes: f64,
    /// CPU time spent so far, by whom, when the system says.
    cpu: Option<cpu::Reading>,
}

/// What the head did over a phase: its growth of [`Counters`], beside the phase's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Load {
    /// Share of the phase the owner task (the one task that applies every change) was busy:
    /// near 1, that task bounds the phase.
    pub owner_busy: f64,
    /// Store commits per second (each a group of cycles, durable with one fsync).
    pub commits_per_s: f64,
    /// Writes per commit.
    pub writes_per_commit: f64,
    /// Share of the phase the store was committing: near 1, the commits bound the phase.
    pub store_busy: f64,
    /// CPU time per item created, µs, of the head, the bench's client and the simulated agents:
    /// what a change saves, less moved by the machine's other load than a rate is. `None`
    /// where `/proc` is not there.
    pub cpu: Option<cpu::Use>,
}

impl Counters {
    /// Reads the head's `/metrics` at `base`, and the CPU time of this process and of the
    /// agents' process `agents`.
    async fn read(
        client: &reqwest::Client,
        base: &str,
        token: &str,
        agents: Option<u32>,
    ) -> anyhow::Result<Counters> {
        let text = client
            .get(format!("{base}/metrics"))
            .bearer_auth(token)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|value| value.trim().parse::<f64>().ok())
                .ok_or_else(|| anyhow!("/metrics has no {name}"))
        };
        Ok(Counters {
            owner_seconds: value("berth_owner_cycle_seconds_sum")?,
            commits: value("berth_store_commit_seconds_count")?,
            commit_seconds: value("berth_store_commit_seconds_sum")?,
            writes: value("berth_store_ops_total")?,
            cpu: cpu::read(agents),
        })
    }

    /// The load of a phase of `seconds` that created `items` and began with `before` and ended
    /// with `self`.
    fn since(self, before: Counters, seconds: f64, items: usize) -> Load {
        let commits = self.commits - before.commits;
        Load {
            owner_busy: (self.owner_seconds - before.owner_seconds) / seconds,
            commits_per_s: commits / seconds,
            writes_per_commit: if commits > 0.0 {
                (self.writes - before.writes) / commits
            } else {
                0.0
            },
            store_busy: (self.commit_seconds - before.commit_seconds) / seconds,
            cpu: cpu::per_item(before.cpu, self.cpu, items),
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs the three phases.
pub fn run(settings: &ApiBench, progress: &mut dyn FnMut(&str)) -> anyhow::Result<ApiResult> {
    if settings.nodes == 0 || settings.concurrency == 0 {
        bail!("--nodes and --concurrency must be at least 1");
    }
    // Both ends of every watch and creation connection live in this process.
    raise_open_files(2 * (settings.watchers + settings.concurrency) + 1024)?;
    // The head runs on one runtime; the client (everything the bench sends and reads) on one
    // of its own, whose thread is named so that its CPU time can be told from the head's
    // (see `cpu`). One thread: the client needs a fifth of a core at the most.
    let head_runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(cpu::CLIENT_THREAD)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir().context("cannot create a temporary data directory")?;
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().expect("an address");
    config.assignment_window = settings.assignment_window;
    config.heartbeat_timeout = Duration::from_secs(30);
    let head = head_runtime
        .block_on(berth_head::start(config))
        .map_err(|e| anyhow!("the head could not start: {e}"))?;
    // Room for every actor and bundle: one CPU each, spread over the nodes.
    let needed = settings.actors
        + settings.burst
        + 2 * settings.groups
        + settings.batch_actors
        + 2 * settings.watched_actors;
    let per_node = needed.div_ceil(settings.nodes) + 1;
    let address = head.address.to_string();
    let agents = match &settings.agents_in {
        Some(program) => {
            Agents::Process(Box::new(client_runtime.block_on(AgentsProcess::start(
                program,
                &address,
                head.agent_token.as_str(),
                settings.nodes,
                per_node,
            ))?))
        }
        None => head_runtime.block_on(async {
            let nodes = scale_nodes(settings.nodes, per_node);
            let sim = SimCluster::start(&address, head.agent_token.as_str(), nodes)
                .map_err(|e| anyhow!("{e}"))?;
            sim.wait_registered(Duration::from_secs(60)).await.map_err(|e| anyhow!("{e}"))?;
            anyhow::Ok(Agents::InProcess(sim))
        })?,
    };
    let agents_pid = agents.pid();
    let result = client_runtime.block_on(async {
        let token = head.token.as_str().to_string();
        let client = berth_client::async_http_builder()
            .pool_max_idle_per_host(settings.concurrency)
            .tcp_nodelay(true)
            .build()?;
        let base = format!("http://{}", head.address);
        let actor =
            serde_json::json!({"command": "sleep", "args": ["3600"], "resources": {"CPU": 1}});

        progress(&format!(
            "creating {} actors over {} connections",
            settings.actors, settings.concurrency
        ));
        let before = Counters::read(&client, &base, &token, agents_pid).await?;
        let phase = post_many(
            format!("{base}/api/v1/actors"),
            &token,
            actor.clone(),
            settings.actors,
            settings.concurrency,
        )
        .await?;
        let actors_per_s = settings.actors as f64 / phase.seconds;
        let actor_load = Counters::read(&client, &base, &token, agents_pid).await?.since(
            before,
            phase.seconds,
            settings.actors,
        );

        progress(&format!("a burst of {} actors until all are ALIVE", settings.burst));
        let first_seq = head.handle.view().actors.keys().next_back().copied().unwrap_or(0) + 1;
        let started = Instant::now();
        let burst = post_many(
            format!("{base}/api/v1/actors"),
            &token,
            actor,
            settings.burst,
            settings.concurrency,
        );
        let handle = head.handle.clone();
        let wanted = settings.burst;
        // Polled every 2 ms (counting only the burst's actors), so the count itself does not
        // steal the head's CPU on every change.
        let all_alive = async move {
            loop {
                let view = handle.view();
                let alive = view
                    .actors
                    .range(first_seq..)
                    .filter(|(_, a)| a.state == ActorState::Alive)
                    .count();
                if alive >= wanted {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        let bounded = async {
            // Bounded: a head that never gets there is reported by the time, not awaited.
            let _ = tokio::time::timeout(Duration::from_secs(120), all_alive).await;
        };
        let (burst, ()) = tokio::join!(burst, bounded);
        burst?;
        let burst_alive_s = started.elapsed().as_secs_f64();

        progress(&format!("creating {} placement groups", settings.groups));
        let group = serde_json::json!({"strategy": "PACK", "bundles": [{"CPU": 1}, {"CPU": 1}]});
        let groups = post_many(
            format!("{base}/api/v1/placement_groups"),
            &token,
            group,
            settings.groups,
            settings.concurrency,
        )
        .await?;
        let groups_per_s = settings.groups as f64 / groups.seconds;

        progress(&format!(
            "creating {} actors in batches of {}",
            settings.batch_actors, settings.batch_size
        ));
        let item =
            serde_json::json!({"command": "sleep", "args": ["3600"], "resources": {"CPU": 1}});
        let before = Counters::read(&client, &base, &token, agents_pid).await?;
        let batch_phase = post_batches(
            format!("{base}/api/v1/actors:batch"),
            &token,
            item,
            (settings.batch_actors, settings.batch_size, BATCH_CONNECTIONS),
        )
        .await?;
        let batch_load = Counters::read(&client, &base, &token, agents_pid).await?.since(
            before,
            batch_phase.seconds,
            settings.batch_actors,
        );
        progress(&format!(
            "creating {} actors while {} clients watch",
            settings.watched_actors, settings.watchers
        ));
        let watchers = settings.watchers.max(1);
        // Actor i is of team i % watchers, as label `team`: `t…` while watched, `u…` before
        // (the same bodies, so the two rates differ by the watching only; no watcher follows
        // a `u…` team).
        let teams = |prefix: &'static str| {
            Arc::new(move |i: usize| {
                let body = serde_json::json!({"command": "sleep", "args": ["3600"],
                    "resources": {"CPU": 1}, "labels": {"team": format!("{prefix}{}", i % watchers)}});
                bytes::Bytes::from(serde_json::to_vec(&body).expect("JSON"))
            })
        };
        let cpu_per_actor = |before: Option<cpu::Reading>| {
            cpu::per_item(before, cpu::read(agents_pid), settings.watched_actors)
        };
        let cpu_before = cpu::read(agents_pid);
        let unwatched = post_each(
            format!("{base}/api/v1/actors"),
            &token,
            teams("u"),
            settings.watched_actors,
            settings.concurrency,
        )
        .await?;
        let unwatched_cpu = cpu_per_actor(cpu_before);
        let deadline = Instant::now() + Duration::from_secs(300);
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(watchers);
        let mut follows = Vec::new();
        for team in 0..watchers {
            // Actor i is team i % watchers: each team gets its share.
            let expected = (0..settings.watched_actors).filter(|i| i % watchers == team).count();
            follows.push(tokio::spawn(watch_team(
                base.clone(),
                token.clone(),
                team,
                expected,
                ready_tx.clone(),
                deadline,
            )));
        }
        // Only the watchers hold senders now: a watcher that ended without a word (a panic)
        // ends the wait too.
        drop(ready_tx);
        for _ in 0..watchers {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, ready_rx.recv()).await {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(why))) => bail!("a watcher could not start: {why}"),
                Ok(None) => bail!("a watcher ended before it was following"),
                Err(_) => bail!("the watchers were not all following within 300 s"),
            }
        }
        let cpu_before = cpu::read(agents_pid);
        let watched = post_each(
            format!("{base}/api/v1/actors"),
            &token,
            teams("t"),
            settings.watched_actors,
            settings.concurrency,
        )
        .await?;
        let watched_cpu = cpu_per_actor(cpu_before);
        let mut watchers_complete = 0;
        for follow in follows {
            if follow.await.context("a watcher panicked")?? {
                watchers_complete += 1;
            }
        }
        Ok::<_, anyhow::Error>(ApiResult {
            nodes: settings.nodes,
            concurrency: settings.concurrency,
            assignment_window_ms: settings.assignment_window.as_millis() as u64,
            actors: settings.actors,
            actors_per_s,
            actor_p50_ms: percentile(&phase.latencies_ms, 0.5),
            actor_p99_ms: percentile(&phase.latencies_ms, 0.99),
            actor_load,
            burst: settings.burst,
            burst_alive_s,
            groups: settings.groups,
            groups_per_s,
            batch_actors: settings.batch_actors,
            batch_size: settings.batch_size,
            batch_actors_per_s: settings.batch_actors as f64 / batch_phase.seconds,
            batch_p50_ms: percentile(&batch_phase.latencies_ms, 0.5),
            batch_p99_ms: percentile(&batch_phase.latencies_ms, 0.99),
            batch_load,
            watchers: settings.watchers,
            watched_actors_per_s: settings.watched_actors as f64 / watched.seconds,
            unwatched_actors_per_s: settings.watched_actors as f64 / unwatched.seconds,
            watched_cpu,
            unwatched_cpu,
            watchers_complete,
            scale_actors: settings.scale_actors,
            scale_nodes: settings.scale_nodes,
            scale_alive_s: 0.0,
            scale_bytes_per_actor: 0.0,
            scale_marginal_bytes_per_actor: 0.0,
            scale_agents_bytes_per_actor: None,
            scale_agents_marginal_bytes_per_actor: None,
        })
    });
    // Stopped whether the phases went well or not, each on the runtime it runs on.
    let stopped = match agents {
        Agents::Process(_) => client_runtime.block_on(agents.stop()),
        Agents::InProcess(_) => head_runtime.block_on(agents.stop()),
    };
    head_runtime.block_on(head.shutdown());
    drop((client_runtime, head_runtime, dir));
    let mut result = result?;
    stopped?;
    let scale = match &settings.scale_in {
        // The child reports its progress on the stderr it shares.
        Some(program) => scale_in_child(program, settings)?,
        None => run_scale(settings, progress)?,
    };
    result.scale_alive_s = scale.alive_s;
    result.scale_bytes_per_actor = scale.bytes_per_actor;
    result.scale_marginal_bytes_per_actor = scale.marginal_bytes_per_actor;
    result.scale_agents_bytes_per_actor = scale.agents_bytes_per_actor;
    result.scale_agents_marginal_bytes_per_actor = scale.agents_marginal_bytes_per_actor;
    Ok(result)
}

/// `berth bench api`.
pub fn command(args: &BenchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let quick = args.quick;
    let settings = ApiBench {
        actors: args.actors.unwrap_or(if quick { 2_000 } else { 20_000 }),
        burst: if quick { 1_000 } else { 10_000 },
        groups: args.groups.unwrap_or(if quick { 500 } else { 5_000 }),
        nodes: args.nodes.as_ref().and_then(|n| n.first().copied()).unwrap_or(100),
        concurrency: args.concurrency,
        assignment_window: crate::daemon::assignment_window(args.assignment_window)?,
        batch_actors: if quick { 10_000 } else { 100_000 },
        batch_size: 1_000,
        watchers: if quick { 100 } else { 1_000 },
        watched_actors: if quick { 2_000 } else { 20_000 },
        scale_actors: if quick { 10_000 } else { 100_000 },
        scale_nodes: if quick { 100 } else { 1_000 },
        scale_in: None,
        agents_in: None,
    };
    if let Some(case) = &args.case {
        if agents::is_case(case) {
            return agents::run_case(case);
        }
        let exe = std::env::current_exe().context("cannot find this program to run the agents")?;
        let mut settings = ApiBench { agents_in: Some(exe), ..settings };
        apply_scale_case(case, &mut settings)?;
        let scale = run_scale(&settings, &mut |step| eprintln!("{step}…"))?;
        writeln!(out, "{}", serde_json::to_string(&scale)?)?;
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find this program to run phase 6")?;
    // Phase 6 in a process of its own; the agents of phases 1 to 5 too, so that their CPU
    // time is theirs (phase 6 starts its own agents' process).
    let settings = ApiBench { scale_in: Some(exe.clone()), agents_in: Some(exe), ..settings };
    let runs = args.runs.unwrap_or(if quick { 1 } else { 3 });
    if runs == 0 {
        bail!("--runs: must be at least 1");
    }
    let mut results = Vec::with_capacity(runs);
    for run in 1..=runs {
        let result = self::run(&settings, &mut |step| match runs {
            1 => eprintln!("{step}…"),
            _ => eprintln!("run {run} of {runs}: {step}…"),
        })?;
        if args.output == BenchOutput::Json {
            // One object per run, as it ends.
            writeln!(out, "{}", serde_json::to_string(&result)?)?;
        }
        results.push(result);
    }
    if args.output == BenchOutput::Table {
        writeln!(out, "{}", report::render(&results))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watcher_that_cannot_follow_says_why_and_lets_go() {
        // A port nobody listens on: the connection is refused.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let (ready, mut readiness) = tokio::sync::mpsc::channel(1);
        let deadline = Instant::now() + Duration::from_secs(60);
        let base = format!("http://{closed}");
        let ended = watch_team(base, "token".into(), 0, 1, ready, deadline).await;
        let why = readiness.recv().await.expect("told").expect_err("not following");
        assert_eq!(why, format!("{:#}", ended.expect_err("it ends with the error")));
        assert_eq!(readiness.recv().await, None, "and let go of its sender");
    }

    #[test]
    fn an_events_data_line_is_found_wherever_it_is() {
        let event = b"id: 7\nevent: change\ndata: {\"a\":1}";
        assert_eq!(data_line(event), Some(&b" {\"a\":1}"[..]));
        assert_eq!(data_line(b"data:{}\nid: 1"), Some(&b"{}"[..]), "first, then more lines");
        assert_eq!(data_line(b"id: 1\nevent: x"), None);
        assert_eq!(data_line(b": keep-alive"), None);
        assert_eq!(data_line(b"id: 1\nxdata: 2"), None, "only at a line's start");
    }

    #[test]
    fn the_scale_case_carries_phase_6_sizes_and_refuses_bad_ones() {
        let mut settings = ApiBench {
            actors: 1,
            burst: 1,
            groups: 1,
            nodes: 1,
            concurrency: 1,
            assignment_window: berth_head::config::DEFAULT_ASSIGNMENT_WINDOW,
            batch_actors: 1,
            batch_size: 250,
            watchers: 1,
            watched_actors: 1,
            scale_actors: 12_345,
            scale_nodes: 67,
            scale_in: None,
            agents_in: None,
        };
        let case = scale_case(&settings);
        assert_eq!(case, "scale:12345:67:250");
        let mut parsed =
            ApiBench { scale_actors: 1, scale_nodes: 1, batch_size: 1, ..settings.clone() };
        apply_scale_case(&case, &mut parsed).unwrap();
        assert_eq!((parsed.scale_actors, parsed.scale_nodes, parsed.batch_size), (12_345, 67, 250));
        for (bad, words) in [
            ("scale", "scale:ACTORS:NODES:BATCH"),
            ("fill:1:1:1", "scale:ACTORS:NODES:BATCH"),
            ("scale:x:1:1", "ACTORS must be a whole number"),
            ("scale:1:0:1", "NODES must be a whole number of at least 1"),
            ("scale:1:1:-2", "BATCH must be"),
        ] {
            let err = apply_scale_case(bad, &mut settings).unwrap_err().to_string();
            assert!(err.starts_with("--case: ") && err.contains(words), "{bad}: {err}");
        }
    }

    /// Every phase runs end to end on a small cluster: every creation answered 201 (else `run`
    /// fails), every watcher sees each of its actors once and in order, and the figures are
    /// those of the work done.
    #[test]
    fn a_small_run_completes_every_phase() {
        let settings = ApiBench {
            actors: 40,
            burst: 20,
            groups: 10,
            nodes: 3,
            concurrency: 4,
            assignment_window: berth_head::config::DEFAULT_ASSIGNMENT_WINDOW,
            batch_actors: 50,
            batch_size: 20,
            watchers: 4,
            watched_actors: 20,
            scale_actors: 30,
            scale_nodes: 3,
            scale_in: None,
            agents_in: None,
        };
        let mut steps = Vec::new();
        let result = run(&settings, &mut |step| steps.push(step.to_string())).expect("the run");
        assert_eq!(steps.len(), 6, "one step per phase: {steps:?}");
        assert_eq!(result.watchers_complete, 4);
        for rate in [
            result.actors_per_s,
            result.groups_per_s,
            result.batch_actors_per_s,
            result.watched_actors_per_s,
            result.unwatched_actors_per_s,
        ] {
            assert!(rate.is_finite() && rate > 0.0, "{result:?}");
        }
        assert!(result.actor_p50_ms <= result.actor_p99_ms, "{result:?}");
        assert!(0.0 < result.batch_p50_ms && result.batch_p50_ms <= result.batch_p99_ms);
        // The owner's busy time grew during the phases, and a share is at most the phase.
        for load in [result.actor_load, result.batch_load] {
            assert!(load.owner_busy > 0.0 && load.owner_busy <= 1.0, "{result:?}");
            assert!(load.store_busy > 0.0 && load.store_busy <= 1.0, "{result:?}");
            // Each phase's creations were durable: at least one commit, each with writes.
            assert!(load.commits_per_s > 0.0 && load.writes_per_commit >= 1.0, "{result:?}");
            #[cfg(target_os = "linux")]
            assert!(load.cpu.is_some_and(|cpu| cpu.total_us.is_finite() && cpu.head_us >= 0.0));
        }
        assert!(result.scale_alive_s > 0.0, "{result:?}");
        assert!(result.scale_bytes_per_actor.is_finite(), "{result:?}");
        assert!(result.scale_marginal_bytes_per_actor.is_finite(), "{result:?}");
    }
}
