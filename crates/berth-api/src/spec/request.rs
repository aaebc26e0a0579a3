//! Building the request file (and a REST body): an actor or task, or a placement group.

use super::label_maps::{selector_error_text, ExpressionMap};
use super::located::Located;
use super::parsed::{RequestFile, ResourceMap};
use super::placement::PlacementSpec;
use super::source::{under, Source};
use super::{actors, groups};
use super::{FileKind, InputError};
use berth_core::labels::LabelError;
use berth_core::placement_group::GroupSpec;
use berth_core::selector::{LabelSelector, SelectorError};
use berth_core::{Cluster, Request};
use std::path::Path;

/// What a request file asks for: an actor or task to place, or a placement group.
#[derive(Debug)]
pub enum LoadedRequest {
    /// An actor or task (`resources`, and `actor` for an actor).
    Request(Request),
    /// A placement group (`placement_group`).
    Group(GroupSpec),
}

/// Reads, parses and builds the request file at `path`. Its resource names are interned in
/// `cluster`'s registry: a resource no node has is a reason, not an input error.
pub fn load_request(path: &Path, cluster: &Cluster) -> Result<LoadedRequest, InputError> {
    let source = Source::read(FileKind::Request, path)?;
    let file: RequestFile = source.parse()?;
    ParsedRequest { source, file }.build(cluster)
}

/// A request document that passed every check a value can pass alone (the parse), waiting for
/// the checks that need the cluster ([`ParsedRequest::build`]). The head parses REST bodies
/// at the edge, on the handler's task, and builds them on the task that owns the cluster.
#[derive(Debug)]
pub struct ParsedRequest {
    pub(super) source: Source,
    pub(super) file: RequestFile,
}

impl ParsedRequest {
    /// Parses `text`, a request document in the request file's format (JSON or YAML), whose
    /// errors name `kind` and `name` (`request body of POST /api/v1/actors`).
    pub fn parse(kind: FileKind, name: &str, text: String) -> Result<ParsedRequest, InputError> {
        let source = Source::from_text(kind, name, text);
        let file: RequestFile = source.parse()?;
        Ok(ParsedRequest { source, file })
    }

    /// Builds the core request (or group spec) against `cluster`. A resource no node has is a
    /// reason (the request is infeasible), not an input error, and is not interned: only
    /// nodes grow the registry.
    pub fn build(&self, cluster: &Cluster) -> Result<LoadedRequest, InputError> {
        let (source, file) = (&self.source, &self.file);
        match (&file.resources, &file.placement_group) {
        (Some(resources), None) => request(source, cluster, file, resources),
        (None, Some(group)) => {
            // The group's keys are inside `placement_group`; the request's own do not apply.
            let request_keys = [
                ("actor", file.actor.as_ref().map(|a| a.referenced)),
                ("scheduling_strategy", file.scheduling_strategy.as_ref().map(|s| s.referenced)),
                ("preferred_node", file.preferred_node.as_ref().map(|n| n.referenced)),
                ("label_selector", file.label_selector.as_ref().map(|l| l.referenced)),
                (
                    "fallback_strategy",
                    file.fallback_strategy.first().map(|f| f.label_selector.referenced),
                ),
                ("tolerations", file.tolerations.as_ref().map(|t| t.referenced)),
            ];
            if let Some((key, location)) = request_keys.iter().find(|(_, given)| given.is_some()) {
                return Err(source.invalid(
                    *key,
                    format!(
                        "{key} is a key of an actor or task request, not of a placement group \
                         request; a group takes bundle_label_selector, tolerations and \
                         fallback_strategy inside placement_group"
                    ),
                    *location,
                ));
            }
            groups::request_group(source, cluster, group).map(LoadedRequest::Group)
        }
        (Some(_), Some(group)) => Err(source.invalid(
            "placement_group",
            "a request file places either an actor or task (resources) or a placement group \
             (placement_group), not both; a task goes into a group with scheduling_strategy: \
             {type: PLACEMENT_GROUP, group: …}",
            Some(group.referenced),
        )),
        (None, None) => Err(source.invalid(
            "",
            "a request file needs resources (an actor or task, such as resources: {CPU: 1}) or \
             placement_group (a placement group); see docs/file-formats.md",
            None,
        )),
    }
    }
}

