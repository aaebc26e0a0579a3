//! What one request costs the head grows at most linearly with what it holds, counted in
//! instructions, not time.
//!
//! For each kind of count a request holds (labels, selector values, bundles…), this test runs
//! itself under Valgrind's callgrind, which counts the instructions spent in [`cost_probe_work`]
//! (the body's scan, its parse, the request document, the owner's creation and decision, the
//! records written) for bodies holding n, 2n and 4n of it, from a seeded generator. Instruction
//! counts are repeatable whatever else the machine does. What is checked: the cost the second
//! doubling adds is at most 2.5 times what the first added (exactly 2 for linear work, 4 for
//! quadratic), so a fixed cost per request cannot hide a quadratic one.
//!
//! Valgrind comes with the test command's packages (`scripts/test`); without it the test fails
//! and says how to install it.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use berth_api::limits::Limits;
use berth_api::rest::{ActorCreate, GroupCreate, TaskSubmit};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::Owner;
use crate::command::AgentCommand;
use crate::http::body_scan;
use crate::metrics::Metrics;
use crate::owner::Command as OwnerCommand;
use crate::work_keys::WorkKeys;
use crate::HeadConfig;

/// The environment variable that makes [`probe`] run one case (`KIND`) and what says where.
const CASE: &str = "BERTH_COST_CASE";

/// The kinds of count, each with its three sizes (n, 2n, 4n, at most the default limit).
const KINDS: [(&str, usize); 8] = [
    ("labels", 16),
    ("values", 64),
    ("expressions", 8),
    ("tolerations", 8),
    ("fallbacks", 4),
    ("bundles", 256),
    ("env", 64),
    ("args", 256),
];

/// A body of kind `kind` holding `n`, from `rng`; and the route it goes to.
fn body(kind: &str, n: usize, rng: &mut ChaCha8Rng) -> (&'static str, Value) {
    let word = |rng: &mut ChaCha8Rng| format!("w{}", rng.random_range(0..1_000_000_000u64));
    let map = |rng: &mut ChaCha8Rng, value: &dyn Fn(&mut ChaCha8Rng) -> String| -> Value {
        Value::Object((0..n).map(|i| (format!("k{i}-{}", word(rng)), json!(value(rng)))).collect())
    };
    let task = |extra: Value| {
        let mut body = json!({"command": "true", "resources": {"CPU": 0.01}});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        ("tasks", body)
    };
    match kind {
        "labels" => {
            let labels = map(rng, &|rng| word(rng));
            ("actors", json!({"command": "sleep", "resources": {"CPU": 0.01}, "labels": labels}))
        }
        "values" => {
            let values: Vec<String> = (0..n).map(|_| word(rng)).collect();
            task(json!({"label_selector": {"zone": format!("!in({})", values.join(","))}}))
        }
        "expressions" => {
            task(json!({"label_selector": map(rng, &|rng| format!("!in({})", word(rng)))}))
        }
        "tolerations" => task(json!({"tolerations": map(rng, &|rng| word(rng))})),
        "fallbacks" => {
            let alternatives: Vec<Value> = (0..n)
                .map(|_| json!({"label_selector": {"zone": format!("in({})", word(rng))}}))
                .collect();
            task(json!({"label_selector": {"zone": "in(none)"}, "fallback_strategy": alternatives}))
        }
        "bundles" => {
            let bundles: Vec<Value> = (0..n)
                .map(|_| json!({"CPU": f64::from(rng.random_range(1..10u32)) / 1000.0}))
                .collect();
            ("placement_groups", json!({"bundles": bundles, "strategy": "PACK"}))
        }
        "env" => task(json!({"env": map(rng, &|rng| word(rng))})),
        "args" => task(json!({"args": (0..n).map(|_| word(rng)).collect::<Vec<_>>()})),
        other => panic!("no cost case {other}"),
    }
}

/// An owner with four nodes of 64 CPUs, as agents register them.
fn owner(dir: &Path) -> Owner {
    let (keys, _) = WorkKeys::load(&berth_store::Snapshot::default());
    let mut owner = Owner::new(HeadConfig::new(dir), Arc::new(Metrics::new()), Arc::new(keys));
    for i in 0..4 {
        let request = berth_api::agent::RegisterRequest {
            node_id: format!("n{i}"),
            address: format!("10.0.0.{i}"),
            resources: [("CPU".into(), "64".into())].into(),
            ..Default::default()
        };
        let reply = tokio::sync::oneshot::channel().0;
        owner.apply(OwnerCommand::Agent(AgentCommand::Register {
            request: Box::new(request),
            reply,
        }));
    }
    let _ = owner.flush();
    owner
}

