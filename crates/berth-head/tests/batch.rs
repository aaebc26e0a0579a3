//! Batches over REST against a real head: each item checked and answered on its own, in
//! order, with the single endpoint's statuses and fields; what was created is durable (it is
//! there after a crash); and a body that is not a batch is refused as a whole.

use std::time::Duration;

use berth_agent::{SimCluster, SimNode};
use berth_head::{HeadConfig, RunningHead};
use serde_json::{json, Value};

async fn boot(config: &HeadConfig) -> RunningHead {
    berth_head::start(config.clone()).await.unwrap()
}

async fn post(head: &RunningHead, path: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", head.address))
        .bearer_auth(head.token.as_str())
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_item_is_answered_on_its_own_and_the_created_ones_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HeadConfig::new(dir.path());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.heartbeat_timeout = Duration::from_secs(30);
    let head = boot(&config).await;
    let sim = SimCluster::start(
        &head.address.to_string(),
        head.agent_token.as_str(),
        vec![SimNode::new("n1").resource("CPU", "4")],
    )
    .unwrap();
    sim.wait_registered(Duration::from_secs(20)).await.unwrap();

    let tasks = json!({"items": [
        {"command": "true", "resources": {"CPU": 1}},
        {"resources": {"CPU": 1}},
        {"command": "true", "resources": {"CPU": -1}},
        {"command": "true", "resources": {"CPU": 1}, "label_selector": {"zone": "in(a"}},
        "not an object",
        {"command": "true", "resources": {"CPU": 1}, "name": "second"},
    ]});
    let (status, answer) = post(&head, "/api/v1/tasks:batch", &tasks).await;
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().unwrap();
    let statuses: Vec<u64> = items.iter().map(|i| i["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [201, 400, 400, 400, 400, 201], "{answer}");
    assert_eq!(items[1]["error"]["field"], "command", "{answer}");
    assert_eq!(items[2]["error"]["field"], "resources.CPU", "{answer}");
    assert_eq!(items[3]["error"]["field"], "label_selector.zone", "{answer}");
    let created: Vec<String> =
        [0, 5].iter().map(|&i| items[i]["created"]["task_id"].as_str().unwrap().into()).collect();
    assert!(items[0]["created"]["work_key"].is_string(), "the submitter gets the work key");
    assert!(items[1].get("created").is_none());

    // Actors: a name in use is that item's 409, the rest are created.
    let actors = json!({"items": [
        {"command": "sleep", "resources": {"CPU": 0.5}, "name": "one"},
        {"command": "sleep", "resources": {"CPU": 0.5}, "name": "one"},
        {"command": "sleep", "resources": {"CPU": 0.5}, "max_restarts": -2},
        {"command": "sleep", "resources": {"CPU": 0.5}, "unknown": 1},
    ]});
    let (status, answer) = post(&head, "/api/v1/actors:batch", &actors).await;
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().unwrap();
    let statuses: Vec<u64> = items.iter().map(|i| i["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [201, 409, 400, 400], "{answer}");
    assert_eq!(items[2]["error"]["field"], "max_restarts", "{answer}");
    assert_eq!(items[3]["error"]["field"], "unknown", "{answer}");
    let actor = items[0]["created"]["actor_id"].as_str().unwrap().to_string();

    // Not a batch: refused as a whole.
    for (body, field) in [
        (json!({"items": []}), "items"),
        (json!({"items": vec![json!({"command": "x"}); 10_001]}), "items"),
        (json!({"tasks": []}), "tasks"),
    ] {
        let (status, answer) = post(&head, "/api/v1/tasks:batch", &body).await;
        assert_eq!((status, answer["field"].as_str()), (400, Some(field)), "{answer}");
    }

    // Durable before the answer: a crash right after loses none of it.
    head.crash().await;
    drop(sim);
    let head = boot(&config).await;
    let view = head.handle.view();
    for id in &created {
        assert!(view.task(id).is_some(), "{id} survived the crash");
    }
    assert!(view.actor(&actor).is_some());
    assert_eq!(view.actors.len(), 1, "only the created actor");
    head.shutdown().await;
}
