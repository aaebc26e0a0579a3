//! The live modes of `berth explain`: why an actor, task or placement group of a running head
//! is where it is (or waits), and where a request file would go on the head's cluster now.
//!
//! The offline mode (`--cluster FILE --request FILE`) is `crate::explain`; it hands the other
//! two here.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use berth_api::rest::{Diagnosis, DryRun, Explanation};
use berth_api::spec::{FileKind, InputError, Invalid, ParsedRequest};
use serde_json::Value;

use super::flags::parse_yaml;
use super::view::{self, columns};
use super::{api_path, json_text, write_out, BadInput, ObjectKind};
use crate::explain::{ExplainArgs, Output};

/// `berth explain ID` or `berth explain --request FILE` against the head.
pub fn run(args: &ExplainArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let json = args.output == Output::Json;
    let text = if let Some(id) = &args.id {
        check_id(id)?;
        let client = args.head.client()?;
        let explanation: Explanation = client.get(&api_path(&["explain", id]))?;
        if json {
            json_text(&explanation)?
        } else {
            explanation_text(&explanation)
        }
    } else if let Some(path) = &args.request {
        // Checked here first, with the file's name, line and column, as offline.
        let body = request_document(path)?;
        let client = args.head.client()?;
        let dry_run: DryRun = client.post(&api_path(&["explain"]), Some(&body))?;
        if json {
            json_text(&dry_run)?
        } else {
            dry_run_text(&dry_run, client.address())
        }
    } else {
        return Err(BadInput::new(
            "give an ID, or --request FILE (with --cluster FILE to explain offline)",
        )
        .into());
    };
    write_out(out, &text)
}

fn check_id(id: &str) -> Result<(), BadInput> {
    match ObjectKind::of_prefix(id) {
        Some(_) => Ok(()),
        None => Err(BadInput::new(format!(
            "{id:?} is not an actor, task or placement group ID (actor-12, task-3, pg-7)"
        ))),
    }
}

/// The request file at `path` as a JSON body, after the checks the file format makes alone
/// (those that need the cluster are the head's).
pub fn request_document(path: &Path) -> Result<Value, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        kind: FileKind::Request,
        path: path.to_path_buf(),
        source,
    })?;
    ParsedRequest::parse(FileKind::Request, &path.display().to_string(), text.clone())?;
    parse_yaml(&text).map_err(|err| {
        // The parse above read the same text, so this is not expected; still an input error.
        InputError::Invalid(Box::new(Invalid {
            kind: FileKind::Request,
            path: path.to_path_buf(),
            field: String::new(),
            message: err.to_string(),
            location: None,
            line_text: None,
        }))
    })
}

/// The reasons of a diagnosis, most frequent first.
fn reasons(out: &mut String, diagnosis: &Diagnosis) {
    for hint in &diagnosis.hints {
        let _ = writeln!(out, "hint: {hint}");
    }
    if diagnosis.reasons.is_empty() {
        return;
    }
    out.push_str("\nreasons (nodes rejected for each):\n");
    let rows: Vec<Vec<String>> = diagnosis
        .reasons
        .iter()
        .map(|r| vec![r.count.to_string(), r.text.clone(), format!("({})", r.code)])
        .collect();
    out.push_str(&columns(&[], &rows, 2));
}

/// `actor-12 (actor) PENDING`, the head's sentence, and the reasons.
pub fn explanation_text(e: &Explanation) -> String {
    let kind = e.kind.replace('_', " ");
    let mut out = format!("{} ({kind}) {}", e.id, e.state);
    if let Some(node) = &e.node_id {
        let _ = write!(out, " on {node}");
    }
    out.push('\n');
    let _ = writeln!(out, "{}", e.summary);
    if let Some(diagnosis) = &e.diagnosis {
        if !e.summary.contains(&diagnosis.summary) {
            let word = if diagnosis.infeasible { "infeasible" } else { "pending" };
            let _ = writeln!(out, "{word}: {}", diagnosis.summary);
        }
        reasons(&mut out, diagnosis);
    }
    out
}

