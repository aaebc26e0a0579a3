//! Reading and parsing one file: its text kept for error snippets, YAML or JSON through
//! serde with the field path recorded, and the paths of the errors.

use super::located::At;
use super::Invalid;
use super::{FileKind, InputError, SPANNED_VALUE};
use serde::de::DeserializeOwned;
use serde_saphyr::MessageFormatter;
use serde_saphyr::NonFiniteFloatPolicy;
use std::path::{Path, PathBuf};

/// What errors name: one input file (its text kept for error snippets), or a REST body.
#[derive(Debug)]
pub struct Source {
    pub(super) kind: FileKind,
    pub(super) path: PathBuf,
    pub(super) text: String,
}

impl Source {
    /// A REST body of `route` (`POST /api/v1/actors`), read already: its errors name the
    /// field alone.
    pub fn body(route: &str) -> Source {
        Source { kind: FileKind::Body, path: PathBuf::from(route), text: String::new() }
    }

    pub(super) fn from_text(kind: FileKind, name: &str, text: String) -> Source {
        Source { kind, path: PathBuf::from(name), text }
    }

    pub(super) fn read(kind: FileKind, path: &Path) -> Result<Source, InputError> {
        let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
            kind,
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Source { kind, path: path.to_path_buf(), text })
    }

    /// True when the file has nothing but blank lines and comments.
    pub(super) fn is_blank(&self) -> bool {
        self.text.lines().all(|line| {
            let line = line.trim();
            line.is_empty() || line.starts_with('#')
        })
    }

    /// Parses the whole file as one YAML document (JSON is YAML too). A REST body is JSON by
    /// construction and is read by serde_json, several times faster than a YAML parser: the
    /// same types, rules and field paths (`Located` values carry no location then).
    pub(super) fn parse<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        if self.kind == FileKind::Body {
            return self.parse_json();
        }
        if self.is_blank() {
            // The parser would say "unexpected end of file", which does not say what to write.
            return Err(self.invalid(
                "",
                "the file is empty; expected a mapping (see docs/file-formats.md)",
                None,
            ));
        }
        let options = serde_saphyr::options! {
            // Only `true`/`false` are booleans: `avoid_gpu_nodes: no` is an error, not a
            // silent YAML 1.1 `false` (and a resource named `y` stays a name).
            strict_booleans: true,
            // `.nan` and `.inf` reach the amount parser as text, which rejects them with
            // the amount rule rather than a parser-policy message.
            non_finite_float_policy: NonFiniteFloatPolicy::AsString,
        };
        let mut field = String::new();
        let parsed = serde_saphyr::with_deserializer_from_str_with_options(
            &self.text,
            options,
            |deserializer| {
                serde_path_to_error::deserialize(deserializer).map_err(|err| {
                    field = field_path(err.path());
                    err.into_inner()
                })
            },
        );
        parsed.map_err(|err| {
            // The user-facing formatter words messages for people who write YAML rather than
            // Rust ("null is not allowed here", not "use Option<String>").
            let message = serde_saphyr::UserMessageFormatter.format_message(&err);
            self.invalid(field, message.into_owned(), err.location().map(At::from))
        })
    }

    pub(super) fn parse_json<T: DeserializeOwned>(&self) -> Result<T, InputError> {
        // Tracking the path allocates a string per key read, and the head parses a document
        // for every actor, task and group it creates (4 % of `bench api`'s batch phase,
        // `perf`), almost all of them good: parsed without it first; a document that fails is
        // parsed again, by the same parser (so it fails the same way), to name the field.
        if let Ok(parsed) = serde_json::from_str::<T>(&self.text) {
            return Ok(parsed);
        }
        let mut deserializer = serde_json::Deserializer::from_str(&self.text);
        let strip = |err: &serde_json::Error| {
            // serde_json appends " at line 1 column 42" to every message: the field says where.
            let message = err.to_string();
            match message.rfind(" at line ") {
                Some(cut) if err.line() > 0 => message[..cut].to_string(),
                _ => message,
            }
        };
        let parsed: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
            let field = json_path(err.path());
            self.invalid(field, strip(err.inner()), None)
        })?;
        deserializer.end().map_err(|err| self.invalid("", strip(&err), None))?;
        Ok(parsed)
    }

    /// An error at `field`, pointing at `location` when it is known.
    pub(super) fn invalid(
        &self,
        field: impl Into<String>,
        message: impl Into<String>,
        location: Option<At>,
    ) -> InputError {
        let location = location.filter(|l| l.line() > 0).map(|l| (l.line(), l.column().max(1)));
        let line_text = location.and_then(|(line, _)| {
            let index = usize::try_from(line - 1).ok()?;
            self.text.lines().nth(index).map(str::to_string)
        });
        InputError::Invalid(Box::new(Invalid {
            kind: self.kind,
            path: self.path.clone(),
            field: field.into(),
            message: message.into(),
            location,
            line_text,
        }))
    }
}

