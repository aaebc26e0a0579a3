//! A creation whose answer is lost is sent again with the same idempotency key, and the head
//! creates one object: the CLI's retry through a proxy that cuts the answer of the first
//! attempt (the request reached the head; the client saw the connection die), and the REST
//! API's rules for the key.

mod common;
use common::cluster::{created_id, Cluster};
use common::proxy::Proxy;
use serde_json::Value;

fn count(cluster: &Cluster, what: &str) -> u64 {
    let list = cluster.json(&["list", what]);
    list["total"].as_u64().unwrap_or_else(|| panic!("no total: {list}"))
}

#[test]
fn a_creation_cut_off_before_its_answer_is_retried_and_made_once() {
    let cluster = Cluster::new();
    let (_head, address) = cluster.head(&[]);
    let proxy = Proxy::start(&address);
    let via = proxy.address();
    let cases: [(&[&str], &str, &str); 3] = [
        (&["actor", "create", "--command", "sleep", "--arg", "600"], "actor-", "actors"),
        (&["task", "submit", "--command", "true"], "task-", "tasks"),
        (&["pg", "create", "--bundles", r#"[{"CPU": 1}]"#], "pg-", "placement-groups"),
    ];
    for (args, prefix, list) in cases {
        proxy.lose_answers(1);
        let mut all = args.to_vec();
        all.extend(["--address", &via]);
        let run = cluster.run(&all);
        let stderr = run.stderr.clone();
        assert_eq!(run.code, Some(0), "{}\n{stderr}", run.line);
        let id = created_id(&run.ok(), prefix);
        assert!(stderr.contains("same idempotency key"), "no retry said:\n{stderr}");
        assert_eq!(count(&cluster, list), 1, "{id}: one object");
    }
}

/// The REST API's side: a key twice answers with the first object (header or body field, the
/// same key space); both given must agree; a bad key or a header on a batch is refused naming
/// it.
#[test]
fn the_same_key_twice_answers_with_the_first_object() {
    let cluster = Cluster::new();
    let (_head, address) = cluster.head(&[]);
    let token = std::fs::read_to_string(cluster.file("token")).unwrap();
    berth_head::tls::install_crypto_provider();
    let http = reqwest::blocking::Client::new();
    let post = |path: &str, key: Option<&str>, body: Value| {
        let mut request =
            http.post(format!("http://{address}{path}")).bearer_auth(token.trim()).json(&body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let answer = request.send().unwrap();
        (answer.status().as_u16(), answer.json::<Value>().unwrap())
    };
    let actor = serde_json::json!({"command": "sleep", "args": ["600"], "resources": {}});
    let (status, first) = post("/api/v1/actors", Some("job-7-trainer"), actor.clone());
    assert_eq!(status, 201, "{first}");
    let mut with_field = actor.clone();
    with_field["idempotency_key"] = "job-7-trainer".into();
    let (status, again) = post("/api/v1/actors", None, with_field.clone());
    assert_eq!((status, &again["actor_id"]), (201, &first["actor_id"]), "{again}");
    let (status, again) = post("/api/v1/actors", Some("job-7-trainer"), with_field);
    assert_eq!((status, &again["actor_id"]), (201, &first["actor_id"]), "{again}");
    assert_eq!(count(&cluster, "actors"), 1);
    // Keys are per kind: a task may use the same one.
    let task = serde_json::json!({"command": "true", "resources": {}});
    let (status, made) = post("/api/v1/tasks", Some("job-7-trainer"), task);
    assert_eq!(status, 201, "{made}");

    let mut other = actor.clone();
    other["idempotency_key"] = "one".into();
    let (status, refused) = post("/api/v1/actors", Some("two"), other);
    assert_eq!((status, &refused["field"]), (400, &Value::from("idempotency_key")), "{refused}");
    let (status, refused) = post("/api/v1/actors", Some("a key with spaces"), actor.clone());
    assert_eq!((status, &refused["field"]), (400, &Value::from("idempotency_key")), "{refused}");
    let long = "k".repeat(256);
    let (status, refused) = post("/api/v1/actors", Some(&long), actor.clone());
    assert_eq!(status, 400, "{refused}");
    let batch = serde_json::json!({"items": [actor]});
    let (status, refused) = post("/api/v1/actors:batch", Some("b"), batch);
    assert_eq!((status, &refused["field"]), (400, &Value::from("Idempotency-Key")), "{refused}");
    assert_eq!(count(&cluster, "actors"), 1);

    // Items of a batch carry their own keys.
    let mut keyed = serde_json::json!({"command": "sleep", "args": ["600"], "resources": {}});
    keyed["idempotency_key"] = "item-1".into();
    let batch = serde_json::json!({"items": [keyed.clone(), keyed]});
    let (status, answer) = post("/api/v1/actors:batch", None, batch);
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().unwrap();
    let ids: Vec<&Value> = items.iter().map(|item| &item["created"]["actor_id"]).collect();
    assert_eq!(ids[0], ids[1], "{answer}");
    assert_eq!(count(&cluster, "actors"), 2);
}
