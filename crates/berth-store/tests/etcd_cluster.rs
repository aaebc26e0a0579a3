//! The etcd backend on a real three-member cluster: the leader killed while a head commits
//! loses no acknowledged write; commits fail only while a new leader is elected, and the
//! store answers again through the members left.

use std::time::{Duration, Instant};

use berth_store::testutil::EtcdCluster;
use berth_store::{Batch, Store, StoreConfig, Table};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_loses_no_acknowledged_commit() {
    let mut cluster = EtcdCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let store = StoreConfig::parse(&cluster.store_url("chaos")).unwrap().open().await.unwrap();
    let lease = store.acquire_lease("head", Duration::from_secs(30)).await.unwrap();
    let mut acknowledged = Vec::new();
    let (mut errors, mut first_error, mut recovered) = (0u32, None::<Instant>, None::<Instant>);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut slowest = Duration::ZERO;
    for i in 0..300u32 {
        if i == 100 {
            let leader = cluster.leader().expect("a leader");
            cluster.kill(leader);
        }
        let mut batch = Batch::new();
        batch.put(Table::Actors, format!("actor-{i}"), i.to_string().into_bytes());
        // The same write again until it is acknowledged (a commit is idempotent).
        let started = Instant::now();
        loop {
            match store.commit(lease.epoch(), batch.clone()).await {
                Ok(()) => {
                    if first_error.is_some() && recovered.is_none() {
                        recovered = Some(Instant::now());
                    }
                    acknowledged.push(i);
                    slowest = slowest.max(started.elapsed());
                    break;
                }
                Err(err) => {
                    assert!(!err.is_fenced(), "{err}");
                    errors += 1;
                    first_error.get_or_insert_with(Instant::now);
                    assert!(Instant::now() < deadline, "no commit went through: {err}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    let snapshot = store.load().await.unwrap();
    let lost: Vec<u32> = acknowledged
        .iter()
        .copied()
        .filter(|i| snapshot.get(Table::Actors, &format!("actor-{i}")).is_none())
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    // The client moves to the next member by itself: no commit is refused (the docs' "0 failed").
    assert_eq!(errors, 0, "commits refused while the leader was gone");
    let unavailable = match (first_error, recovered) {
        (Some(a), Some(b)) => b - a,
        _ => Duration::ZERO,
    };
    println!(
        "leader killed at commit 100 of 300: 0 of {} acknowledged lost; {errors} failed \
         attempts, unavailable for {unavailable:?}; the slowest commit took {slowest:?}",
        acknowledged.len()
    );
}
