//! The store's contract, tested the same way on every backend: every test is a generic
//! function over a [`Harness`], instantiated for redb, a real Redis server and a real etcd.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_store::{
    Batch, BatchWriter, BatchWriterConfig, Epoch, Generation, InvalidOp, Operation, Store,
    StoreError, Table,
};
use common::{entries, put, EtcdHarness, Harness, RedbHarness, RedisHarness};

const LONG: Duration = Duration::from_secs(60);

/// Declares each test once per backend: `redb::NAME`, `redis::NAME` and `etcd::NAME`.
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {
        mod redb {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(<super::RedbHarness as super::Harness>::new()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(<super::RedisHarness as super::Harness>::new()).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(<super::EtcdHarness as super::Harness>::new()).await;
                }
            )*
        }
    };
}

on_both_backends!(
    a_new_store_is_empty,
    puts_and_deletes_round_trip,
    an_invalid_op_changes_nothing,
    a_fenced_commit_changes_nothing,
    a_commit_without_a_lease_is_fenced,
    state_and_lease_survive_reopening,
    a_live_lease_keeps_other_holders_out,
    an_expired_lease_is_taken_over_and_the_old_holder_fenced,
    renewal_keeps_the_lease_and_epoch,
    release_lets_a_successor_in_at_once,
    invalid_lease_requests_are_refused,
    group_commit_acknowledges_only_durable_writes_in_few_commits,
    group_commit_refuses_an_invalid_write_alone,
    a_fenced_batch_writer_stays_fenced,
    store_config_opens_the_same_data,
    a_store_behind_what_was_seen_is_refused,
);

async fn a_new_store_is_empty<H: Harness>(harness: H) {
    let store = harness.open().await;
    let snapshot = store.load().await.expect("load");
    assert!(snapshot.is_empty(), "{snapshot:?}");
    for table in Table::ALL {
        assert!(snapshot.table(table).is_empty());
    }
}

async fn puts_and_deletes_round_trip<H: Harness>(harness: H) {
    let store = harness.open().await;
    let lease = store.acquire_lease("head", LONG).await.expect("lease");
    let binary: Vec<u8> = (0..=255).collect();

    let mut first = Batch::new();
    first
        .put(Table::Nodes, "node-b", b"B".to_vec())
        .put(Table::Nodes, "node-a", b"A".to_vec())
        .put(Table::Actors, "actor/ü", binary.clone())
        .put(Table::Tasks, "task-1", Vec::new())
        .put(Table::Groups, "pg-1", b"G".to_vec())
        .put(Table::Meta, "format", b"1".to_vec());
    store.commit(lease.epoch(), first).await.expect("first commit");

    let mut second = Batch::new();
    second
        .put(Table::Nodes, "node-a", b"A2".to_vec()) // overwrite
        .delete(Table::Tasks, "task-1") // delete
        .delete(Table::Tasks, "never-there") // deleting nothing is fine
        .put(Table::Groups, "pg-2", b"x".to_vec()) // put then delete: gone
        .delete(Table::Groups, "pg-2")
        .delete(Table::Groups, "pg-1") // delete then put: there
        .put(Table::Groups, "pg-1", b"G2".to_vec());
    store.commit(lease.epoch(), second).await.expect("second commit");

    let expected = vec![
        (Table::Nodes, "node-a".to_owned(), b"A2".to_vec()),
        (Table::Nodes, "node-b".to_owned(), b"B".to_vec()),
        (Table::Actors, "actor/ü".to_owned(), binary),
        (Table::Groups, "pg-1".to_owned(), b"G2".to_vec()),
        (Table::Meta, "format".to_owned(), b"1".to_vec()),
    ];
    assert_eq!(entries(&store.load().await.expect("load")), expected);
}

async fn an_invalid_op_changes_nothing<H: Harness>(harness: H) {
    let store = harness.open().await;
    let lease = store.acquire_lease("head", LONG).await.expect("lease");
    store.commit(lease.epoch(), put("n1", b"before")).await.expect("commit");
    let before = store.load().await.expect("load");

    let mut batch = Batch::new();
    batch
        .put(Table::Nodes, "n1", b"after".to_vec())
        .put(Table::Tasks, "t1", b"t".to_vec())
        .delete(Table::Actors, "");
    match store.commit(lease.epoch(), batch).await {
        Err(StoreError::InvalidBatch {
            index: 2,
            table: Table::Actors,
            reason: InvalidOp::EmptyKey,
            ..
        }) => {}
        other => panic!("invalid batch not refused: {other:?}"),
    }
    let mut reserved = Batch::new();
    reserved.delete(Table::Nodes, "n1").put(Table::Meta, "berth.store.lease", b"x".to_vec());
    match store.commit(lease.epoch(), reserved).await {
        Err(StoreError::InvalidBatch { index: 1, reason: InvalidOp::ReservedKey, .. }) => {}
        other => panic!("reserved key not refused: {other:?}"),
    }
    assert_eq!(store.load().await.expect("load"), before);
}

