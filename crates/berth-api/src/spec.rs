//! The cluster and request file formats (see `docs/file-formats.md`) and their conversion into
//! core types.
//!
//! Loading a file has two steps, each with its own kind of check:
//!
//! 1. **Parse**: serde-saphyr reads the YAML (or JSON) into the `*File` structs (`parsed`). Serde
//!    checks the shape and every rule a single value can check alone: amounts
//!    ([`Quantity`]'s parser), node IDs, resource names, strategy names, unknown keys.
//!    `serde_path_to_error` records the field path; serde-saphyr gives the line and column.
//! 2. **Build**: the parsed files become a [`Cluster`], a [`SchedulerConfig`] and a
//!    [`Request`] through the core's own constructors, which check the rules that need context
//!    (duplicate node IDs, allocations that must fit, on the instances they name if they do,
//!    GPU amounts, affinity flags). Values that such a rule can reject are wrapped in
//!    [`Located`] so the error can still give a line. The core's errors name their field
//!    relative to what was passed in (`resources.GPU`); `core_path` puts the path of that
//!    thing in the file in front.
//!
//! Every error is an [`InputError`] naming the file, the field path and the rule.
//!
//! One module per concept, each with its unit tests:
//! - this file: the errors ([`InputError`], [`FileKind`], the snippet under a message);
//! - `source`: reading one file and parsing it with the field path recorded;
//! - `parsed`: the files as serde reads them (sections, resource maps, allocations);
//! - `label_maps`: labels, taints, selectors and tolerations, checked entry by entry;
//! - `strategy`: `scheduling_strategy`, its names and map forms;
//! - `located`: [`Located`], a value with the line and column it was written at (8 bytes);
//! - `placement`: [`PlacementSpec`] and [`PlacementGroupSpec`], the typed placement that the
//!   request file, the REST bodies and the head's records share, and the one build of a core
//!   request or group from them (`schema`: their OpenAPI schemas);
//! - `cluster` and `request`: building the cluster file and a request file;
//! - `actors` (`actors:`, `actor:`, ACTOR_AFFINITY), `groups` (`placement_groups:`,
//!   `placement_group:`, PLACEMENT_GROUP), `node_types` (the autoscaler's file),
//!   `profile` (the scheduler profile, into the core's typed `Profile`) and `labels_file`
//!   (`--labels-file`).

mod actors;
mod cluster;
mod groups;
mod label_maps;
mod labels_file;
mod located;
pub mod node_types;
mod parsed;
mod placement;
pub mod profile;
mod request;
mod schema;
mod source;
mod strategy;

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

pub use actors::{actor_spec, AffinityDraft};
pub use cluster::{load_cluster, ClusterSnapshot};
pub use groups::{GroupFallback, GroupStrategyName, SelectorList};
pub use label_maps::{check_taint, label_error_text, selector_error_text};
pub use label_maps::{ByLabelKey, Expression, ExpressionMap, LabelText};
pub use labels_file::{load_labels_file, parse_labels_text};
pub use located::{At, Located};
pub use parsed::{ByResource, FallbackEntry, ResourceMap, ResourceName};
pub use placement::{PlacementGroupSpec, PlacementSpec};
pub use request::{load_request, LoadedRequest, ParsedRequest};
pub use source::Source;
pub use strategy::StrategySpec;

/// Which of the two input files an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// The `--cluster` file.
    Cluster,
    /// The `--request` file.
    Request,
    /// The `--profile` file (read by `explain`, `sim` and the head; checked by [`profile`]).
    Profile,
    /// The `--labels-file` of `berth validate labels`.
    Labels,
    /// The JSON body of a REST call (its "path" is the method and route).
    Body,
    /// The autoscaler's node-types file (`--autoscaler`).
    NodeTypes,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Cluster => "cluster file",
            FileKind::Request => "request file",
            FileKind::Profile => "profile file",
            FileKind::Labels => "labels file",
            FileKind::Body => "request body of",
            FileKind::NodeTypes => "autoscaler file",
        })
    }
}

