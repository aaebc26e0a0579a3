//! What only the Redis backend has: namespaces on a shared server, server-side errors, and a
//! server that is not there.

mod common;

use std::time::{Duration, Instant};

use berth_store::testutil::{free_port, RedisServer};
use berth_store::{Batch, Store, StoreConfig, StoreError, Table};
use common::{entries, put};

const LONG: Duration = Duration::from_secs(60);

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn prefixes_keep_stores_apart_on_one_server() {
    let server = server();
    let one =
        StoreConfig::parse(&server.store_url("one")).expect("url").open().await.expect("open one");
    let two =
        StoreConfig::parse(&server.store_url("two")).expect("url").open().await.expect("open two");
    let lease_one = one.acquire_lease("head", LONG).await.expect("lease one");
    let lease_two = two.acquire_lease("other-head", LONG).await.expect("separate leases");
    one.commit(lease_one.epoch(), put("n", b"1")).await.expect("commit one");
    two.commit(lease_two.epoch(), put("n", b"2")).await.expect("commit two");
    assert_eq!(
        entries(&one.load().await.expect("load")),
        vec![(Table::Nodes, "n".into(), b"1".to_vec())]
    );
    assert_eq!(
        entries(&two.load().await.expect("load")),
        vec![(Table::Nodes, "n".into(), b"2".to_vec())]
    );
}

#[tokio::test]
async fn a_server_error_mid_script_changes_nothing() {
    let server = server();
    let store = berth_store::RedisStore::connect(&server.url(), "p").await.expect("connect");
    let lease = store.acquire_lease("head", LONG).await.expect("lease");
    store.commit(lease.epoch(), put("n", b"before")).await.expect("commit");

    // Someone else clobbers the tasks hash with a plain string.
    let client = redis::Client::open(server.url()).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect");
    redis::cmd("SET")
        .arg("berth:{p}:tasks")
        .arg("not a hash")
        .exec_async(&mut connection)
        .await
        .expect("SET");

    let mut batch = Batch::new();
    batch.put(Table::Nodes, "n", b"after".to_vec()).put(Table::Tasks, "t", b"t".to_vec());
    let message =
        store.commit(lease.epoch(), batch).await.expect_err("wrong type accepted").to_string();
    assert!(message.contains("(prefix p): commit failed:"), "{message}");
    assert!(message.contains("berth:{p}:tasks holds a string, not a hash"), "{message}");
    redis::cmd("DEL").arg("berth:{p}:tasks").exec_async(&mut connection).await.expect("DEL");
    assert_eq!(
        entries(&store.load().await.expect("load")),
        vec![(Table::Nodes, "n".into(), b"before".to_vec())]
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error_not_a_hang() {
    let port = free_port().expect("free port");
    let input = format!("redis://127.0.0.1:{port}/0?prefix=x");
    let started = Instant::now();
    let error = StoreConfig::parse(&input)
        .expect("valid URL")
        .open()
        .await
        .expect_err("nothing listens there");
    let message = error.to_string();
    let expected = format!("redis at redis://127.0.0.1:{port}/0 (prefix x): open failed:");
    assert!(message.starts_with(&expected), "{message}");
    assert!(matches!(error, StoreError::Backend { .. }));
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_redis_password_never_appears_in_errors() {
    let port = free_port().expect("free port");
    let input = format!("redis://user:hunter2@127.0.0.1:{port}/0?prefix=x");
    let message = StoreConfig::parse(&input)
        .expect("valid URL")
        .open()
        .await
        .expect_err("unreachable")
        .to_string();
    assert!(!message.contains("hunter2"), "{message}");
    assert!(message.contains("redis://user:***@127.0.0.1"), "{message}");
}

/// What Redis replication keeps when the primary dies: a head commits as fast as it can, the
/// primary is killed (SIGKILL) mid-load and its replica promoted (`REPLICAOF NO ONE`, what a
/// failover does). Replication is asynchronous, so writes the primary acknowledged may be
/// missing on the replica: measured and printed. What must hold: the head that wrote them
/// never goes on silently on a replica that misses any (it refuses it as behind), and the
/// replica has everything replicated before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_has_what_was_replicated_and_may_miss_the_last_writes() {
    let primary = server();
    let replica = RedisServer::replica_of(primary.port()).unwrap_or_else(|e| panic!("{e}"));
    let client = redis::Client::open(replica.url()).unwrap();
    let mut replica_connection = client.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut replica_connection)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never linked: {info}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let store = StoreConfig::parse(&primary.store_url("p")).unwrap().open().await.unwrap();
    let lease = store.acquire_lease("head", LONG).await.unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for i in 0..100_000u32 {
                match store.commit(lease.epoch(), put(&format!("n{i}"), b"v")).await {
                    Ok(()) => acknowledged.push(i),
                    Err(_) => break,
                }
            }
            acknowledged
        })
    };
    // Mid-load: the primary dies.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(primary);
    let acknowledged = writer.await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut replica_connection)
        .await
        .unwrap();
    let promoted = StoreConfig::parse(&replica.store_url("p")).unwrap().open().await.unwrap();
    // (Read before the carried-over view below is set: a fresh head's look at the replica.)
    let snapshot = promoted.load().await.unwrap();
    let lost = acknowledged
        .iter()
        .filter(|i| snapshot.get(Table::Nodes, &format!("n{i}")).is_none())
        .count();
    println!(
        "redis primary killed mid-load, replica promoted: {lost} of {} acknowledged commits lost",
        acknowledged.len()
    );
    assert!(acknowledged.len() > 100, "the load ran: {}", acknowledged.len());
    // The head's view of the store, carried over (as a restarted head reads it from its data
    // directory): on the promoted replica it may go on only if nothing it was told is missing.
    let seen = store.generation().expect("the writer saw the store");
    promoted.expect(Some(seen.clone()));
    match promoted.acquire_lease("head", LONG).await {
        Err(StoreError::Behind { found, .. }) => {
            assert!(lost > 0 || found.commits < seen.commits, "refused with nothing lost");
        }
        Ok(_) => assert_eq!(lost, 0, "went on over {lost} lost commits"),
        Err(other) => panic!("{other}"),
    }
}

