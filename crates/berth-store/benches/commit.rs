//! Commit throughput of the stores, with and without batching.
//!
//! - `redb_commit/N`: one commit of N puts (256-byte values): commits/s = 1 / time, objects/s
//!   from the throughput line. Shows what group commit buys, as redb fsyncs every commit.
//! - `redb_batch_writer/64_callers`: 64 concurrent single-put writes through a `BatchWriter`.
//! - `redis_commit/N`: the same as `redb_commit` against a local `redis-server` (no
//!   persistence: the cost of the round trip and the Lua script), when one is installed.
//!
//! Run: `cargo bench -p berth-store --bench commit`; medians are in
//! `target/criterion/*/*/new/estimates.json`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_store::testutil::RedisServer;
use berth_store::{
    Batch, BatchWriter, BatchWriterConfig, Epoch, RedbStore, RedisStore, Store, Table,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::runtime::Runtime;

const VALUE_BYTES: usize = 256;
const BATCH_SIZES: [usize; 4] = [1, 10, 100, 1000];
/// Keys rotate within this many, so the table stays the size of a large cluster's.
const KEY_SPACE: u64 = 100_000;
const CALLERS: usize = 64;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// A batch of `size` puts with keys from the rotating counter.
fn batch(size: usize, next_key: &AtomicU64) -> Batch {
    let mut batch = Batch::new();
    for _ in 0..size {
        let key = next_key.fetch_add(1, Ordering::Relaxed) % KEY_SPACE;
        batch.put(Table::Tasks, format!("task-{key:06}"), vec![0xAB; VALUE_BYTES]);
    }
    batch
}

fn commits<S: Store>(
    c: &mut Criterion,
    group_name: &str,
    runtime: &Runtime,
    store: &S,
    epoch: Epoch,
) {
    let next_key = AtomicU64::new(0);
    let mut group = c.benchmark_group(group_name);
    for size in BATCH_SIZES {
        group.throughput(Throughput::Elements(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter_batched(
                || batch(size, &next_key),
                |batch| runtime.block_on(store.commit(epoch, batch)).expect("commit"),
                criterion::BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn redb(c: &mut Criterion) {
    let runtime = runtime();
    // On the project's disk, as a data directory would be (/tmp may be a tmpfs elsewhere).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory");
    let store = runtime.block_on(RedbStore::open(dir.path())).expect("open");
    let lease =
        runtime.block_on(store.acquire_lease("bench", Duration::from_secs(3600))).expect("lease");
    commits(c, "redb_commit", &runtime, &store, lease.epoch());

    let writer = {
        let _guard = runtime.enter();
        Arc::new(BatchWriter::spawn(store.clone(), lease.epoch(), BatchWriterConfig::default()))
    };
    let next_key = Arc::new(AtomicU64::new(0));
    let mut group = c.benchmark_group("redb_batch_writer");
    group.throughput(Throughput::Elements(CALLERS as u64));
    group.bench_function(format!("{CALLERS}_callers"), |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut callers = Vec::with_capacity(CALLERS);
                for _ in 0..CALLERS {
                    let writer = Arc::clone(&writer);
                    let write = batch(1, &next_key);
                    callers.push(tokio::spawn(async move { writer.write(write).await }));
                }
                for caller in callers {
                    caller.await.expect("caller").expect("write");
                }
            });
        });
    });
    group.finish();
    let stats = writer.stats();
    eprintln!(
        "redb_batch_writer: {} writes in {} commits ({:.1} writes per commit)",
        stats.writes,
        stats.commits,
        stats.writes as f64 / stats.commits.max(1) as f64
    );
}

fn redis(c: &mut Criterion) {
    let server = match RedisServer::start() {
        Ok(server) => server,
        Err(e) => {
            eprintln!("redis_commit: skipped: {e}");
            return;
        }
    };
    let runtime = runtime();
    let store = runtime.block_on(RedisStore::connect(&server.url(), "bench")).expect("connect");
    let lease =
        runtime.block_on(store.acquire_lease("bench", Duration::from_secs(3600))).expect("lease");
    commits(c, "redis_commit", &runtime, &store, lease.epoch());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        // Reports go to the workspace's target/criterion, not to a target/ in this crate.
        .output_directory(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../criterion"))
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = redb, redis
}
criterion_main!(benches);