/// Bad input: the file could not be read, or its content breaks a rule. `berth` exits with
/// status 2 on any of these.
#[derive(Debug, Error)]
pub enum InputError {
    /// The file could not be read (missing, a directory, no permission, not UTF-8).
    #[error("cannot read {kind} {}: {source}", path.display())]
    Read {
        /// Which file.
        kind: FileKind,
        /// The path as given on the command line.
        path: PathBuf,
        /// The operating system's answer.
        source: io::Error,
    },
    /// The file was read but a value in it is invalid.
    #[error("{0}")]
    Invalid(Box<Invalid>),
}

/// One invalid value: where it is and which rule it breaks.
#[derive(Debug)]
pub struct Invalid {
    /// Which file.
    pub kind: FileKind,
    /// The path as given on the command line.
    pub path: PathBuf,
    /// The field path, `nodes[1].resources.GPU`; empty for the document as a whole.
    pub field: String,
    /// The rule broken, as a sentence.
    pub message: String,
    /// Line and column (1-based) when known.
    pub location: Option<(u64, u64)>,
    /// The text of that line, for the snippet under the message.
    pub line_text: Option<String>,
}

impl fmt::Display for Invalid {
    /// `cluster file c.yaml:5:22: nodes[1].resources.CPU: -1 is negative; …`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.path.display())?;
        if let Some((line, column)) = self.location {
            write!(f, ":{line}:{column}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl InputError {
    /// The offending line with a caret under the column, as compilers print it; `None` when
    /// the error has no location.
    pub fn snippet(&self) -> Option<String> {
        let InputError::Invalid(invalid) = self else {
            return None;
        };
        let (line, column) = invalid.location?;
        let text = invalid.line_text.as_deref()?;
        let column = usize::try_from(column).unwrap_or(usize::MAX);
        let (shown, caret_at) = window(text, column);
        let number = line.to_string();
        let gutter = " ".repeat(number.len());
        // Keep tabs as tabs under the line so the caret lines up however the terminal
        // expands them.
        let pad: String = shown
            .chars()
            .take(caret_at.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        Some(format!("{gutter} |\n{number} | {shown}\n{gutter} | {pad}^\n"))
    }
}

/// At most [`SNIPPET_WIDTH`] characters of `text` around `column` (1-based), with `…` where
/// it was cut, and the column of the same character in the result.
fn window(text: &str, column: usize) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= SNIPPET_WIDTH {
        return (text.to_string(), column);
    }
    let start = column.saturating_sub(SNIPPET_WIDTH / 2).min(chars.len() - SNIPPET_WIDTH);
    let end = start + SNIPPET_WIDTH;
    let mut shown = String::new();
    let mut caret_at = column.saturating_sub(start);
    if start > 0 {
        shown.push('…');
        caret_at = caret_at.saturating_add(1);
    }
    shown.extend(&chars[start..end]);
    if end < chars.len() {
        shown.push('…');
    }
    (shown, caret_at)
}

/// The widest source line a snippet shows; longer lines are cut around the column.
const SNIPPET_WIDTH: usize = 80;

/// The field name `Located` reads its inner value from; it shows up in the paths
/// `serde_path_to_error` records and is removed by [`source::field_path`].
const SPANNED_VALUE: &str = "value";

/// Helpers of the unit tests beside each parser.
#[cfg(test)]
mod test_support {
    use serde::de::DeserializeOwned;

    use super::source::Source;
    use super::*;

    pub(super) fn source(kind: FileKind, text: &str) -> Source {
        Source { kind, path: PathBuf::from("test.yaml"), text: text.to_string() }
    }

    pub(super) fn parse_error<T: DeserializeOwned + fmt::Debug>(text: &str) -> Invalid {
        match source(FileKind::Cluster, text).parse::<T>() {
            Err(InputError::Invalid(invalid)) => *invalid,
            other => panic!("expected an invalid-input error, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parsed::ClusterFile;
    use super::test_support::*;
    use super::*;

    #[test]
    fn snippet_points_at_the_column() {
        let err = source(FileKind::Cluster, "a: 1\n  b:\tc: 2\n").invalid("b", "bad", None);
        assert!(err.snippet().is_none(), "no location, no snippet");
        let invalid = parse_error::<ClusterFile>("nodes:\n  - id: a\n\tresources: {}\n");
        let snippet = InputError::Invalid(Box::new(invalid)).snippet().unwrap();
        assert!(snippet.contains("2 |   - id: a\n"), "{snippet}");
    }
}
