//! Helpers shared by the CLI's end-to-end tests: run the real binary, read its output.
#![allow(dead_code)] // each test file uses a different subset

pub mod cluster;
pub mod proxy;
pub mod work;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

pub fn explain(cluster: &Path, request: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["explain", "--cluster", path(cluster), "--request", path(request)];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_berth")).args(&args).output().expect("the berth binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8 output")
}

/// `--output json` of `request` on `cluster`; asserts exit 0 and nothing on stderr.
pub fn report(cluster: &Path, request: &Path) -> Value {
    let output = explain(cluster, request, &["--output", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}: {}", request.display(), stderr(&output));
    assert!(output.stderr.is_empty(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// The node a placed decision took among `tied`, nodes that score the same: asserted to be one
/// of them, on the attempt's shortlist and the attempt's pick, but not which one, since that is
/// the seeded RNG's stream and no rule's (a different stream picks another, equally right).
pub fn tie_pick(report: &serde_json::Value, attempt: usize, tied: &[&str]) -> String {
    let node = report["decision"]["node"].as_str().unwrap_or_else(|| panic!("placed: {report}"));
    assert!(tied.contains(&node), "{node} is one of the tied {tied:?}");
    let attempt = &report["attempts"][attempt];
    assert_eq!(attempt["chosen"], node, "the attempt's pick is the decision: {attempt}");
    let shortlist = attempt["shortlist"].as_array().expect("a shortlist");
    assert!(shortlist.iter().any(|n| n == node), "{node} is on the shortlist {shortlist:?}");
    node.to_string()
}
