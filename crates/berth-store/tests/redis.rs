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
