//! Hints for a request that waits: names it gives that no node has, next to a name the cluster
//! does have that differs only in a way people slip on. Such a request is accepted (a node
//! with the name may join), so the hint is all that tells the user about the slip:
//!
//! - a label key without Berth's prefix: `market-type` where the nodes have
//!   `berth.io/market-type`;
//! - a resource name in another case: `cpu` where the nodes have `CPU`.

use crate::cluster::Cluster;
use crate::labels::BERTH_PREFIX;
use crate::placement_group::GroupSpec;
use crate::request::Request;
use crate::resource::{ResourceId, UnknownResources};
use crate::selector::LabelSelector;

/// The hints for `request` on `cluster`, one sentence each.
pub fn request_hints(cluster: &Cluster, request: &Request) -> Vec<String> {
    let mut hints = Vec::new();
    resource_hints(cluster, request.unknown_resources(), &mut hints);
    let selectors = std::iter::once(request.label_selector()).chain(request.fallback());
    for selector in selectors {
        label_hints(cluster, selector, &mut hints);
    }
    hints
}

/// The hints for a placement group's bundles (every alternative) on `cluster`.
pub fn group_hints(cluster: &Cluster, spec: &GroupSpec) -> Vec<String> {
    let mut hints = Vec::new();
    for set in &spec.alternatives {
        for unknown in &set.unknown {
            resource_hints(cluster, unknown, &mut hints);
        }
        for selector in &set.selectors {
            label_hints(cluster, selector, &mut hints);
        }
    }
    hints
}

fn push(hints: &mut Vec<String>, hint: String) {
    if !hints.contains(&hint) {
        hints.push(hint);
    }
}

fn resource_hints(cluster: &Cluster, unknown: &UnknownResources, hints: &mut Vec<String>) {
    let registry = cluster.registry();
    for (name, _) in unknown.iter() {
        let known = (0..registry.len())
            .filter_map(ResourceId::from_index)
            .map(|id| registry.name(id))
            .find(|known| known.eq_ignore_ascii_case(name) && *known != name);
        if let Some(known) = known {
            push(
                hints,
                format!(
                    "no node has the resource {name:?}; did you mean {known:?}? (resource names \
                     are case-sensitive)"
                ),
            );
        }
    }
}

fn label_hints(cluster: &Cluster, selector: &LabelSelector, hints: &mut Vec<String>) {
    let index = cluster.label_index();
    for (key, _) in selector.iter() {
        if key.starts_with(BERTH_PREFIX) || index.nodes_with_key(key).is_some_and(|n| !n.is_empty())
        {
            continue;
        }
        let prefixed = format!("{BERTH_PREFIX}{key}");
        if index.nodes_with_key(&prefixed).is_some_and(|n| !n.is_empty()) {
            push(
                hints,
                format!("no node has the label {key}; did you mean {prefixed}? (Berth's own labels carry the {BERTH_PREFIX} prefix)"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Strategy;
    use crate::testutil::{labelled_cluster, selector};

    #[test]
    fn slips_that_match_a_known_name_are_hinted() {
        let c = labelled_cluster(&[("n", "CPU=4", "team=ml", "")]);
        let mut unknown = UnknownResources::default();
        unknown.push("cpu", crate::Quantity::from_whole(1));
        unknown.push("tpu", crate::Quantity::from_whole(1));
        let request = Request::new(Default::default(), Strategy::Default, c.registry())
            .unwrap()
            .with_unknown_resources(unknown)
            .with_label_selector(selector(&[("node-id", "n"), ("team", "ml"), ("x", "1")]));
        let hints = request_hints(&c, &request);
        assert_eq!(hints.len(), 2, "{hints:?}");
        assert!(hints[0].contains("\"cpu\"; did you mean \"CPU\"?"), "{hints:?}");
        assert!(hints[1].contains("label node-id; did you mean berth.io/node-id?"), "{hints:?}");
    }
}
