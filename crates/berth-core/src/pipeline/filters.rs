//! The resource filters every strategy runs, in the order the runner needs: static (totals)
//! before dynamic (free now), and [`FilterStage`], how the runner holds them.

use super::stage::{DecisionContext, Filter, FilterKind, Verdict};
use crate::diagnosis::Reason;
use crate::node::Node;

/// Every taint of the node is tolerated (seed 004), by the request's tolerations or, for the
/// taint of a rare resource, because the request asks for that resource. Static: a taint is
/// part of what the node is until someone removes it (which re-decides waiting requests).
pub struct TaintsTolerated;

impl Filter for TaintsTolerated {
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "taints"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Static
    }
    #[inline]
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
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "resources_total"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Static
    }
    #[inline]
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
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "resources_free"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Dynamic
    }
    #[inline]
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
    fn node_and_request_only(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "instances"
    }
    fn kind(&self) -> FilterKind {
        FilterKind::Dynamic
    }
    #[inline]
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

/// One filter of the runner's list: a built-in one by value, a profile's behind its trait.
///
/// Every node a decision visits goes through the built-in filters, so the runner calls them
/// directly (the compiler inlines each check into the visit loop) instead of through a trait
/// object; when they are the only ones, as one call without a match per filter
/// ([`FilterStage::builtin_failure`]). Profiles add filters through [`Filter`] as before.
pub enum FilterStage {
    /// [`TaintsTolerated`].
    Taints,
    /// [`ResourcesTotal`].
    Total,
    /// [`ResourcesFree`].
    Free,
    /// [`InstancesFit`].
    Instances,
    /// A filter a profile adds.
    Profile(Box<dyn Filter>),
}

impl FilterStage {
    /// The built-in filters, in the runner's order.
    pub fn builtin() -> [FilterStage; 4] {
        [FilterStage::Taints, FilterStage::Total, FilterStage::Free, FilterStage::Instances]
    }

    /// True when `filters` are the built-in ones alone, in [`FilterStage::builtin`]'s order
    /// (a scheduler whose profile adds none).
    pub fn are_builtin(filters: &[FilterStage]) -> bool {
        matches!(
            filters,
            [FilterStage::Taints, FilterStage::Total, FilterStage::Free, FilterStage::Instances]
        )
    }

    /// The first failure of the built-in filters on `node`: what running a list of them alone
    /// ([`FilterStage::are_builtin`]) stage by stage finds. Why: dispatching on each stage is an
    /// indirect jump per filter and node that cycles through four targets, mispredicted often
    /// enough to be a tenth of the visit loop's time (`perf annotate` of `berth sim`).
    #[inline(always)]
    pub fn builtin_failure(cx: &DecisionContext<'_>, node: &Node) -> Option<Reason> {
        if let Verdict::Unfit(reason) = TaintsTolerated.check(cx, node) {
            return Some(reason);
        }
        if let Verdict::Unfit(reason) = ResourcesTotal.check(cx, node) {
            return Some(reason);
        }
        if let Verdict::Unfit(reason) = ResourcesFree.check(cx, node) {
            return Some(reason);
        }
        match InstancesFit.check(cx, node) {
            Verdict::Unfit(reason) => Some(reason),
            _ => None,
        }
    }
}

impl Filter for FilterStage {
    fn name(&self) -> &'static str {
        match self {
            FilterStage::Taints => TaintsTolerated.name(),
            FilterStage::Total => ResourcesTotal.name(),
            FilterStage::Free => ResourcesFree.name(),
            FilterStage::Instances => InstancesFit.name(),
            FilterStage::Profile(filter) => filter.name(),
        }
    }

    #[inline]
    fn kind(&self) -> FilterKind {
        match self {
            FilterStage::Taints => TaintsTolerated.kind(),
            FilterStage::Total => ResourcesTotal.kind(),
            FilterStage::Free => ResourcesFree.kind(),
            FilterStage::Instances => InstancesFit.kind(),
            FilterStage::Profile(filter) => filter.kind(),
        }
    }

    fn node_and_request_only(&self) -> bool {
        match self {
            FilterStage::Profile(filter) => filter.node_and_request_only(),
            // Taints: the definitions of a node's taints do not change while it carries them
            // (an ID is reused only once no node carries it). Instances: whether a resource is
            // counted per instance is fixed when it is registered.
            _ => true,
        }
    }

    #[inline(always)]
    fn check(&self, cx: &DecisionContext<'_>, node: &Node) -> Verdict {
        match self {
            FilterStage::Taints => TaintsTolerated.check(cx, node),
            FilterStage::Total => ResourcesTotal.check(cx, node),
            FilterStage::Free => ResourcesFree.check(cx, node),
            FilterStage::Instances => InstancesFit.check(cx, node),
            FilterStage::Profile(filter) => filter.check(cx, node),
        }
    }
}
