//! Actor affinity end to end (seed 000): the real binary on the actor examples, placed actors in
//! the cluster file, the symmetric rule, namespaces, bad input in every new field, and
//! determinism.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{example, explain, path, report, stderr, stdout};

/// The JSON report of an example request on the actors example cluster.
fn actors(request: &str) -> Value {
    report(&example("actors-cluster.yaml"), &example(request))
}

/// The table of an example request on the actors example cluster.
fn actors_table(request: &str) -> String {
    let output = explain(&example("actors-cluster.yaml"), &example(request), &[]);
    assert_eq!(output.status.code(), Some(0), "{request}: {}", stderr(&output));
    let text = stdout(&output);
    // The decision is one line however long (scripts read it); the rest fits 100 columns.
    for line in text.lines().skip(1) {
        assert!(line.chars().count() <= 100, "{request}: too wide: {line}");
    }
    text
}

/// Node `name` of the first attempt.
fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["attempts"][0]["nodes"]
        .as_array()
        .expect("nodes is a list")
        .iter()
        .find(|n| n["node"] == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
}

/// The nodes of the first attempt that passed every stage.
fn passed(report: &Value) -> Vec<String> {
    report["attempts"][0]["nodes"]
        .as_array()
        .expect("nodes is a list")
        .iter()
        .filter(|n| n["passed"] == true)
        .map(|n| n["node"].as_str().expect("a name").to_string())
        .collect()
}

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let file = dir.path().join(name);
    std::fs::write(&file, text).expect("temp file written");
    file
}

/// The actors example cluster with `extra` appended (more entries of its `actors:` list).
fn actors_cluster_with(dir: &TempDir, extra: &str) -> PathBuf {
    let base = std::fs::read_to_string(example("actors-cluster.yaml")).expect("the example");
    write(dir, "cluster.yaml", &format!("{base}{extra}"))
}

// ---------------------------------------------------------------------------------------------
// The examples do what their comments say.

#[test]
fn colocate_example_goes_to_the_node_of_the_dc_1_actor() {
    let report = actors("actor-colocate.yaml");
    assert_eq!(report["decision"]["outcome"], "placed");
    assert_eq!(report["decision"]["node"], "node-a1");
    assert_eq!(report["actor"]["id"], "reader-1");
    assert_eq!(report["actor"]["namespace"], "default");
    assert_eq!(report["actor"]["labels"]["app"], "reader");
    assert_eq!(report["attempts"][0]["code"], "actor_affinity");
    assert_eq!(passed(&report), ["node-a1"]);
    for name in ["node-a2", "node-a3", "node-b1", "node-b2", "node-b3"] {
        let excluded = &node(&report, name)["excluded"];
        assert_eq!(excluded["reason"], "actor_affinity:0", "{name}");
        assert_eq!(excluded["text"], "expression 0 (location IN (dc_1)) does not hold", "{name}");
    }
    assert_eq!(node(&report, "node-a1")["actors"], serde_json::json!(["cache-1"]));

    let table = actors_table("actor-colocate.yaml");
    assert!(table.starts_with("placed on node-a1\nactor reader-1, namespace default"), "{table}");
    assert!(table.contains("attempt 1 of 1: ACTOR_AFFINITY\n  expression 0: location IN (dc_1)\n"));
    assert!(table.contains("excluded: expression 0 (location"), "{table}");
    assert!(table.contains("no matching actor"), "{table}");
}

