//! Model-based property test: random sequences of batches, committed to a real store and to a
//! `BTreeMap` model, must leave the same state, including batches that must change nothing
//! (an invalid op, a stale epoch) and reopening the store between steps. Runs on redb and on a
//! real Redis server.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use berth_store::testutil::RedisServer;
use berth_store::{Batch, Op, RedbStore, RedisStore, Store, StoreError, Table};
use common::entries;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const LONG: Duration = Duration::from_secs(60);

/// One step of a scenario.
#[derive(Debug, Clone)]
enum Step {
    /// A valid batch, committed with the current epoch: the model applies it.
    Commit(Vec<Op>),
    /// The batch plus one invalid op at a random position: refused, nothing changes.
    CommitInvalid(Vec<Op>, usize),
    /// The batch with a stale epoch: fenced, nothing changes.
    CommitStale(Vec<Op>),
    /// Drop the store and open it again (redb: the file; Redis: a new connection).
    Reopen,
}

/// The trivially correct model: one sorted map per table.
type Model = BTreeMap<(Table, String), Vec<u8>>;

fn apply(model: &mut Model, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put { table, key, value } => {
                model.insert((*table, key.clone()), value.clone());
            }
            Op::Delete { table, key } => {
                model.remove(&(*table, key.clone()));
            }
        }
    }
}

fn op() -> impl Strategy<Value = Op> + Clone {
    // A small key space, so puts, overwrites and deletes of the same keys collide often.
    let table = proptest::sample::select(Table::ALL.to_vec());
    let key = (0..6u8).prop_map(|k| format!("k{k}"));
    prop_oneof![
        3 => (table.clone(), key.clone(), proptest::collection::vec(any::<u8>(), 0..12))
            .prop_map(|(table, key, value)| Op::Put { table, key, value }),
        1 => (table, key).prop_map(|(table, key)| Op::Delete { table, key }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let ops = proptest::collection::vec(op(), 0..8);
    prop_oneof![
        6 => ops.clone().prop_map(Step::Commit),
        1 => (ops.clone(), any::<usize>()).prop_map(|(ops, at)| Step::CommitInvalid(ops, at)),
        1 => ops.prop_map(Step::CommitStale),
        1 => Just(Step::Reopen),
    ]
}

fn scenario() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..10)
}

/// Runs one scenario on stores made by `open`, checking the store against the model after
/// every step.
async fn check<S, F, Fut>(steps: Vec<Step>, open: F) -> Result<(), TestCaseError>
where
    S: Store,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    let mut store = open().await;
    // Acquire twice: the first epoch is the stale one.
    let stale = store.acquire_lease("head", LONG).await.expect("lease");
    let lease = store.acquire_lease("head", LONG).await.expect("lease again");
    let mut model = Model::new();
    for step in steps {
        match step {
            Step::Commit(ops) => {
                store.commit(lease.epoch(), Batch::from(ops.clone())).await.expect("valid commit");
                apply(&mut model, &ops);
            }
            Step::CommitInvalid(mut ops, at) => {
                let at = at % (ops.len() + 1);
                ops.insert(at, Op::Delete { table: Table::Tasks, key: String::new() });
                let result = store.commit(lease.epoch(), Batch::from(ops)).await;
                prop_assert!(
                    matches!(result, Err(StoreError::InvalidBatch { index, .. }) if index == at),
                    "{result:?}"
                );
            }
            Step::CommitStale(ops) => {
                let result = store.commit(stale.epoch(), Batch::from(ops)).await;
                prop_assert!(matches!(result, Err(StoreError::Fenced { .. })), "{result:?}");
            }
            Step::Reopen => {
                drop(store);
                store = open().await;
            }
        }
        let expected: Vec<(Table, String, Vec<u8>)> = model
            .iter()
            .map(|((table, key), value)| (*table, key.clone(), value.clone()))
            .collect();
        prop_assert_eq!(entries(&store.load().await.expect("load")), expected);
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn redb_matches_the_model() {
    let runtime = runtime();
    let mut runner = TestRunner::new(Config::default());
    let result = runner.run(&scenario(), |steps| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let open = || async { RedbStore::open(dir.path()).await.unwrap_or_else(|e| panic!("{e}")) };
        runtime.block_on(check(steps, open))
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn redis_matches_the_model() {
    let runtime = runtime();
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let mut runner = TestRunner::new(Config::default());
    let case = AtomicU64::new(0);
    let result = runner.run(&scenario(), |steps| {
        // A fresh namespace per case on the one server.
        let prefix = format!("case-{}", case.fetch_add(1, Ordering::Relaxed));
        let url = server.url();
        let open =
            || async { RedisStore::connect(&url, &prefix).await.unwrap_or_else(|e| panic!("{e}")) };
        runtime.block_on(check(steps, open))
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