/// Retries `$call` while the server is coming back (the connection reconnects on the next
/// command after a restart); the first answer that is not a connection error.
macro_rules! once_reachable {
    ($call:expr) => {{
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match $call {
                Err(err) if err.is_transient() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => break other,
            }
        }
    }};
}

/// Two heads on one Redis without persistence, the server killed with SIGKILL and restarted at
/// once: it comes back empty, its epoch counter at 0. Before, the standby took "epoch 1" again
/// and both heads wrote under it. Now: the active head's renewal and commits are refused (the
/// store it wrote to is gone), the standby, which watched the store, refuses to take the empty
/// one over, and a head that knows nothing of it may start it afresh, but the old head's epoch
/// (the same number, 1) stays fenced by its token.
#[tokio::test]
async fn a_redis_restarted_empty_is_refused_and_splits_no_brain() {
    let mut server = server();
    let url = server.store_url("p");
    let open = || async { StoreConfig::parse(&url).expect("url").open().await.expect("open") };
    let active = open().await;
    let standby = open().await;
    let lease = active.acquire_lease("head-a", LONG).await.expect("lease");
    for i in 0..3 {
        active.commit(lease.epoch(), put(&format!("n{i}"), b"v")).await.expect("commit");
    }
    match standby.acquire_lease("head-b", LONG).await {
        Err(StoreError::LeaseHeld { holder, .. }) => assert_eq!(holder, "head-a"),
        other => panic!("the standby took a held lease: {other:?}"),
    }

    server.kill_and_restart().expect("redis restarted");

    let renewal = once_reachable!(active.renew_lease(&lease, LONG).await);
    assert!(renewal.as_ref().is_err_and(StoreError::is_behind), "{renewal:?}");
    let commit = once_reachable!(active.commit(lease.epoch(), put("late", b"v")).await);
    assert!(commit.as_ref().is_err_and(StoreError::is_behind), "{commit:?}");
    let takeover = once_reachable!(standby.acquire_lease("head-b", LONG).await);
    let refused = takeover.expect_err("the standby took an emptied store over");
    assert!(refused.is_behind(), "{refused}");
    assert!(refused.to_string().contains("no ID"), "{refused}");

    let fresh = open().await;
    let new = once_reachable!(fresh.acquire_lease("head-c", LONG).await).expect("a fresh start");
    assert_eq!(new.epoch().get(), lease.epoch().get(), "the counter began again");
    let unaware = open().await;
    let stale = unaware.commit(lease.epoch(), put("stale", b"v")).await;
    assert!(stale.as_ref().is_err_and(StoreError::is_fenced), "{stale:?}");
    assert!(fresh.load().await.expect("load").is_empty(), "nothing of the old head's written");
    fresh.commit(new.epoch(), put("n", b"new")).await.expect("the new head commits");
}

