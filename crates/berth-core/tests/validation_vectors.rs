//! The shared validation vectors (`tests/vectors/validation.json`): every input there gets
//! the verdict the file records from the functions that implement the rule here, the reference
//! the Python and Java SDKs are held to (their runners read the same file; see the README
//! beside it).

use std::collections::BTreeMap;
use std::path::Path;

use berth_core::actors::{ActorId, ActorSpec, AffinityExpression, AffinityOperator};
use berth_core::labels::{validate_key, validate_value, Labels};
use berth_core::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
use berth_core::selector::{parse_expression, LabelSelector, Tolerations};
use berth_core::{Quantity, Request, ResourceRegistry, ResourceSet, Strategy};
use serde_json::Value;

/// A group's check: its input accepted, or the error's text.
type Check = fn(&Value) -> Result<(), String>;

/// The groups of the file, each with the check that gives its verdict.
const GROUPS: [(&str, Check); 9] = [
    ("label_key", label_key),
    ("label_value", label_value),
    ("actor_label", actor_label),
    ("expression", expression),
    ("selector", selector),
    ("affinity", affinity),
    ("resource_name", resource_name),
    ("amount", amount),
    ("gpu", gpu),
];

fn text(input: &Value) -> &str {
    input.as_str().unwrap_or_else(|| panic!("expected a string input, got {input}"))
}

fn field<'a>(input: &'a Value, name: &str) -> &'a Value {
    input.get(name).unwrap_or_else(|| panic!("{input} has no {name:?}"))
}

fn label_key(input: &Value) -> Result<(), String> {
    validate_key(text(input)).map_err(|e| e.to_string())
}

fn label_value(input: &Value) -> Result<(), String> {
    validate_value("k", text(input)).map_err(|e| e.to_string())
}

/// One label of an actor: the label syntax, and `berth.io/actor-id` is Berth's.
fn actor_label(input: &Value) -> Result<(), String> {
    let (key, value) = (text(field(input, "key")), text(field(input, "value")));
    let labels = Labels::from_pairs([(key, value)]).map_err(|e| e.to_string())?;
    let id = ActorId::new("actor-1").expect("a valid actor ID");
    ActorSpec::new(id, "", labels).map(drop).map_err(|e| e.to_string())
}

/// One selector expression, under the key `k`.
fn expression(input: &Value) -> Result<(), String> {
    parse_expression("k", text(input)).map(drop).map_err(|e| e.to_string())
}

/// A selector (key → expression); tolerations follow the same rules.
fn selector(input: &Value) -> Result<(), String> {
    let map = input.as_object().expect("a selector is an object");
    let pairs: Vec<(&str, &str)> = map.iter().map(|(k, v)| (k.as_str(), text(v))).collect();
    let as_selector = LabelSelector::parse(pairs.iter().copied()).map(drop);
    let as_tolerations = Tolerations::parse(pairs.iter().copied()).map(drop);
    assert_eq!(as_selector, as_tolerations, "selectors and tolerations share their rules");
    as_selector.map_err(|e| e.to_string())
}

/// One actor-affinity expression (seed 000): `{key, operator, values}`.
fn affinity(input: &Value) -> Result<(), String> {
    let key = text(field(input, "key"));
    let operator = text(field(input, "operator"));
    let operator = AffinityOperator::parse(operator).unwrap_or_else(|| panic!("{operator}?"));
    let values = field(input, "values").as_array().expect("values is a list");
    let values = values.iter().map(|v| text(v).to_string()).collect();
    AffinityExpression::new(key, operator, values, false, None).map(drop).map_err(|e| e.to_string())
}

fn resource_name(input: &Value) -> Result<(), String> {
    ResourceRegistry::check_name(text(input)).map_err(|e| e.to_string())
}

/// An amount as a request body carries it: a JSON number or a string, read by `Quantity`'s
/// `Deserialize` (what the head's parser calls), then the request's rules for its resource
/// (`CPU` unless the vector names one).
fn amount(input: &Value) -> Result<(), String> {
    let resource = input.get("resource").map_or("CPU", text);
    let amount = &input["input"];
    place(resource, amount, false)
}

/// A `{resource, amount, in}` where `in` is `request` or `bundle` (of a placement group).
fn gpu(input: &Value) -> Result<(), String> {
    let resource = text(field(input, "resource"));
    let bundle = match text(field(input, "in")) {
        "request" => false,
        "bundle" => true,
        other => panic!("in: {other}?"),
    };
    place(resource, field(input, "amount"), bundle)
}

/// Reads `amount` of `resource` and builds a request (or a one-bundle group) of it against
/// the default registry, where GPU is the only resource shared per instance.
fn place(resource: &str, amount: &Value, bundle: bool) -> Result<(), String> {
    let quantity: Quantity = serde_json::from_value(amount.clone()).map_err(|e| e.to_string())?;
    let mut registry = ResourceRegistry::default();
    let id = registry.intern(resource).map_err(|e| e.to_string())?;
    let resources: ResourceSet = [(id, quantity)].into_iter().collect();
    if !bundle {
        return Request::new(resources, Strategy::Default, &registry)
            .map(drop)
            .map_err(|e| e.to_string());
    }
    let group = GroupSpec {
        id: GroupId::new("g1").expect("a valid group ID"),
        name: String::new(),
        namespace: "default".into(),
        strategy: GroupStrategy::Pack,
        alternatives: vec![BundleSet {
            bundles: vec![resources],
            selectors: vec![],
            unknown: vec![],
        }],
        tolerations: Tolerations::default(),
    };
    group.validate(&registry).map_err(|e| e.to_string())
}

/// Where the vector's verdict differs from the code's, what differs.
fn mismatch(vector: &Value, verdict: &Result<(), String>) -> Option<String> {
    let valid = vector["valid"].as_bool().expect("every vector says valid: true or false");
    match (valid, verdict) {
        (true, Ok(())) => None,
        (true, Err(err)) => Some(format!("expected valid, refused: {err}")),
        (false, Ok(())) => Some("expected an error, accepted".to_string()),
        (false, Err(err)) => {
            let fragment = vector["error"].as_str().expect("an invalid vector names its error");
            (!err.contains(fragment)).then(|| format!("expected {fragment:?} in the error: {err}"))
        }
    }
}

#[test]
fn every_vector_gets_its_verdict() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/validation.json");
    let file: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the vectors file"))
            .expect("the vectors file is JSON");
    let known: Vec<&str> = GROUPS.iter().map(|(name, _)| *name).collect();
    for name in file.keys().filter(|k| *k != "about") {
        assert!(known.contains(&name.as_str()), "group {name:?} has no check here");
    }
    let mut failures = Vec::new();
    let mut counted = 0;
    for (name, check) in GROUPS {
        let vectors = file.get(name).and_then(Value::as_array);
        let vectors = vectors.unwrap_or_else(|| panic!("the file has no group {name:?}"));
        assert!(!vectors.is_empty(), "group {name:?} is empty");
        for (i, vector) in vectors.iter().enumerate() {
            // The amount group's input is the amount itself; its resource sits beside it.
            let input = if name == "amount" { vector } else { &vector["input"] };
            if let Some(problem) = mismatch(vector, &check(input)) {
                failures.push(format!("{name}[{i}] {}: {problem}", vector["input"]));
            }
            counted += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {counted} vectors fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