#[test]
fn anti_zone_example_keeps_out_of_the_web_zone_and_off_the_exclusive_node() {
    let report = actors("actor-anti-zone.yaml");
    assert_eq!(report["decision"]["node"], "node-b1");
    assert_eq!(passed(&report), ["node-b1", "node-b2"]);
    for name in ["node-a1", "node-a2", "node-a3"] {
        assert_eq!(node(&report, name)["excluded"]["reason"], "actor_affinity:0", "{name}");
    }
    // The symmetric rule: solo-1's hard anti-affinity guards node-b3.
    let guarded = &node(&report, "node-b3")["excluded"];
    assert_eq!(guarded["reason"], "anti_affinity_guard");
    assert_eq!(
        guarded["text"],
        "kept away by the anti-affinity of solo-1 (berth.io/actor-id DOES_NOT_EXIST)"
    );
    let table = actors_table("actor-anti-zone.yaml");
    assert!(table.contains("per berth.io/availability-zone"), "{table}");
    assert!(table.contains("web-1 on node-a2: app=web"), "the actor across the zone: {table}");
    assert!(table.contains("web-1: app=web"), "the actor on the node itself: {table}");
    // The request's own actor is not its own guard (the cluster after placing records it).
    assert!(!table.contains("web-2 ("), "{table}");
}

#[test]
fn exclusive_example_takes_a_node_without_actors_of_its_namespace() {
    let report = actors("actor-exclusive.yaml");
    assert_eq!(report["decision"]["node"], "node-b2");
    // node-a3 hosts trainer-1, of namespace ml: empty as far as namespace default goes.
    assert_eq!(passed(&report), ["node-a3", "node-b2"]);
    assert_eq!(node(&report, "node-a3")["actors"], serde_json::json!(["trainer-1"]));
    assert_eq!(node(&report, "node-b2")["actors"], serde_json::json!([]), "before the decision");
    let table = actors_table("actor-exclusive.yaml");
    assert!(table.contains("solo-1: berth.io/actor-id=solo-1"), "{table}");
}

#[test]
fn pending_example_waits_for_its_peer() {
    let report = actors("actor-pending.yaml");
    assert_eq!(report["decision"], serde_json::json!({"outcome": "pending"}));
    let attempt = &report["diagnosis"]["attempts"][0];
    assert_eq!(attempt["could_fit_later"], true);
    assert_eq!(attempt["rejected"][0]["reason"], "actor_affinity:0");
    assert_eq!(attempt["rejected"][0]["nodes"], 6);
    assert_eq!(
        attempt["rejected"][0]["text"],
        "hard actor affinity expression 0 (app IN (parameter-server)) fails"
    );
    let table = actors_table("actor-pending.yaml");
    assert!(table.starts_with(
        "pending: ACTOR_AFFINITY: 0/6 nodes can take it now: 6 hard actor affinity expression \
         0 fails\n"
    ));
}

// ---------------------------------------------------------------------------------------------
// Placed actors, the symmetric rule and namespaces.

#[test]
fn an_exclusive_actor_keeps_later_actors_away_but_not_tasks() {
    let dir = TempDir::new().unwrap();
    // solo-2 where actor-exclusive.yaml put it.
    let cluster = actors_cluster_with(
        &dir,
        "  - id: solo-2\n    labels: {app: batch}\n    node: node-b2\n    \
         affinity: [{key: berth.io/actor-id, operator: does_not_exist}]\n",
    );
    let actor = write(&dir, "actor.yaml", "actor: {id: any-1}\nresources: {CPU: 1}\n");
    let report = report(&cluster, &actor);
    for name in ["node-b2", "node-b3"] {
        let excluded = &node(&report, name)["excluded"];
        assert_eq!(excluded["reason"], "anti_affinity_guard", "{name}");
    }
    assert!(node(&report, "node-b2")["excluded"]["text"].as_str().unwrap().contains("solo-2"));
    // A task has no labels for the expression to name: the guard does not apply.
    let task = write(&dir, "task.yaml", "resources: {CPU: 1}\n");
    let report = self::report(&cluster, &task);
    assert!(node(&report, "node-b2")["excluded"].is_null());
    // Nor to an actor of another namespace.
    let other =
        write(&dir, "other.yaml", "actor: {id: any-2, namespace: ml}\nresources: {CPU: 1}\n");
    let report = self::report(&cluster, &other);
    assert!(node(&report, "node-b2")["excluded"].is_null());
}