async fn a_fenced_commit_changes_nothing<H: Harness>(harness: H) {
    let store = harness.open().await;
    let old = store.acquire_lease("head", LONG).await.expect("lease");
    store.commit(old.epoch(), put("n1", b"old head")).await.expect("commit");
    // The same holder acquiring again (a restarted head) starts a new epoch.
    let new = store.acquire_lease("head", LONG).await.expect("lease again");
    assert_eq!((old.epoch().get(), new.epoch().get()), (1, 2));
    store.commit(new.epoch(), put("n2", b"new head")).await.expect("commit");
    let before = store.load().await.expect("load");

    let mut stale = Batch::new();
    stale.put(Table::Nodes, "n1", b"stale".to_vec()).delete(Table::Nodes, "n2");
    match store.commit(old.epoch(), stale.clone()).await {
        Err(StoreError::Fenced { operation: Operation::Commit, ours, current, .. }) => {
            assert_eq!((ours, current), (old.epoch(), new.epoch()));
        }
        other => panic!("stale commit not fenced: {other:?}"),
    }
    // An epoch never granted is refused too.
    let error = store.commit(Epoch::new(99), stale).await.expect_err("ungranted epoch accepted");
    assert!(error.is_fenced(), "{error}");
    assert_eq!(store.load().await.expect("load"), before);
}

async fn a_commit_without_a_lease_is_fenced<H: Harness>(harness: H) {
    let store = harness.open().await;
    match store.commit(Epoch::new(1), put("n", b"v")).await {
        Err(StoreError::Fenced { current, .. }) => assert_eq!(current, Epoch::new(0)),
        other => panic!("commit without a lease accepted: {other:?}"),
    }
    assert!(store.load().await.expect("load").is_empty());
}

async fn state_and_lease_survive_reopening<H: Harness>(harness: H) {
    let store = harness.open().await;
    let lease = store.acquire_lease("a", LONG).await.expect("lease");
    let mut batch = Batch::new();
    for table in Table::ALL {
        batch.put(table, format!("{table}-1"), table.name().as_bytes().to_vec());
    }
    store.commit(lease.epoch(), batch).await.expect("commit");
    let before = store.load().await.expect("load");
    drop(store);

    let reopened = harness.open().await;
    assert_eq!(reopened.load().await.expect("load after reopening"), before);
    // The lease and its epoch are durable too.
    assert!(matches!(reopened.acquire_lease("b", LONG).await, Err(StoreError::LeaseHeld { .. })));
    reopened.commit(lease.epoch(), put("n", b"v")).await.expect("a's epoch is still current");
    let again = reopened.acquire_lease("a", LONG).await.expect("re-acquire");
    assert_eq!(again.epoch().get(), 2);
}

async fn a_live_lease_keeps_other_holders_out<H: Harness>(harness: H) {
    let store = harness.open().await;
    let a = store.acquire_lease("a", LONG).await.expect("a acquires");
    assert_eq!((a.holder(), a.epoch().get(), a.ttl()), ("a", 1, LONG));
    match store.acquire_lease("b", LONG).await {
        Err(StoreError::LeaseHeld { holder, remaining, .. }) => {
            assert_eq!(holder, "a");
            assert!(remaining > Duration::ZERO && remaining <= LONG, "{remaining:?}");
        }
        other => panic!("b took a live lease: {other:?}"),
    }
    store.commit(a.epoch(), put("n", b"v")).await.expect("a still writes");
}

