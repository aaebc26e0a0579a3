//! `berth label NODE KEY=VALUE… KEY-…`: change a running node's labels (kubectl's form).

use std::io::Write;

use berth_api::rest::{LabelKeysBody, LabelsBody, Node, StringMap};
use clap::Args;

use super::view;
use super::{api_path, json_text, write_out, BadInput, HeadArgs, Output, OutputArgs};

/// The flags of `berth label`.
#[derive(Debug, Args)]
pub struct LabelArgs {
    /// The node, by ID or IP address.
    #[arg(value_name = "NODE")]
    pub node: String,

    /// `key=value` sets a label (adds it or changes its value); `key-` removes one.
    #[arg(value_name = "CHANGE", required = true)]
    pub changes: Vec<String>,

    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The labels to set and the keys to remove.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// Key to value.
    pub set: StringMap,
    /// Keys.
    pub remove: Vec<String>,
}

/// Reads the changes; a key given twice with two meanings is an error.
pub fn change(changes: &[String]) -> Result<Change, BadInput> {
    let mut out = Change::default();
    for item in changes {
        let item = item.trim();
        let (key, value) = match item.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value.trim())),
            None => match item.strip_suffix('-') {
                Some(key) => (key.trim(), None),
                None => {
                    return Err(BadInput::new(format!(
                        "{item:?}: expected key=value (set) or key- (remove)"
                    )))
                }
            },
        };
        if key.is_empty() {
            return Err(BadInput::new(format!("{item:?}: the label key is empty")));
        }
        let earlier = out.set.get(key).map(String::as_str);
        let removed = out.remove.iter().any(|k| k == key);
        match value {
            Some(value) if removed || earlier.is_some_and(|v| v != value) => {
                return Err(BadInput::new(format!("{key} is given twice")))
            }
            Some(value) => {
                out.set.insert(key.to_string(), value.to_string());
            }
            None if earlier.is_some() => {
                return Err(BadInput::new(format!("{key} is given twice")))
            }
            None if !removed => out.remove.push(key.to_string()),
            None => {}
        }
    }
    Ok(out)
}

/// Sends the changes (labels set first, then removed) and prints the node's labels after.
pub fn run(args: &LabelArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let change = change(&args.changes)?;
    let client = args.head.client()?;
    let path = api_path(&["nodes", &args.node, "labels"]);
    let mut node: Option<Node> = None;
    if !change.set.is_empty() {
        node = Some(client.post(&path, Some(&LabelsBody(change.set)))?);
    }
    if !change.remove.is_empty() {
        node = Some(client.delete(&path, Some(&LabelKeysBody(change.remove)))?);
    }
    let node = node.expect("at least one change: clap requires one and change() keeps it");
    let text = match args.output.output {
        Output::Json => json_text(&node)?,
        Output::Table => render(&node),
    };
    write_out(out, &text)
}

/// `node gpu-1 (10.0.0.3) labels: gpu_type=A100,berth.io/accelerator-type=nvidia-a100`.
pub fn render(node: &Node) -> String {
    let labels = view::node_labels(&node.labels);
    let labels = if labels.is_empty() { "none".to_string() } else { labels };
    format!("node {} ({}) labels: {labels}\n", node.node_id, node.address)
}

#[cfg(test)]
mod tests {
    use super::super::view::fixtures;
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sets_and_removals() {
        let got = change(&strings(&["zone=a", "tier = gold", "team-", "team-"])).unwrap();
        assert_eq!(got.set, fixtures::map(&[("tier", "gold"), ("zone", "a")]));
        assert_eq!(got.remove, ["team"]);
        // An empty value is a value (the head judges it).
        assert_eq!(change(&strings(&["empty="])).unwrap().set, fixtures::map(&[("empty", "")]));
    }

    #[test]
    fn bad_forms_name_the_item() {
        for (items, want) in [
            (&["zone"][..], "expected key=value (set) or key- (remove)"),
            (&["=a"][..], "the label key is empty"),
            (&["-"][..], "the label key is empty"),
            (&["zone=a", "zone=b"][..], "zone is given twice"),
            (&["zone=a", "zone-"][..], "zone is given twice"),
            (&["zone-", "zone=a"][..], "zone is given twice"),
        ] {
            let err = change(&strings(items)).unwrap_err();
            assert!(err.0.contains(want), "{items:?}: {err}");
        }
    }

    #[test]
    fn shows_the_labels_after() {
        let text = render(&fixtures::node());
        assert!(text.starts_with("node gpu-1 (10.0.0.3) labels: "), "{text}");
        assert!(!text.contains("berth.io/node-id"), "{text}");
    }
}