#[test]
fn affinity_looks_in_the_request_actors_namespace_only() {
    let dir = TempDir::new().unwrap();
    let strategy = "scheduling_strategy:\n  type: ACTOR_AFFINITY\n  expressions:\n    \
                    - {key: app, operator: IN, values: [trainer]}\n";
    let ml = write(
        &dir,
        "ml.yaml",
        &format!("actor: {{id: t2, namespace: ml}}\nresources: {{CPU: 1}}\n{strategy}"),
    );
    let report = report(&example("actors-cluster.yaml"), &ml);
    assert_eq!(report["decision"]["node"], "node-a3");
    let default = write(
        &dir,
        "default.yaml",
        &format!("actor: {{id: t3}}\nresources: {{CPU: 1}}\n{strategy}"),
    );
    let report = self::report(&example("actors-cluster.yaml"), &default);
    assert_eq!(report["decision"]["outcome"], "pending");
    // A task looks in namespace default.
    let task = write(&dir, "task.yaml", &format!("resources: {{CPU: 1}}\n{strategy}"));
    let report = self::report(&example("actors-cluster.yaml"), &task);
    assert_eq!(report["decision"]["outcome"], "pending");
    assert!(report.get("actor").is_none(), "no actor key for a task");
}

#[test]
fn match_any_and_soft_expressions() {
    let dir = TempDir::new().unwrap();
    let any = write(
        &dir,
        "any.yaml",
        "resources: {CPU: 1}\nscheduling_strategy:\n  type: ACTOR_AFFINITY\n  match: any\n  \
         expressions:\n    - {key: location, operator: IN, values: [dc_1]}\n    \
         - {key: location, operator: IN, values: [dc_2]}\n",
    );
    let report = report(&example("actors-cluster.yaml"), &any);
    assert_eq!(passed(&report), ["node-a1", "node-b1"]);
    assert_eq!(node(&report, "node-a2")["excluded"]["reason"], "actor_affinity:any");
    let output = explain(&example("actors-cluster.yaml"), &any, &[]);
    assert!(stdout(&output).contains("match any: at least one hard expression must hold"));

    // A soft expression only scores: every node passes, the dc_2 node wins.
    let soft = write(
        &dir,
        "soft.yaml",
        "resources: {CPU: 1}\nscheduling_strategy:\n  type: ACTOR_AFFINITY\n  expressions:\n    \
         - {key: location, operator: IN, values: [dc_2], soft: true}\n",
    );
    let report = self::report(&example("actors-cluster.yaml"), &soft);
    assert_eq!(report["decision"]["node"], "node-b1");
    assert_eq!(passed(&report).len(), 6, "a soft expression excludes no node");
    let b1 = node(&report, "node-b1");
    assert_eq!(b1["scores"][1]["scorer"], "soft_actor_affinity", "{b1}");
}