/// Builds the actor or task request of `file`, whose `resources` are `resources`.
pub(super) fn request(
    source: &Source,
    cluster: &Cluster,
    file: &RequestFile,
    resources: &Located<ResourceMap>,
) -> Result<LoadedRequest, InputError> {
    let actor = file.actor.as_ref().map(|section| actors::new_actor(source, cluster, section));
    let spec = PlacementSpec {
        resources: resources.clone(),
        scheduling_strategy: file.scheduling_strategy.clone(),
        label_selector: file.label_selector.clone(),
        fallback_strategy: file.fallback_strategy.clone(),
        tolerations: file.tolerations.clone(),
    };
    let request = spec.build(source, cluster, actor.transpose()?)?;
    let preferred = match &file.preferred_node {
        None => None,
        Some(node) => Some(cluster.index_of(node.value.as_str()).ok_or_else(|| {
            source.invalid(
                "preferred_node",
                format!(
                    "there is no node {} in the cluster; name one of the cluster file's nodes",
                    node.value
                ),
                Some(node.referenced),
            )
        })?),
    };
    Ok(LoadedRequest::Request(request.with_preferred_node(preferred)))
}

/// The selector (or tolerations) of `map`, found at `field`. Every entry was checked while
/// parsing; an error here would be a rule the parse did not know.
pub(super) fn selector(
    source: &Source,
    map: &Located<ExpressionMap>,
    field: &str,
) -> Result<LabelSelector, InputError> {
    LabelSelector::parse(map.value.pairs()).map_err(|err| {
        let path = match &err {
            SelectorError::Key(LabelError::Key { key, .. })
            | SelectorError::Expression { key, .. } => under(field, key),
            SelectorError::Key(_) => field.to_string(),
        };
        source.invalid(path, selector_error_text(&err), Some(map.referenced))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{Quantity, ResourceRegistry};

    #[test]
    fn json_bodies_are_read_with_the_same_rules_and_full_paths() {
        let error = |text: &str| match ParsedRequest::parse(FileKind::Body, "POST /x", text.into())
        {
            Err(InputError::Invalid(invalid)) => (invalid.field, invalid.message),
            other => panic!("expected an invalid body, got {other:?}"),
        };
        let (field, message) = error(r#"{"resources": {"value": -1}}"#);
        assert_eq!(field, "resources.value");
        assert!(message.contains("negative"), "{message}");
        assert_eq!(
            error(r#"{"resources": {"CPU": 1}, "label_selector": {"zone": "in("}}"#).0,
            "label_selector.zone"
        );
        assert_eq!(error(r#"{"resources": {"CPU": 1}} trailing"#).0, "");
        let (field, message) = error(r#"{"resources": {"CPU": 1}, "colour": 1}"#);
        assert_eq!(field, "colour");
        assert!(!message.contains("at line"), "{message}");
        let parsed = ParsedRequest::parse(
            FileKind::Body,
            "POST /x",
            r#"{"resources": {"GPU": 0.5}}"#.into(),
        );
        let cluster = Cluster::new(ResourceRegistry::default());
        assert!(matches!(parsed.unwrap().build(&cluster), Ok(LoadedRequest::Request(_))));
    }

    #[test]
    fn requests_never_grow_the_registry_so_made_up_names_never_exhaust_it() {
        // More distinct names than the registry can ever hold (65,536): each request is
        // accepted (infeasible: no node has the resource), and the registry stays as it was.
        let cluster = Cluster::new(ResourceRegistry::default());
        let before = cluster.registry().len();
        for i in 0..70_000 {
            let body = format!(r#"{{"resources": {{"CPU": 1, "made-up-{i}": 2}}}}"#);
            let parsed = ParsedRequest::parse(FileKind::Body, "POST /x", body).unwrap();
            let Ok(LoadedRequest::Request(request)) = parsed.build(&cluster) else {
                panic!("request {i} was refused");
            };
            assert_eq!(
                request.unknown_resources().iter().next(),
                Some((&*format!("made-up-{i}"), Quantity::from_whole(2)))
            );
        }
        let group = r#"{"placement_group": {"id": "pg", "bundles": [{"TPU": 1}, {"CPU": 1}]}}"#;
        let parsed = ParsedRequest::parse(FileKind::Body, "POST /x", group.into()).unwrap();
        let Ok(LoadedRequest::Group(spec)) = parsed.build(&cluster) else { panic!() };
        assert_eq!(
            spec.alternatives[0].unknown_reason().as_deref(),
            Some("bundle 0: no node has the resource \"TPU\" (asked 1)")
        );
        assert_eq!(cluster.registry().len(), before, "the registry did not grow");
        // A bad name is still an input error, naming it.
        let bad =
            ParsedRequest::parse(FileKind::Body, "POST /x", r#"{"resources": {"a b": 1}}"#.into());
        assert!(bad.is_err_and(|e| e.to_string().contains("\"a b\" is invalid")));
    }
}
