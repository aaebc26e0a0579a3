//! A graceful shutdown: what was sent before it is applied, made durable and answered; what
//! comes after is refused with "shutting down"; nothing acknowledged is lost, and a new head
//! starts on the same data directory at once (the store is closed, the lease released).

use std::time::Duration;

use berth_api::rest::TaskSubmit;
use berth_head::{HeadConfig, HeadError};

fn config(dir: &std::path::Path) -> HeadConfig {
    let mut config = HeadConfig::new(dir);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_interval = Duration::from_millis(20);
    config
}

fn task() -> TaskSubmit {
    TaskSubmit {
        command: "true".into(),
        placement: berth_api::spec::PlacementSpec::from_json(
            serde_json::json!({"resources": {"CPU": 1}}),
        )
        .unwrap(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_what_is_in_flight_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let head = berth_head::start(config(dir.path())).await.unwrap();
    let mut callers = Vec::new();
    for _ in 0..500 {
        let handle = head.handle.clone();
        callers.push(tokio::spawn(async move { handle.submit_task(task()).await }));
    }
    // Some are answered already; the rest are in flight or not sent yet.
    let first = callers.remove(0).await.unwrap().expect("the head serves");
    head.shutdown().await;

    let mut acknowledged = vec![first.task_id];
    let mut refused = 0;
    for caller in callers {
        match caller.await.unwrap() {
            Ok(task) => acknowledged.push(task.task_id),
            Err(HeadError::Unavailable(message)) => {
                assert!(message.contains("shutting down"), "{message}");
                refused += 1;
            }
            Err(other) => panic!("an answer that is neither a task nor a refusal: {other}"),
        }
    }
    assert_eq!(acknowledged.len() + refused, 500, "every caller has an answer");

    // At once on the same directory: nothing acknowledged is missing.
    let head = berth_head::start(config(dir.path())).await.expect("the store was released");
    let view = head.handle.view();
    for id in &acknowledged {
        assert!(view.task(id).is_some(), "{id} was acknowledged but is not in the store");
    }
    head.shutdown().await;
}

#[tokio::test]
async fn run_serves_on_the_callers_listener_until_its_shutdown_future_completes() {
    // The client may ask before the head's start has installed the rustls provider.
    berth_head::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let running = tokio::spawn(berth_head::run(config(dir.path()), listener, shutdown, |_| {}));
    let health = async {
        loop {
            // The listener is bound already: connections queue until the head serves.
            if let Ok(answer) = reqwest::get(format!("http://{address}/healthz")).await {
                return answer.status();
            }
            tokio::task::yield_now().await;
        }
    };
    let status = tokio::time::timeout(Duration::from_secs(20), health).await.expect("it serves");
    assert!(status.is_success(), "{status}");
    stop.send(()).unwrap();
    running.await.unwrap().expect("a clean stop");
    // Stopped for good: the store is free for the next head.
    let head = berth_head::start(config(dir.path())).await.expect("the store was released");
    head.shutdown().await;
}