#[test]
fn placed_actors_may_hold_resources_and_sit_on_draining_nodes() {
    let dir = TempDir::new().unwrap();
    let cluster = write(
        &dir,
        "cluster.yaml",
        "nodes:\n  - {id: a, resources: {CPU: 4}, state: draining}\n  - {id: b, resources: {CPU: 4}}\n\
         actors:\n  - {id: x, node: a, resources: {CPU: 4}, labels: {app: db}}\n  \
         - {id: y, node: b, resources: {CPU: 3}}\n",
    );
    let request = write(
        &dir,
        "request.yaml",
        "resources: {CPU: 2}\nscheduling_strategy:\n  type: ACTOR_AFFINITY\n  expressions:\n    \
         - {key: app, operator: IN, values: [db]}\n",
    );
    let report = report(&cluster, &request);
    // Next to x, but a is draining; b has 1 CPU left and no db actor: pending.
    assert_eq!(report["decision"]["outcome"], "pending");
    assert_eq!(node(&report, "a")["excluded"]["reason"], "draining");
    assert_eq!(node(&report, "a")["actors"], serde_json::json!(["x"]));
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit status 2, and stderr names the file, the field and the rule.

fn assert_bad(output: &Output, file: &Path, field: &str, rule: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{field}: {err}");
    assert!(output.stdout.is_empty(), "no decision on bad input");
    assert!(err.contains(path(file)), "names the file: {err}");
    assert!(err.contains(&format!(": {field}: ")), "names the field {field}: {err}");
    assert!(err.contains(rule), "states the rule ({rule}): {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_actor_requests_name_the_field() {
    let affinity = |expressions: &str| {
        format!("resources: {{CPU: 1}}\nscheduling_strategy:\n  type: ACTOR_AFFINITY\n  expressions:\n{expressions}")
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (
            affinity("    - {key: app, operator: IN, values: [web]}\n    - {key: app, operator: IN, values: []}\n"),
            "scheduling_strategy.expressions[1].values",
            "IN needs at least one value",
        ),
        (
            affinity("    - {key: app, operator: EXISTS, values: [web]}\n"),
            "scheduling_strategy.expressions[0].values",
            "EXISTS takes no values",
        ),
        (
            affinity("    - {key: app, operator: near, values: [web]}\n"),
            "scheduling_strategy.expressions[0].operator",
            "unknown operator \"near\"",
        ),
        (
            affinity("    - {key: \"bad key\", operator: EXISTS}\n"),
            "scheduling_strategy.expressions[0].key",
            "label key \"bad key\" is invalid",
        ),
        (
            affinity("    - {key: app, operator: IN, values: [\"a b\"]}\n"),
            "scheduling_strategy.expressions[0].values[0]",
            "label value \"a b\" is invalid",
        ),
        (
            affinity("    - {key: app, operator: EXISTS, topology_key: \"no way\"}\n"),
            "scheduling_strategy.expressions[0].topology_key",
            "is invalid",
        ),
        (
            affinity("    - {key: app, operator: EXISTS, soft: yes}\n"),
            "scheduling_strategy.expressions[0].soft",
            "boolean",
        ),
        (
            affinity("    - {key: app, operator: EXISTS, weight: 2}\n"),
            "scheduling_strategy.expressions[0].weight",
            "unknown field",
        ),
        (
            "resources: {CPU: 1}\nscheduling_strategy: {type: ACTOR_AFFINITY, expressions: []}\n".into(),
            "scheduling_strategy.expressions",
            "at least one expression",
        ),
        (
            "resources: {CPU: 1}\nscheduling_strategy: ACTOR_AFFINITY\n".into(),
            "scheduling_strategy",
            "ACTOR_AFFINITY needs expressions",
        ),
        (
            "resources: {CPU: 1}\nscheduling_strategy: {type: actor_affinity, match: some, expressions: [{key: a, operator: EXISTS}]}\n".into(),
            "scheduling_strategy.match",
            "use all or any",
        ),
        (
            "resources: {CPU: 1}\nscheduling_strategy: {type: ACTOR_AFFINITY, on_peer_moved: jump, expressions: [{key: a, operator: EXISTS}]}\n".into(),
            "scheduling_strategy.on_peer_moved",
            "use stay or follow",
        ),
        (
            "resources: {CPU: 1}\nscheduling_strategy: {type: SPREAD, expressions: [{key: a, operator: EXISTS}]}\n".into(),
            "scheduling_strategy",
            "expressions is only allowed with type ACTOR_AFFINITY",
        ),
        (
            "resources: {CPU: 1}\nscheduling_strategy: {type: ACTOR_AFFINITY, soft: true, expressions: [{key: a, operator: EXISTS}]}\n".into(),
            "scheduling_strategy",
            "soft is given per expression",
        ),
        ("resources: {CPU: 1}\nactor: {id: \"a b\"}\n".into(), "actor.id", "actor ID \"a b\" is invalid"),
        ("resources: {CPU: 1}\nactor: {id: \"\"}\n".into(), "actor.id", "not empty"),
        ("resources: {CPU: 1}\nactor: {labels: {a: b}}\n".into(), "actor", "missing field `id`"),
        ("resources: {CPU: 1}\nactor: {id: x, namespace: \"bad ns\"}\n".into(), "actor.namespace", "is invalid"),
        (
            "resources: {CPU: 1}\nactor: {id: x, labels: {berth.io/actor-id: y}}\n".into(),
            "actor.labels.\"berth.io/actor-id\"",
            "set by Berth",
        ),
        ("resources: {CPU: 1}\nactor: {id: x, labels: {version: 1.0}}\n".into(), "actor.labels.version", "write it in quotes"),
        ("resources: {CPU: 1}\nactor: {id: x, role: a}\n".into(), "actor.role", "unknown field"),
        ("resources: {CPU: 1}\nactor: {id: web-1}\n".into(), "actor.id", "already placed on node-a2"),
    ];
    let dir = TempDir::new().unwrap();
    for (text, field, rule) in cases {
        let request = write(&dir, "request.yaml", &text);
        let output = explain(&example("actors-cluster.yaml"), &request, &[]);
        assert_bad(&output, &request, field, rule);
    }
}

#[test]
fn bad_placed_actors_name_the_field() {
    let nodes = "nodes:\n  - {id: a, resources: {CPU: 4, GPU: 2}}\n  \
                 - {id: d, resources: {CPU: 4}, state: dead}\nactors:\n";
    let cases = [
        ("  - {id: x, node: z}\n", "actors[0].node", "there is no node z"),
        ("  - {id: x, node: d}\n", "actors[0].node", "node d is dead"),
        ("  - {id: x, node: a}\n  - {id: x, node: a, namespace: ml}\n", "actors[1].id", "already used by actors[0]"),
        ("  - {id: x}\n", "actors[0]", "missing field `node`"),
        ("  - {id: x, node: a, zone: q}\n", "actors[0].zone", "unknown field"),
        ("  - {id: x, node: a, labels: {app: 1}}\n", "actors[0].labels.app", "write it in quotes"),
        ("  - {id: x, node: a, labels: {app: web}, namespace: \"a/b\"}\n", "actors[0].namespace", "is invalid"),
        (
            "  - {id: x, node: a, labels: {berth.io/actor-id: q}}\n",
            "actors[0].labels.\"berth.io/actor-id\"",
            "set by Berth",
        ),
        (
            "  - {id: x, node: a, affinity: [{key: app, operator: EXISTS}, {key: app, operator: NOT_IN}]}\n",
            "actors[0].affinity[1].values",
            "NOT_IN needs at least one value",
        ),
        ("  - {id: x, node: a, affinity: [{key: app, operator: AWAY}]}\n", "actors[0].affinity[0].operator", "unknown operator"),
        ("  - {id: x, node: a, on_peer_moved: leave}\n", "actors[0].on_peer_moved", "use stay or follow"),
        ("  - {id: x, node: a, resources: {CPU: 8}}\n", "actors[0].resources", "needs 8 CPU, has 4 in total"),
        (
            "  - {id: x, node: a, resources: {CPU: 4}}\n  - {id: y, node: a, resources: {CPU: 1}}\n",
            "actors[1].resources",
            "after the allocations and actors listed before it",
        ),
        ("  - {id: x, node: a, resources: {GPU: 1.5}}\n", "actors[0].resources.GPU", "whole number"),
    ];
    let dir = TempDir::new().unwrap();
    for (actors, field, rule) in cases {
        let cluster = write(&dir, "cluster.yaml", &format!("{nodes}{actors}"));
        let output = explain(&cluster, &example("actor-colocate.yaml"), &[]);
        assert_bad(&output, &cluster, field, rule);
    }
}

// ---------------------------------------------------------------------------------------------
// Determinism.

#[test]
fn the_actor_examples_give_identical_output_every_time() {
    for request in [
        "actor-colocate.yaml",
        "actor-anti-zone.yaml",
        "actor-exclusive.yaml",
        "actor-pending.yaml",
    ] {
        for format in ["table", "json"] {
            let run = || {
                let output = explain(
                    &example("actors-cluster.yaml"),
                    &example(request),
                    &["--output", format, "--seed", "7"],
                );
                assert_eq!(output.status.code(), Some(0), "{request}: {}", stderr(&output));
                output.stdout
            };
            assert_eq!(run(), run(), "{request} {format}");
        }
    }
}
