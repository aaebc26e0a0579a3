//! Separate credentials per role, through a real head: an agent token cannot use the REST
//! API, a user token cannot act as an agent, a read token cannot change anything or see the
//! tokens, a revoked or never-issued token is refused; made tokens are stored hashed and
//! survive a restart.

use berth_api::agent::agent_service_client::AgentServiceClient;
use berth_api::agent::RegisterRequest;
use berth_api::rest::{ApiError, ErrorKind, List, Role, TokenCreated, TokenInfo};
use berth_head::{HeadConfig, RunningHead};
use serde_json::json;
use tonic::transport::Channel;

fn config(dir: &std::path::Path) -> HeadConfig {
    let mut config = HeadConfig::new(dir);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config
}

struct Rest {
    http: reqwest::Client,
    base: String,
}

impl Rest {
    fn new(head: &RunningHead) -> Rest {
        Rest { http: reqwest::Client::new(), base: format!("http://{}", head.address) }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut request =
            self.http.request(method, format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(serde_json::Value::Null))
    }
}

/// Registers a node with `token` on the agent protocol; the gRPC code when refused.
async fn register(head: &RunningHead, token: &str) -> Result<(), tonic::Code> {
    let channel =
        Channel::from_shared(format!("http://{}", head.address)).unwrap().connect().await.unwrap();
    let mut request = tonic::Request::new(RegisterRequest {
        node_id: "n1".into(),
        address: "10.0.0.1".into(),
        resources: [("CPU".to_string(), "4".to_string())].into(),
        ..Default::default()
    });
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    AgentServiceClient::new(channel).register(request).await.map(|_| ()).map_err(|s| s.code())
}

fn error_kind(body: &serde_json::Value) -> ErrorKind {
    serde_json::from_value::<ApiError>(body.clone()).expect("an ApiError").error
}

#[tokio::test]
async fn each_role_does_only_its_part() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let head = berth_head::start(config(dir.path())).await.unwrap();
    let rest = Rest::new(&head);
    let (admin, agent) = (head.token.as_str().to_string(), head.agent_token.as_str().to_string());
    assert_eq!(std::fs::read_to_string(dir.path().join("agent-token")).unwrap().trim(), agent);

    // The agent token: the agent protocol yes, the REST API no.
    assert_eq!(register(&head, &agent).await, Ok(()));
    let (status, body) = rest.call(Method::GET, "/api/v1/nodes", &agent, None).await;
    assert_eq!((status, error_kind(&body)), (403, ErrorKind::Forbidden), "{body}");
    assert!(body["message"].as_str().unwrap().contains("agent protocol only"), "{body}");

    // The admin token: the REST API yes, the agent protocol no.
    assert_eq!(register(&head, &admin).await, Err(tonic::Code::PermissionDenied));
    let (status, _) = rest.call(Method::GET, "/api/v1/nodes", &admin, None).await;
    assert_eq!(status, 200);

    // A read token, made by the admin: reads and dry runs, nothing else.
    let (status, made) = rest
        .call(
            Method::POST,
            "/api/v1/tokens",
            &admin,
            Some(json!({"role": "read", "name": "grafana"})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let made: TokenCreated = serde_json::from_value(made).unwrap();
    assert_eq!((made.token.role, made.token.name.as_str()), (Role::Read, "grafana"));
    let read = made.secret.clone();
    assert_eq!(rest.call(Method::GET, "/api/v1/cluster/status", &read, None).await.0, 200);
    let dry = json!({"resources": {"CPU": 1}});
    assert_eq!(rest.call(Method::POST, "/api/v1/explain", &read, Some(dry.clone())).await.0, 200);
    // A read token's dry runs are bounded (a burst of 20, then 10 a second); an admin's not.
    let mut limited = None;
    for _ in 0..200 {
        let (status, body) =
            rest.call(Method::POST, "/api/v1/explain", &read, Some(dry.clone())).await;
        if status != 200 {
            limited = Some((status, body));
            break;
        }
    }
    let (status, body) = limited.expect("a read token's dry runs are rate-limited");
    assert_eq!((status, error_kind(&body)), (429, ErrorKind::TooManyRequests), "{body}");
    assert!(body["message"].as_str().unwrap().contains("10 dry runs a second"), "{body}");
    for _ in 0..40 {
        assert_eq!(
            rest.call(Method::POST, "/api/v1/explain", &admin, Some(dry.clone())).await.0,
            200
        );
    }
    let actor = json!({"command": "sleep", "resources": {"CPU": 1}});
    let (status, body) = rest.call(Method::POST, "/api/v1/actors", &read, Some(actor)).await;
    assert_eq!((status, error_kind(&body)), (403, ErrorKind::Forbidden));
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("read-only token cannot POST /api/v1/actors"));
    assert_eq!(rest.call(Method::GET, "/api/v1/tokens", &read, None).await.0, 403);
    assert_eq!(register(&head, &read).await, Err(tonic::Code::PermissionDenied));
    // The dashboard follows the same rule: a read token views, cannot edit taints.
    assert_eq!(rest.call(Method::GET, "/ui/nodes", &read, None).await.0, 200);

    // The list names every token, never a secret; the file keeps hashes only.
    let (_, list) = rest.call(Method::GET, "/api/v1/tokens", &admin, None).await;
    let list: List<TokenInfo> = serde_json::from_value(list).unwrap();
    let ids: Vec<&str> = list.items.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["admin", "agent", made.token.id.as_str()]);
    let stored = std::fs::read_to_string(dir.path().join("tokens.json")).unwrap();
    assert!(!stored.contains(&read), "tokens.json must not hold a secret");

    // Revoked: refused at once. Never issued: refused. First-start tokens: rotated by file.
    let path = format!("/api/v1/tokens/{}", made.token.id);
    assert_eq!(rest.call(Method::DELETE, &path, &admin, None).await.0, 200);
    let (status, body) = rest.call(Method::GET, "/api/v1/nodes", &read, None).await;
    assert_eq!((status, error_kind(&body)), (401, ErrorKind::Unauthorized));
    assert_eq!(rest.call(Method::GET, "/api/v1/nodes", "never-issued", None).await.0, 401);
    assert_eq!(register(&head, "never-issued").await, Err(tonic::Code::Unauthenticated));
    assert_eq!(rest.call(Method::DELETE, "/api/v1/tokens/admin", &admin, None).await.0, 409);
    assert_eq!(rest.call(Method::DELETE, "/api/v1/tokens/tok-none", &admin, None).await.0, 404);

    // A made agent token survives a restart; the head keeps the same first-start tokens.
    let (_, made) =
        rest.call(Method::POST, "/api/v1/tokens", &admin, Some(json!({"role": "agent"}))).await;
    let rack: TokenCreated = serde_json::from_value(made).unwrap();
    head.shutdown().await;
    let head = berth_head::start(config(dir.path())).await.unwrap();
    assert_eq!(head.token.as_str(), admin);
    assert_eq!(head.agent_token.as_str(), agent);
    assert_eq!(register(&head, &rack.secret).await, Ok(()));
    head.shutdown().await;
}

