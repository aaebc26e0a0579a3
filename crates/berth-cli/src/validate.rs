//! `berth validate`: checks node labels, label selectors and tolerations exactly as Berth reads
//! them, for people checking their configuration and for scripts.
//!
//! Exit statuses follow grep's convention: 0 when the input is valid (and, given a node, the
//! node satisfies it), 1 when the input is valid but the node does not satisfy it, 2 when the
//! input is invalid (the message on stderr names the key or value and the rule) or the output
//! cannot be written.
//!
//! Key/value lists are read in two forms, told apart by a leading `{`: `k1=v1,k2=v2` (the
//! `--labels` form, [`Labels::parse_list`]) and a JSON object of strings. Selectors and
//! tolerations are JSON objects only, since their expressions hold commas (`in(a,b)`). JSON is
//! read by serde_json; a key given twice and a value that is not a string are errors, as in
//! the cluster and request files.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use berth_core::labels::{LabelError, Labels};
use berth_core::selector::{Condition, LabelSelector, Tolerations};
use clap::{Args, Subcommand};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use berth_api::spec::{self as snapshot, label_error_text, selector_error_text};

/// The flags of `berth validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// What to check.
    #[command(subcommand)]
    pub what: What,
}

/// What `berth validate` checks.
#[derive(Debug, Subcommand)]
pub enum What {
    /// Check node labels and print them normalised: `k1=v1,k2=v2`, sorted by key.
    ///
    /// Labels follow the Kubernetes syntax: a key is an optional DNS-subdomain prefix and `/`,
    /// then a name of 1 to 63 letters, digits, `-`, `_` and `.`, beginning and ending with a
    /// letter or digit; a value is empty or follows the rule of a name. `berth.io/node-id` is
    /// set by Berth and cannot be given.
    ///
    /// Exit status: 0 when valid (the labels are printed on stdout); 2 when not, with a
    /// message on stderr naming the bad key or value and the rule.
    #[command(after_help = "Examples:\n  berth validate labels 'region=us-west1,team=ml'\n  \
                            berth validate labels '{\"region\": \"us-west1\"}'\n  \
                            berth validate labels --labels-file labels.yaml 'team=ml'")]
    Labels(LabelsArgs),

    /// Check a label selector and, with --node-labels, whether a node's labels satisfy it.
    ///
    /// The selector is a JSON object of label key to expression; every key must hold. An
    /// expression is one or more comma-separated conditions: `value`, `!value`,
    /// `in(v1,v2)`, `!in(v1,v2)`, `exists()`, `!exists()` (operators case-insensitive).
    /// The normalised selector is printed on stdout (JSON), then, with --node-labels,
    /// `matches` or `does not match: …` with the first key that fails.
    ///
    /// Exit status (as grep's): 2 when the selector (or --node-labels) is invalid, with a
    /// message on stderr naming the key and the rule. Otherwise 0 without --node-labels; with
    /// it, 0 when the node's labels satisfy the selector and 1 when they do not.
    #[command(after_help = "Examples:\n  \
                            berth validate selector '{\"region\": \"in(us-west,us-east)\"}'\n  \
                            berth validate selector '{\"region\": \"in(us-west,us-east)\"}' \
                            --node-labels '{\"region\": \"us-west\"}'\n  \
                            berth validate selector '{\"gpu\": \"!exists()\"}' --node-labels \
                            'region=us-west,gpu=a100'")]
    Selector(SelectorArgs),

    /// Check tolerations and, with --node-taints, whether they tolerate every taint of a node.
    ///
    /// Tolerations are a JSON object of taint key to expression, in the grammar of selectors
    /// (`{"gpu_node": "exists()"}`, `{"gpu_type": "in(A100)"}`, `{"team": "ml"}`). A taint
    /// `k=v` is tolerated when the tolerations have key `k` and its expression holds for `v`;
    /// a node is tolerated when every one of its taints is. The normalised tolerations are
    /// printed on stdout (JSON), then, with --node-taints, `tolerated` or `not tolerated: …`
    /// with the first taint that is not. (Requests that ask for a rare resource also tolerate
    /// its `berth.io/rare-<resource>` taint without saying so; this check knows no request,
    /// so list that toleration to see it.)
    ///
    /// Exit status (as grep's): 2 when the tolerations (or --node-taints) are invalid, with a
    /// message on stderr naming the key and the rule. Otherwise 0 without --node-taints; with
    /// it, 0 when every taint is tolerated and 1 when one is not.
    #[command(after_help = "Examples:\n  \
                            berth validate tolerations '{\"gpu_node\": \"exists()\"}' \
                            --node-taints '{\"gpu_node\": \"true\"}'\n  \
                            berth validate tolerations '{\"team\": \"ml\"}' --node-taints \
                            'team=ml,memory-pressure=high'")]
    Tolerations(TolerationsArgs),
}