async fn an_expired_lease_is_taken_over_and_the_old_holder_fenced<H: Harness>(harness: H) {
    let store = harness.open().await;
    let ttl = Duration::from_millis(50);
    let a = store.acquire_lease("a", ttl).await.expect("a acquires");
    store.commit(a.epoch(), put("n", b"a")).await.expect("a writes");

    // Poll the observable state (bounded): b gets in once a's lease has expired.
    let deadline = Instant::now() + Duration::from_secs(5);
    let b = loop {
        match store.acquire_lease("b", LONG).await {
            Ok(lease) => break lease,
            Err(StoreError::LeaseHeld { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("b never got the expired lease: {e}"),
        }
    };
    assert_eq!(b.epoch().get(), 2);

    let fenced = store.commit(a.epoch(), put("n", b"stale")).await.expect_err("a is fenced");
    assert!(fenced.is_fenced(), "{fenced}");
    assert!(store.renew_lease(&a, ttl).await.expect_err("a cannot renew").is_fenced());
    assert!(store.release_lease(&a).await.expect_err("a cannot release").is_fenced());
    store.commit(b.epoch(), put("n", b"b")).await.expect("b writes");
    assert_eq!(store.load().await.expect("load").get(Table::Nodes, "n"), Some(&b"b"[..]));
}

async fn renewal_keeps_the_lease_and_epoch<H: Harness>(harness: H) {
    let store = harness.open().await;
    let a = store.acquire_lease("a", Duration::from_secs(5)).await.expect("acquire");
    let renewed = store.renew_lease(&a, LONG).await.expect("renew");
    assert_eq!((renewed.holder(), renewed.epoch(), renewed.ttl()), ("a", a.epoch(), LONG));
    match store.acquire_lease("b", LONG).await {
        Err(StoreError::LeaseHeld { remaining, .. }) => {
            assert!(remaining > Duration::from_secs(5), "renewal did not extend: {remaining:?}");
        }
        other => panic!("b took a renewed lease: {other:?}"),
    }
    store.commit(renewed.epoch(), put("n", b"v")).await.expect("commit");
}

async fn release_lets_a_successor_in_at_once<H: Harness>(harness: H) {
    let store = harness.open().await;
    let a = store.acquire_lease("a", LONG).await.expect("acquire");
    store.release_lease(&a).await.expect("release");
    let b = store.acquire_lease("b", LONG).await.expect("b acquires at once");
    assert_eq!(b.epoch().get(), 2);
    assert!(store.commit(a.epoch(), put("n", b"v")).await.expect_err("a fenced").is_fenced());
}

async fn invalid_lease_requests_are_refused<H: Harness>(harness: H) {
    let store = harness.open().await;
    for (holder, ttl) in
        [("", LONG), ("a", Duration::ZERO), ("a", Duration::from_secs(365 * 86_400))]
    {
        match store.acquire_lease(holder, ttl).await {
            Err(StoreError::InvalidLeaseRequest { operation: Operation::AcquireLease, .. }) => {}
            other => panic!("{holder:?} {ttl:?}: {other:?}"),
        }
    }
    let a = store.acquire_lease("a", LONG).await.expect("acquire");
    assert!(matches!(
        store.renew_lease(&a, Duration::ZERO).await,
        Err(StoreError::InvalidLeaseRequest { operation: Operation::RenewLease, .. })
    ));
}

async fn group_commit_acknowledges_only_durable_writes_in_few_commits<H: Harness>(harness: H) {
    const CALLERS: usize = 200;
    let store = harness.open().await;
    let lease = store.acquire_lease("head", LONG).await.expect("lease");
    let writer =
        Arc::new(BatchWriter::spawn(store.clone(), lease.epoch(), BatchWriterConfig::default()));

    let mut callers = Vec::with_capacity(CALLERS);
    for i in 0..CALLERS {
        let writer = Arc::clone(&writer);
        let store = store.clone();
        callers.push(tokio::spawn(async move {
            let key = format!("node-{i:03}");
            writer.write(put(&key, key.as_bytes())).await.expect("write");
            // Acknowledged: the write must already be in the store.
            let snapshot = store.load().await.expect("load");
            assert_eq!(
                snapshot.get(Table::Nodes, &key),
                Some(key.as_bytes()),
                "acked before durable"
            );
        }));
    }
    for caller in callers {
        caller.await.expect("caller");
    }
    let writer = Arc::into_inner(writer).expect("every caller is done");
    let stats = writer.close().await;
    assert_eq!((stats.writes, stats.ops), (CALLERS as u64, CALLERS as u64));
    eprintln!("group commit: {} writes in {} commits", stats.writes, stats.commits);
    assert!(stats.commits < (CALLERS / 4) as u64, "group commit did not group: {stats:?}");

    drop(store);
    let reopened = harness.open().await;
    let snapshot = reopened.load().await.expect("load after reopening");
    assert_eq!(snapshot.table(Table::Nodes).len(), CALLERS);
}

async fn group_commit_refuses_an_invalid_write_alone<H: Harness>(harness: H) {
    let store = harness.open().await;
    let lease = store.acquire_lease("head", LONG).await.expect("lease");
    let writer = BatchWriter::spawn(store.clone(), lease.epoch(), BatchWriterConfig::default());
    let (good, bad) = tokio::join!(writer.write(put("good", b"v")), writer.write(put("", b"v")));
    good.expect("the valid write commits");
    assert!(matches!(bad, Err(StoreError::InvalidBatch { .. })), "{bad:?}");
    writer.close().await;
    let snapshot = store.load().await.expect("load");
    assert_eq!(snapshot.get(Table::Nodes, "good"), Some(&b"v"[..]));
    assert_eq!(snapshot.len(), 1);
}

async fn a_fenced_batch_writer_stays_fenced<H: Harness>(harness: H) {
    let store = harness.open().await;
    let old = store.acquire_lease("a", LONG).await.expect("lease");
    let writer = BatchWriter::spawn(store.clone(), old.epoch(), BatchWriterConfig::default());
    writer.write(put("n", b"a")).await.expect("a writes");
    let new = store.acquire_lease("a", LONG).await.expect("a restarted head takes over");
    store.commit(new.epoch(), put("n", b"new")).await.expect("new head writes");

    let first = writer.write(put("n", b"stale")).await.expect_err("stale writer fenced");
    assert!(first.is_fenced(), "{first}");
    let commits = writer.stats().commits;
    let second = writer.write(put("m", b"stale")).await.expect_err("still fenced");
    assert!(second.is_fenced(), "{second}");
    assert_eq!(writer.stats().commits, commits, "a fenced writer touched the store again");
    writer.close().await;

    let snapshot = store.load().await.expect("load");
    assert_eq!(entries(&snapshot), vec![(Table::Nodes, "n".to_owned(), b"new".to_vec())]);
}

async fn store_config_opens_the_same_data<H: Harness>(harness: H) {
    let store = harness.open().await;
    let lease = store.acquire_lease("a", LONG).await.expect("lease");
    store.commit(lease.epoch(), put("n", b"v")).await.expect("commit");
    let before = store.load().await.expect("load");
    drop(store);

    let any = harness.config().open().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(any.load().await.expect("load through AnyStore"), before);
    any.commit(lease.epoch(), put("m", b"w")).await.expect("commit through AnyStore");
    let renewed = any.renew_lease(&lease, LONG).await.expect("renew through AnyStore");
    any.release_lease(&renewed).await.expect("release through AnyStore");
    let next = any.acquire_lease("b", LONG).await.expect("acquire through AnyStore");
    assert_eq!(next.epoch().get(), 2);
    assert_eq!(any.load().await.expect("load").len(), 2);
}

/// A store shows its history ([`Generation`]): an ID and a commit count that only grows. A
/// store object told of a later history (a head's record of its last run) refuses every
/// acquisition, renewal and commit on a store that is behind it, and writes nothing to it.
async fn a_store_behind_what_was_seen_is_refused<H: Harness>(harness: H) {
    let store = harness.open().await;
    let lease = store.acquire_lease("head", LONG).await.expect("lease");
    let first = store.generation().expect("a generation after the acquisition");
    assert!(!first.id.is_empty(), "{first:?}");
    store.commit(lease.epoch(), put("n1", b"1")).await.expect("commit");
    store.commit(lease.epoch(), put("n2", b"2")).await.expect("commit");
    let seen = store.generation().expect("a generation after commits");
    assert_eq!(seen.id, first.id);
    assert!(seen.commits >= first.commits + 2, "{first:?} then {seen:?}");
    let before = store.load().await.expect("load");

    // Another store object (one at a time: redb's file is single-process) that knows of
    // commits this store never took.
    drop(store);
    let ahead = Generation { id: seen.id.clone(), commits: seen.commits + 5 };
    let other = harness.open().await;
    other.expect(Some(ahead.clone()));
    let behind = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::Behind { known, found, .. }) => {
            assert_eq!(known, ahead, "{what}");
            assert_eq!(found.id, seen.id, "{what}");
        }
        other => panic!("{what} on a store behind what was known: {other:?}"),
    };
    behind(other.acquire_lease("standby", LONG).await.map(|_| ()), "acquisition");
    behind(other.commit(lease.epoch(), put("n3", b"3")).await, "commit");
    behind(other.renew_lease(&lease, LONG).await.map(|_| ()), "renewal");
    // One that knows another store altogether.
    other.expect(Some(Generation { id: "another-store".into(), commits: 0 }));
    let refused = other.acquire_lease("head", LONG).await.expect_err("another store's head");
    assert!(refused.is_behind(), "{refused}");
    let message = refused.to_string();
    assert!(message.contains("another-store") && message.contains(&seen.id), "{message}");
    assert_eq!(other.load().await.expect("load"), before, "nothing was written");

    // Knowing what the store shows, the holder goes on; forgetting accepts any store.
    other.expect(Some(seen));
    other.commit(lease.epoch(), put("n3", b"3")).await.expect("the holder goes on");
    other.expect(None);
    let taken = other.acquire_lease("head", LONG).await.expect("accepted as it is");
    assert_eq!(taken.epoch().get(), lease.epoch().get() + 1);
}
