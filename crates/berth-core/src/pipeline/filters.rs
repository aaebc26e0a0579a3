//! The resource filters every strategy runs, in the order the runner needs: static (totals)
//! before dynamic (free now).

use super::stage::{DecisionContext, Filter, FilterKind, Verdict};
use crate::diagnosis::Reason;
use crate::node::Node;

/// The node has the requested resources when empty: otherwise it can never take the request.
pub struct ResourcesTotal;

impl Filter for ResourcesTotal {
    fn name(&self) -> &'static str {
        "resources_total"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Static
    }
    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict {
        match node.total_shortfall(cx.request.resources()) {
            None => Verdict::Fit,
            Some(shortfall) => Verdict::Unfit(Reason::InsufficientTotal(shortfall)),
        }
    }
}

/// The node has the requested resources free now.
pub struct ResourcesFree;

impl Filter for ResourcesFree {
    fn name(&self) -> &'static str {
        "resources_free"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Dynamic
    }
    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict {
        match node.available_shortfall(cx.request.resources()) {
            None => Verdict::Fit,
            Some(shortfall) => Verdict::Unfit(Reason::InsufficientAvailable(shortfall)),
        }
    }
}

/// Unit-instance resources fit per instance: a fraction inside one instance, a whole number as
/// whole free instances (see [`crate::instances`]).
pub struct InstancesFit;

impl Filter for InstancesFit {
    fn name(&self) -> &'static str {
        "instances"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Dynamic
    }
    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict {
        let request = cx.request.resources();
        match node.fragmented(request, cx.cluster.registry()) {
            None => Verdict::Fit,
            Some(resource) => {
                Verdict::Unfit(Reason::Fragmented { resource, requested: request.get(resource) })
            }
        }
    }
}