/// `berth validate labels`.
#[derive(Debug, Args)]
pub struct LabelsArgs {
    /// The labels: `k1=v1,k2=v2`, or a JSON object of strings (`{"k1": "v1"}`), told apart by
    /// a leading `{`.
    #[arg(
        value_name = "LABELS",
        required_unless_present = "labels_file",
        allow_hyphen_values = true
    )]
    pub labels: Option<String>,

    /// A YAML file of `key: value` labels (values are strings: quote numbers and booleans).
    ///
    /// Combined with LABELS; where both give a key, LABELS wins.
    #[arg(long, value_name = "FILE")]
    pub labels_file: Option<PathBuf>,
}

/// `berth validate selector`.
#[derive(Debug, Args)]
pub struct SelectorArgs {
    /// The selector: a JSON object of label key to expression, such as
    /// `{"region": "in(us-west,us-east)"}`.
    #[arg(value_name = "SELECTOR")]
    pub selector: String,

    /// A node's labels, to check the selector against: a JSON object of strings, or
    /// `k1=v1,k2=v2`. Give every label the node has, default ones included
    /// (`berth.io/node-id` and the like).
    #[arg(long, value_name = "LABELS", allow_hyphen_values = true)]
    pub node_labels: Option<String>,
}

/// `berth validate tolerations`.
#[derive(Debug, Args)]
pub struct TolerationsArgs {
    /// The tolerations: a JSON object of taint key to expression, such as
    /// `{"gpu_node": "exists()"}`.
    #[arg(value_name = "TOLERATIONS")]
    pub tolerations: String,

    /// A node's taints, to check the tolerations against: a JSON object of strings, or
    /// `k1=v1,k2=v2`.
    #[arg(long, value_name = "TAINTS", allow_hyphen_values = true)]
    pub node_taints: Option<String>,
}

/// Invalid input to `berth validate`: which argument, and what is wrong with it (the key or
/// value and the rule). Exit status 2.
#[derive(Debug, Error)]
#[error("{argument}: {message}")]
pub struct Invalid {
    /// The argument: `labels`, `selector`, `--node-labels`.
    argument: &'static str,
    /// The rule broken, naming the key.
    message: String,
}

fn invalid(argument: &'static str, message: impl Into<String>) -> Invalid {
    Invalid { argument, message: message.into() }
}

/// A check's answer for valid input: whether the node (if one was given) satisfies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid, and satisfied by the node if one was given: exit status 0.
    Holds,
    /// Valid, but the node does not satisfy it: exit status 1.
    Fails,
}

impl Verdict {
    /// The exit status: 0 or 1.
    pub fn status(self) -> u8 {
        match self {
            Verdict::Holds => 0,
            Verdict::Fails => 1,
        }
    }
}

/// Runs the check and writes its answer to `out`. Invalid input comes back as an error
/// ([`Invalid`], or a [`snapshot::InputError`] for the labels file): exit status 2.
pub fn run(args: &ValidateArgs, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let (text, verdict) = match &args.what {
        What::Labels(args) => labels(args)?,
        What::Selector(args) => selector(args)?,
        What::Tolerations(args) => tolerations(args)?,
    };
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write the output")?;
    Ok(verdict)
}

/// `validate labels`: the normalised labels.
fn labels(args: &LabelsArgs) -> anyhow::Result<(String, Verdict)> {
    let from_file = match &args.labels_file {
        Some(path) => snapshot::load_labels_file(path)?,
        None => Labels::new(),
    };
    let given = match &args.labels {
        Some(text) => key_values("labels", "label", text)?,
        None => Labels::new(),
    };
    if given.get(berth_core::labels::NODE_ID).is_some() {
        return Err(invalid("labels", LabelError::ReservedNodeId.to_string()).into());
    }
    Ok((format!("{}\n", from_file.merged_with(&given)), Verdict::Holds))
}

/// `validate selector`: the normalised selector, then whether the node matches.
fn selector(args: &SelectorArgs) -> anyhow::Result<(String, Verdict)> {
    let pairs = json_object("selector", "expression", &args.selector)?;
    let selector = LabelSelector::parse(pairs.iter().map(|(k, v)| (k, v)))
        .map_err(|err| invalid("selector", selector_error_text(&err)))?;
    let mut text = normalised(&selector);
    let Some(node) = &args.node_labels else {
        return Ok((text, Verdict::Holds));
    };
    let labels = key_values("--node-labels", "label", node)?;
    let failed = selector.iter().find_map(|(key, conditions)| {
        let value = labels.get(key);
        conditions.iter().find(|c| !c.holds(value)).map(|c| failure(key, value, c))
    });
    Ok(match failed {
        None => {
            text.push_str("matches\n");
            (text, Verdict::Holds)
        }
        Some(why) => {
            text.push_str(&format!("does not match: {why}\n"));
            (text, Verdict::Fails)
        }
    })
}