/// The counted call: [`work`] on one body.
#[inline(never)]
fn cost_probe_work(owner: &mut Owner, seq: u64, route: &str, bytes: &[u8]) {
    work(owner, seq, route, bytes);
}

/// Everything the head does with one creation's body, up to the records it writes.
fn work(owner: &mut Owner, seq: u64, route: &str, bytes: &[u8]) {
    assert!(body_scan::scan(bytes, &Limits::default()).is_none(), "within the limits");
    match route {
        "actors" => {
            let body: ActorCreate = serde_json::from_slice(bytes).unwrap();
            owner.create_actor(seq, body).unwrap();
        }
        "tasks" => {
            let body: TaskSubmit = serde_json::from_slice(bytes).unwrap();
            owner.submit_task(seq, body).unwrap();
        }
        _ => {
            let body: GroupCreate = serde_json::from_slice(bytes).unwrap();
            owner.create_group(seq, body).unwrap();
        }
    }
    owner.retry_waiting();
    std::hint::black_box(owner.flush());
}

/// Run under callgrind by [`each_requests_cost_grows_at_most_linearly`]: one case
/// (`KIND:MULTIPLE`), one body of `MULTIPLE` × n, counted in [`cost_probe_work`].
#[test]
#[ignore = "run by each_requests_cost_grows_at_most_linearly, under callgrind"]
fn probe() {
    let Ok(case) = std::env::var(CASE) else { return };
    let (kind, multiple) = case.split_once(':').expect("KIND:MULTIPLE");
    let (kind, n) = KINDS.iter().find(|(k, _)| *k == kind).copied().expect("a known case");
    let size = n * multiple.parse::<usize>().expect("a multiple");
    let dir = tempfile::tempdir().unwrap();
    // The same seed for every size: the first n of each body's entries are the same.
    let mut rng = ChaCha8Rng::seed_from_u64(58);
    let mut owner = owner(dir.path());
    let (route, warm) = body(kind, n, &mut rng);
    let (_, measured) = body(kind, size, &mut rng);
    // A first creation of the same kind, uncounted: what runs once (first allocations,
    // tables built on first use) is not a request's cost.
    work(&mut owner, 1, route, &serde_json::to_vec(&warm).unwrap());
    cost_probe_work(&mut owner, 2, route, &serde_json::to_vec(&measured).unwrap());
}

#[test]
fn each_requests_cost_grows_at_most_linearly() {
    let valgrind = Command::new("valgrind").arg("--version").output();
    assert!(
        valgrind.is_ok_and(|o| o.status.success()),
        "valgrind is needed to count instructions: apt-get install valgrind (scripts/test does)"
    );
    let me = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    for (kind, n) in KINDS {
        let counts: Vec<u64> = [1, 2, 4]
            .iter()
            .map(|multiple| {
                let out = dir.path().join(format!("{kind}-{multiple}.out"));
                let run = Command::new("valgrind")
                    .args(["--tool=callgrind", "--collect-atstart=no"])
                    .arg("--toggle-collect=*cost_probe_work*")
                    .arg(format!("--callgrind-out-file={}", out.display()))
                    .arg(&me)
                    .args(["--ignored", "--exact", "owner::cost_tests::probe", "--test-threads=1"])
                    .env(CASE, format!("{kind}:{multiple}"))
                    .output()
                    .unwrap();
                assert!(run.status.success(), "{kind}: {}", String::from_utf8_lossy(&run.stderr));
                instructions(&out)
            })
            .collect();
        let (first, second) = (counts[1] - counts[0], counts[2] - counts[1]);
        let ratio = second as f64 / first.max(1) as f64;
        report.push(format!(
            "{kind} ({n}, {}, {}): {counts:?} instructions; the second doubling adds {ratio:.2}× \
             the first",
            2 * n,
            4 * n
        ));
        assert!(ratio <= 2.5, "{kind} grows faster than linearly: {}", report.last().unwrap());
    }
    eprintln!("{}", report.join("\n"));
}

/// The instructions a callgrind profile counted.
fn instructions(out: &Path) -> u64 {
    let text = std::fs::read_to_string(out).unwrap();
    let line = text.lines().find(|l| l.starts_with("summary:")).expect("a summary line");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a count")
}
