//! A REST body as a request document in the request file's format, parsed by the same rules
//! as a file: at the edge when the body arrives, and on the owner task when an actor restarts
//! or a head reloads.

use berth_api::rest::{ActorCreate, GroupCreate, RawJson, TaskSubmit};
use berth_api::spec::{FileKind, InputError, ParsedRequest};

use crate::error::HeadError;
use berth_api::ObjectKind;

/// An actor's body as a request document (`actor:` carries its ID, namespace and labels).
pub(crate) fn actor_document(seq: u64, body: &ActorCreate) -> Result<ParsedRequest, HeadError> {
    let mut actor = Document::default();
    actor.json("id", &ObjectKind::Actor.id(seq));
    if let Some(ns) = &body.namespace {
        actor.json("namespace", ns);
    }
    actor.json("labels", &body.labels);
    let mut doc = Document::default();
    doc.request(
        &body.resources,
        [
            &body.scheduling_strategy,
            &body.label_selector,
            &body.fallback_strategy,
            &body.tolerations,
        ],
    )
    .nested("actor", actor);
    doc.parse("POST /api/v1/actors", &[("actor.", "")])
}

/// A task's body as a request document.
pub(crate) fn task_document(body: &TaskSubmit) -> Result<ParsedRequest, HeadError> {
    let mut doc = Document::default();
    doc.request(
        &body.resources,
        [
            &body.scheduling_strategy,
            &body.label_selector,
            &body.fallback_strategy,
            &body.tolerations,
        ],
    );
    doc.parse("POST /api/v1/tasks", &[])
}

/// A group's body as a request document (`placement_group:` with its ID).
pub(crate) fn group_document(seq: u64, body: &GroupCreate) -> Result<ParsedRequest, HeadError> {
    let mut group = Document::default();
    group
        .raw("bundles", Some(&body.bundles))
        .raw("bundle_label_selector", body.bundle_label_selector.as_ref())
        .raw("tolerations", body.tolerations.as_ref())
        .raw("fallback_strategy", body.fallback_strategy.as_ref());
    group.json("id", &ObjectKind::Group.id(seq));
    for (key, value) in
        [("name", &body.name), ("namespace", &body.namespace), ("strategy", &body.strategy)]
    {
        if let Some(v) = value {
            group.json(key, v);
        }
    }
    let mut doc = Document::default();
    doc.nested("placement_group", group);
    doc.parse("POST /api/v1/placement_groups", &[("placement_group.", "")])
}

/// A request document's text, written from a body's fields: the placement fields are the
/// client's own JSON text ([`berth_api::rest::RawJson`]), copied in, so the document is parsed
/// once, into the request file's typed form, and never built as a tree first.
#[derive(Default)]
struct Document {
    text: String,
}

impl Document {
    /// Starts the member `key` (one of this module's constants: no escaping needed).
    fn key(&mut self, key: &str) {
        self.text.push(if self.text.is_empty() { '{' } else { ',' });
        self.text.push('"');
        self.text.push_str(key);
        self.text.push_str("\":");
    }

    /// `key` with the client's JSON text, when given.
    fn raw(&mut self, key: &str, value: Option<&RawJson>) -> &mut Document {
        if let Some(value) = value {
            self.key(key);
            self.text.push_str(value.get());
        }
        self
    }

    /// The placement keys of an actor or task body (the two share them): `resources`, then
    /// `scheduling_strategy`, `label_selector`, `fallback_strategy` and `tolerations` when given.
    fn request(&mut self, resources: &RawJson, rest: [&Option<RawJson>; 4]) -> &mut Document {
        self.raw("resources", Some(resources));
        let keys = ["scheduling_strategy", "label_selector", "fallback_strategy", "tolerations"];
        for (key, value) in keys.into_iter().zip(rest) {
            self.raw(key, value.as_ref());
        }
        self
    }

    /// `key` with a value of ours, written as JSON.
    fn json(&mut self, key: &str, value: &(impl serde::Serialize + ?Sized)) -> &mut Document {
        self.key(key);
        let written = serde_json::to_string(value).expect("strings and string maps serialize");
        self.text.push_str(&written);
        self
    }

    /// `key` with a document of its own.
    fn nested(&mut self, key: &str, inner: Document) -> &mut Document {
        self.key(key);
        self.text.push_str(&inner.finish());
        self
    }

    fn finish(mut self) -> String {
        if self.text.is_empty() {
            self.text.push('{');
        }
        self.text.push('}');
        self.text
    }

    /// Parses the document; `renames` turns its field paths back into the body's
    /// (`actor.labels.x` → `labels.x`).
    fn parse(self, route: &str, renames: &[(&str, &str)]) -> Result<ParsedRequest, HeadError> {
        ParsedRequest::parse(FileKind::Body, route, self.finish())
            .map_err(|e| input_error(e, renames))
    }
}

/// A request document's error as a [`HeadError`], with the body's field path.
pub(crate) fn input_error(err: InputError, renames: &[(&str, &str)]) -> HeadError {
    match err {
        InputError::Invalid(invalid) => {
            let mut field = invalid.field.clone();
            for (from, to) in renames {
                if let Some(rest) = field.strip_prefix(from) {
                    field = format!("{to}{rest}");
                }
            }
            HeadError::invalid(field, invalid.message.clone())
        }
        InputError::Read { source, .. } => HeadError::invalid("", source.to_string()),
    }
}