/// `validate tolerations`: the normalised tolerations, then whether every taint is tolerated.
fn tolerations(args: &TolerationsArgs) -> anyhow::Result<(String, Verdict)> {
    let pairs = json_object("tolerations", "expression", &args.tolerations)?;
    let tolerations = Tolerations::parse(pairs.iter().map(|(k, v)| (k, v)))
        .map_err(|err| invalid("tolerations", selector_error_text(&err)))?;
    let mut text = normalised(&tolerations.0);
    let Some(node) = &args.node_taints else {
        return Ok((text, Verdict::Holds));
    };
    let taints = key_values("--node-taints", "taint", node)?;
    let failed = taints.iter().find(|(k, v)| !tolerations.tolerates(k, v)).map(|(key, value)| {
        match tolerations.0.iter().find(|(k, _)| *k == key) {
            None => format!("taint {key}={value}: no toleration has the key {key}"),
            Some((_, conditions)) => {
                let condition = conditions.iter().find(|c| !c.holds(Some(value)));
                let expression = condition.map_or_else(String::new, Condition::to_string);
                format!("taint {key}={value}: {value:?} fails {expression}")
            }
        }
    });
    Ok(match failed {
        None => {
            text.push_str("tolerated\n");
            (text, Verdict::Holds)
        }
        Some(why) => {
            text.push_str(&format!("not tolerated: {why}\n"));
            (text, Verdict::Fails)
        }
    })
}

/// Why `condition` fails on a node whose value of `key` is `value`.
fn failure(key: &str, value: Option<&str>, condition: &Condition) -> String {
    match value {
        Some(value) => format!("{key}: the node's value {value:?} fails {condition}"),
        None => format!("{key}: the node has no such label, which {condition} needs"),
    }
}

/// The selector as one line of JSON, keys sorted, each expression in its canonical text.
fn normalised(selector: &LabelSelector) -> String {
    let map: serde_json::Map<String, Value> =
        selector.expressions().map(|(k, e)| (k.to_string(), Value::String(e))).collect();
    format!("{}\n", Value::Object(map))
}

/// Labels or taints (`what`) in either form: `k1=v1,k2=v2` or a JSON object of strings.
fn key_values(argument: &'static str, what: &str, text: &str) -> Result<Labels, Invalid> {
    let labels = if text.trim_start().starts_with('{') {
        // Taints follow the label syntax, so one parser serves both.
        let value = if what == "taint" { "taint value" } else { "label value" };
        Labels::from_pairs(json_object(argument, value, text)?)
    } else {
        Labels::parse_list(text)
    };
    labels.map_err(|err| invalid(argument, list_error_text(what, &err)))
}

/// A [`LabelError`] about a label or taint (`what`).
fn list_error_text(what: &str, err: &LabelError) -> String {
    match err {
        LabelError::NotKeyValue(item) => {
            format!("{what} list item {item:?} is not key=value (write k1=v1,k2=v2)")
        }
        LabelError::Duplicate(key) => format!("{what} key {key:?} is given twice"),
        err => label_error_text(what, err),
    }
}

/// A JSON object whose values are strings (`what` says what each is), in the order given. A
/// key given twice is an error (serde_json's map would keep the last silently).
fn json_object(
    argument: &'static str,
    what: &'static str,
    text: &str,
) -> Result<Vec<(String, String)>, Invalid> {
    let Pairs(pairs) = serde_json::from_str(text).map_err(|err| {
        invalid(
            argument,
            format!("not a JSON object of key to {what} (such as {{\"key\": \"text\"}}): {err}"),
        )
    })?;
    pairs
        .into_iter()
        .map(|(key, value)| match value {
            Value::String(text) => Ok((key, text)),
            other => Err(invalid(
                argument,
                format!(
                    "key {key:?}: expected {} {what} (a string), found {}; write it in quotes",
                    if what.starts_with('e') { "an" } else { "a" },
                    describe(&other)
                ),
            )),
        })
        .collect()
}

/// `the number 4`, `null`, `a list`.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// A JSON object's entries in order, rejecting a key given twice.
struct Pairs(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Pairs, D::Error> {
        struct PairsVisitor;
        impl<'de> Visitor<'de> for PairsVisitor {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut pairs: Vec<(String, Value)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    if pairs.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!("key {key:?} is given twice")));
                    }
                    pairs.push((key, value));
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor)
    }
}
