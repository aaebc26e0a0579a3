//! The labels file (`berth validate labels`, an agent's `--labels-file`).

use super::label_maps::{label_error_text, LabelMap};
use super::located::Located;
use super::source::Source;
use super::{FileKind, InputError};
use berth_core::labels::Labels;
use std::path::Path;

/// Reads a labels file (`berth validate labels --labels-file`): a YAML map of label key to
/// value, user labels only (`berth.io/node-id` is Berth's). A file with nothing in it (or only
/// comments) has no labels.
pub fn load_labels_file(path: &Path) -> Result<Labels, InputError> {
    labels_of(Source::read(FileKind::Labels, path)?)
}

/// Parses the text of a labels file that arrived over the network (an agent's
/// `--labels-file`), with errors naming `name`.
pub fn parse_labels_text(name: &str, text: String) -> Result<Labels, InputError> {
    labels_of(Source::from_text(FileKind::Labels, name, text))
}

pub(super) fn labels_of(source: Source) -> Result<Labels, InputError> {
    if source.is_blank() {
        return Ok(Labels::new());
    }
    let map: Located<LabelMap> = source.parse()?;
    // Checked while parsing; kept for rules the core may add.
    Labels::from_pairs(map.value.pairs())
        .map_err(|err| source.invalid("", label_error_text("label", &err), Some(map.referenced)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labels_file_gives_user_labels_and_names_a_bad_one() {
        let labels = parse_labels_text("l.yaml", "zone: a\ntier: gold\n".into()).unwrap();
        assert_eq!(labels.get("tier"), Some("gold"));
        assert!(parse_labels_text("l.yaml", "# nothing\n".into()).unwrap().is_empty());
        let err = parse_labels_text("l.yaml", "berth.io/node-id: x\n".into()).unwrap_err();
        assert!(err.to_string().contains("berth.io/node-id"), "{err}");
    }
}