/// With the persistence the head requires (`appendonly yes`, `appendfsync always`), a server
/// killed with SIGKILL and restarted keeps every acknowledged commit, and the head that held
/// the lease goes on with it.
#[tokio::test]
async fn a_durable_redis_keeps_every_acknowledged_commit_across_a_kill() {
    let mut server = RedisServer::start_durable().unwrap_or_else(|e| panic!("{e}"));
    let store = StoreConfig::parse(&server.store_url("p")).unwrap().open().await.unwrap();
    let redis = berth_store::RedisStore::connect(&server.url(), "p").await.unwrap();
    let persistence = redis.persistence().await.expect("CONFIG GET");
    assert!(persistence.is_durable(), "{persistence}");
    let lease = store.acquire_lease("head", LONG).await.unwrap();
    for i in 0..200u32 {
        store.commit(lease.epoch(), put(&format!("n{i}"), b"v")).await.unwrap();
    }
    server.kill_and_restart().expect("redis restarted");
    once_reachable!(store.renew_lease(&lease, LONG).await).expect("the holder renews");
    store.commit(lease.epoch(), put("after", b"v")).await.expect("and commits");
    let snapshot = store.load().await.unwrap();
    let lost = (0..200u32).filter(|i| snapshot.get(Table::Nodes, &format!("n{i}")).is_none());
    assert_eq!(lost.count(), 0);
}

#[tokio::test]
async fn redis_persistence_is_read_from_the_server() {
    let server = server();
    let redis = berth_store::RedisStore::connect(&server.url(), "p").await.unwrap();
    let persistence = redis.persistence().await.expect("CONFIG GET");
    assert_eq!((persistence.appendonly.as_str(), persistence.is_durable()), ("no", false));
    assert_eq!(persistence.to_string(), "appendonly no, appendfsync everysec");
}

/// Kills a durable Redis while commits are in flight, many times: after each restart the store
/// holds at least every commit that was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_redis_killed_mid_commit_keeps_what_it_acknowledged() {
    let mut server = RedisServer::start_durable().unwrap_or_else(|e| panic!("{e}"));
    let store = StoreConfig::parse(&server.store_url("p")).unwrap().open().await.unwrap();
    let lease = store.acquire_lease("head", LONG).await.unwrap();
    for round in 0..5 {
        let writer = {
            let store = store.clone();
            let epoch = lease.epoch();
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0..100_000u32 {
                    match store.commit(epoch, put(&format!("r{round}-{i}"), b"v")).await {
                        Ok(()) => acknowledged.push(i),
                        Err(_) => break,
                    }
                }
                acknowledged
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.kill().unwrap();
        let acknowledged = writer.await.unwrap();
        let seen = store.generation().unwrap();
        server.restart().unwrap();
        let probe = StoreConfig::parse(&server.store_url("p")).unwrap().open().await.unwrap();
        let snapshot = probe.load().await.unwrap();
        let lost = acknowledged
            .iter()
            .filter(|i| snapshot.get(Table::Nodes, &format!("r{round}-{i}")).is_none())
            .count();
        let after = probe.load().await.map(|s| s.len());
        println!(
            "round {round}: {} acknowledged, {lost} lost; seen {seen:?}; probe {after:?}",
            acknowledged.len()
        );
        assert_eq!(lost, 0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        once_reachable!(store.renew_lease(&lease, LONG).await).expect("renewal after the restart");
    }
}