/// Formats a recorded path as `nodes[1].resources.GPU`.
///
/// `Located<T>` reads its value from an inner field named `value`, which serde_path_to_error
/// records like a key. Such a segment is dropped unless it directly follows one that was
/// dropped: user-keyed maps sit directly inside a `Located` (see [`ResourceMap`]), so in
/// `resources.value.value` the first is `Located`'s and the second a resource named `value`.
pub(super) fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    let mut after_dropped = false;
    for segment in path.iter() {
        let key = match segment {
            Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                after_dropped = false;
                continue;
            }
            Segment::Map { key } if key == SPANNED_VALUE && !after_dropped => {
                after_dropped = true;
                continue;
            }
            Segment::Map { key } => key,
            Segment::Enum { variant } => variant,
            // Where the parser failed before a key was known (a duplicate key, bad syntax).
            Segment::Unknown => {
                after_dropped = false;
                continue;
            }
        };
        after_dropped = false;
        push_key(&mut out, key);
    }
    out
}

/// Formats a path recorded over JSON (where `Located` adds no segment of its own).
pub(super) fn json_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => push_key(&mut out, key),
            Segment::Enum { variant } => push_key(&mut out, variant),
            Segment::Unknown => {}
        }
    }
    out
}

/// Appends `.key`, quoting keys that are not plain words (`resources."nvidia.com/t4"`).
pub(super) fn push_key(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    let plain =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        out.push_str(key);
    } else {
        out.push_str(&format!("{key:?}"));
    }
}

/// `prefix.key`, the key quoted as [`push_key`] does.
pub(super) fn under(prefix: &str, key: &str) -> String {
    let mut path = prefix.to_string();
    push_key(&mut path, key);
    path
}

/// The full path of `field`, a path the core gives relative to what it was passed
/// ([`RequestError::field`]: `resources.GPU`, `scheduling_strategy.node_id`), where `section`
/// gives the file's path of its first segment.
///
/// The core's paths are a section name and at most one key after it, and that key may contain
/// dots itself (a resource named `nvidia.com/gpu`): only the first dot separates, and the key
/// is quoted as every other path quotes it.
pub(super) fn core_path(field: &str, section: impl FnOnce(&str) -> String) -> String {
    match field.split_once('.') {
        Some((head, key)) => under(&section(head), key),
        None => section(field),
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::parsed::{ClusterFile, RequestFile};
    use crate::spec::test_support::*;

    #[test]
    fn paths_drop_spanned_wrappers_but_keep_a_resource_named_value() {
        let err = parse_error::<RequestFile>("resources: {value: -1}\n");
        assert_eq!(err.field, "resources.value");
        assert!(err.message.contains("negative"), "{}", err.message);
        let err = parse_error::<RequestFile>("resources: {CPU: 1, nvidia.com/t4: x}\n");
        assert_eq!(err.field, "resources.\"nvidia.com/t4\"");
        let err = parse_error::<ClusterFile>(
            "nodes:\n  - id: a\n    resources: {}\n    allocations:\n      - {CPU: 1.00001}\n",
        );
        assert_eq!(err.field, "nodes[0].allocations[0].CPU");
        assert_eq!(err.location, Some((5, 15)));
        // The long form's sections are Located too; `value` as a resource name survives.
        let err = parse_error::<ClusterFile>(
            "nodes:\n  - id: a\n    resources: {}\n    allocations:\n      \
             - {resources: {value: 1}, instances: {value: [x]}}\n",
        );
        assert_eq!(err.field, "nodes[0].allocations[0].instances.value[0]");
        let err = parse_error::<ClusterFile>(
            "nodes:\n  - id: a\n    resources: {}\n    allocations:\n      \
             - {value: 1, resources: x}\n",
        );
        assert_eq!(err.field, "nodes[0].allocations[0].resources");
    }
}
