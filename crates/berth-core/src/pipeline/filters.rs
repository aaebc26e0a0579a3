//! The resource filters every strategy runs, in the order the runner needs: static (totals)
//! before dynamic (free now).

use super::stage::{DecisionContext, Filter, FilterKind, Verdict};
use crate::diagnosis::Reason;
use crate::node::Node;

/// Every taint of the node is tolerated (seed 004), by the request's tolerations or, for the
/// taint of a rare resource, because the request asks for that resource. Static: a taint is
/// part of what the node is until someone removes it (which re-decides waiting requests).
pub struct TaintsTolerated;

impl Filter for TaintsTolerated {
    fn name(&self) -> &'static str {
        "taints"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Static
    }
    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict {
        for &id in node.taints() {
            let taint = cx.cluster.taint(id);
            let asks_rare =
                taint.rare_resource.is_some_and(|r| !cx.request.resources().get(r).is_zero());
            if !asks_rare && !cx.request.tolerations().tolerates(&taint.key, &taint.value) {
                return Verdict::Unfit(Reason::UntoleratedTaint(id));
            }
        }
        Verdict::Fit
    }
}

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