/// Where the request would go, or why it would wait.
pub fn dry_run_text(d: &DryRun, address: &str) -> String {
    let mut out = String::new();
    if !d.bundle_nodes.is_empty() {
        let _ = writeln!(out, "{}: the group would be created", d.outcome);
        let rows: Vec<Vec<String>> = d
            .bundle_nodes
            .iter()
            .enumerate()
            .map(|(i, node)| vec![i.to_string(), node.clone()])
            .collect();
        out.push_str(&columns(&["#BUNDLE", "NODE"], &rows, 2));
    } else if let Some(node) = &d.node_id {
        let _ = write!(out, "{}: would go to {node}", d.outcome);
        if !d.instances.is_empty() {
            let _ = write!(out, ", {}", view::instances(&d.instances));
        }
        out.push('\n');
    } else if let Some(diagnosis) = &d.diagnosis {
        let _ = writeln!(out, "{}: {}", d.outcome, diagnosis.summary);
    } else {
        let _ = writeln!(out, "{}", d.outcome);
    }
    if let Some(diagnosis) = &d.diagnosis {
        reasons(&mut out, diagnosis);
    }
    let _ = writeln!(
        out,
        "\n(a dry run on the cluster of the head at {address}: nothing was reserved)"
    );
    out
}

#[cfg(test)]
mod tests {
    use berth_api::rest::ReasonCount;
    use serde_json::json;

    use super::*;

    #[test]
    fn explanation() {
        let e = Explanation {
            id: "actor-3".into(),
            kind: "actor".into(),
            state: "PENDING".into(),
            node_id: None,
            diagnosis: Some(Diagnosis {
                infeasible: true,
                summary: "0/3 nodes can take it now: 3 too little GPU in total".into(),
                hints: Vec::new(),
                reasons: vec![ReasonCount {
                    code: "insufficient_total:GPU".into(),
                    text: "too little GPU in total".into(),
                    count: 3,
                }],
            }),
            summary: "actor-3 is infeasible: no node has 8 GPU".into(),
        };
        let text = explanation_text(&e);
        assert!(text.starts_with("actor-3 (actor) PENDING\nactor-3 is infeasible"), "{text}");
        assert!(text.contains("infeasible: 0/3 nodes"), "{text}");
        assert!(text.contains("  3  too little GPU in total  (insufficient_total:GPU)"), "{text}");
    }

    #[test]
    fn dry_runs() {
        let placed = DryRun {
            outcome: "placed".into(),
            node_id: Some("gpu-2".into()),
            bundle_nodes: vec![],
            instances: [("GPU".to_string(), vec![0])].into(),
            diagnosis: None,
        };
        let text = dry_run_text(&placed, "h:1");
        assert!(text.starts_with("placed: would go to gpu-2, GPU [0]\n"), "{text}");
        assert!(text.contains("nothing was reserved"), "{text}");

        let group = DryRun {
            outcome: "placed".into(),
            node_id: Some("gpu-1".into()),
            bundle_nodes: vec!["gpu-1".into(), "gpu-2".into()],
            instances: Default::default(),
            diagnosis: None,
        };
        let text = dry_run_text(&group, "h:1");
        assert!(text.contains("  BUNDLE  NODE\n       0  gpu-1\n       1  gpu-2\n"), "{text}");
    }

    #[test]
    fn request_files_are_checked_before_sending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.yaml");
        std::fs::write(
            &path,
            "resources: {CPU: 1, GPU: 0.5}\ntolerations: {gpu_node: \"exists()\"}\n",
        )
        .unwrap();
        let body = request_document(&path).unwrap();
        assert_eq!(
            body,
            json!({"resources": {"CPU": 1, "GPU": 0.5}, "tolerations": {"gpu_node": "exists()"}})
        );

        std::fs::write(&path, "resources: {CPU: 1}\nlabel_selector: {zone: \"in()\"}\n").unwrap();
        let err = request_document(&path).unwrap_err().to_string();
        assert!(err.contains("r.yaml") && err.contains("label_selector.zone"), "{err}");

        let err = request_document(&dir.path().join("none.yaml")).unwrap_err().to_string();
        assert!(err.contains("cannot read request file"), "{err}");
    }

    #[test]
    fn ids_are_checked() {
        assert!(check_id("task-1").is_ok());
        assert!(check_id("gpu-1").is_err());
    }
}