/// A read token is refused on every route that changes something: every write operation of
/// the OpenAPI document (read from the head, so a route added later is covered by itself) and
/// the dashboard's, each a 403 naming the method and path, and nothing changed.
#[tokio::test]
async fn a_read_token_is_refused_on_every_write_route() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let head = berth_head::start(config(dir.path())).await.unwrap();
    let rest = Rest::new(&head);
    let admin = head.token.as_str().to_string();
    let (status, made) =
        rest.call(Method::POST, "/api/v1/tokens", &admin, Some(json!({"role": "read"}))).await;
    assert_eq!(status, 201, "{made}");
    let read = made["secret"].as_str().unwrap().to_string();
    let (status, document) = rest.call(Method::GET, "/api/v1/openapi.json", &read, None).await;
    assert_eq!(status, 200);
    // What a read token may do besides GET: dry runs and waits, which change nothing; and an
    // actor's endpoint, which its worker registers with the work's own key, whatever token.
    let allowed = [
        "/api/v1/explain",
        "/api/v1/tasks:wait",
        "/api/v1/autoscaler/plan",
        "/api/v1/actors/{id}/endpoint",
    ];
    let mut routes: Vec<(Method, String)> = Vec::new();
    for (path, operations) in document["paths"].as_object().expect("paths") {
        for method in operations.as_object().expect("operations").keys() {
            let method: Method = method.to_uppercase().parse().expect("a method");
            if method == Method::GET || method == Method::HEAD || allowed.contains(&path.as_str()) {
                continue;
            }
            // Path parameters: any value; the refusal comes before the route looks at it.
            let concrete = path
                .split('/')
                .map(|part| if part.starts_with('{') { "x" } else { part })
                .collect::<Vec<_>>()
                .join("/");
            routes.push((method, concrete));
        }
    }
    for (method, path) in [
        (Method::POST, "/ui/nodes/x/taints"),
        (Method::DELETE, "/ui/nodes/x/taints"),
        (Method::POST, "/ui/nodes/x/drain"),
    ] {
        routes.push((method, path.to_string()));
    }
    assert!(routes.len() >= 15, "the document lists the write routes: {routes:?}");
    let before = rest.call(Method::GET, "/api/v1/cluster/status", &admin, None).await.1;
    for (method, path) in &routes {
        let (status, body) = rest.call(method.clone(), path, &read, Some(json!({}))).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        if path.starts_with("/ui/") {
            continue; // The dashboard answers its pages' refusals as HTML.
        }
        assert_eq!(error_kind(&body), ErrorKind::Forbidden, "{method} {path}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        let named = message.contains(&format!("{method} {path}")) || path.contains("/tokens");
        assert!(message.contains("read-only token") && named, "{method} {path}: {body}");
    }
    let after = rest.call(Method::GET, "/api/v1/cluster/status", &admin, None).await.1;
    assert_eq!(before, after, "nothing changed");
    head.shutdown().await;
}
