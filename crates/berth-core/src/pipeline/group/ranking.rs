//! Stage 3 for the bundles of a placement group: the group strategy's ranking, as one
//! preference and two scorers behind the same traits as every other ranking stage.
//!
//! Rules, most significant first (a bundle's nodes are ranked by them, then node order):
//! - [`GroupNodes`]: PACK prefers the nodes the plan already uses, SPREAD the others (a tier,
//!   so it dominates any score); the strict strategies say nothing (they decide by matching or
//!   by trying every node with all bundles).
//! - [`HoldsRest`]: for PACK, a node the plan does not use yet scores by how many of the bundles
//!   still to place (this one first) fit on it one after another: fewest nodes in the end.
//! - [`LeastWaste`]: the node whose requested resources are left with the smallest share free
//!   once the bundle is placed.
//!
//! The order between the two scorers is kept by their weights ([`HOLDS_REST_WEIGHT`]): one more
//! bundle held outweighs the whole range of least waste, for groups of fewer than 990,000
//! bundles (beyond that, ties of the first break by the second).

use super::super::stage::{DecisionContext, GroupContext, Preference, Score, Scorer, Weighted};
use crate::node::Node;
use crate::resource::ResourceSet;

/// The weight of [`HoldsRest`]: a step of one bundle (at least 10⁸ / bundles millionths of a
/// point) times it exceeds [`LeastWaste`]'s whole range (10⁸) while bundles < 990,000; the
/// weighted total (at most 10¹⁴) stays far inside `u64`.
pub const HOLDS_REST_WEIGHT: u32 = 1_000_000;

/// The group strategy's ranking stages, in order.
pub(crate) fn stages() -> (Vec<Box<dyn Preference>>, Vec<Weighted>) {
    (
        vec![Box::new(GroupNodes)],
        vec![
            Weighted { scorer: Box::new(HoldsRest), weight: HOLDS_REST_WEIGHT },
            Weighted { scorer: Box::new(LeastWaste), weight: 1 },
        ],
    )
}

fn group<'a>(cx: &'a DecisionContext<'_>) -> Option<&'a GroupContext> {
    cx.prepared.group.as_ref()
}

/// PACK: the nodes the plan uses; SPREAD: the others.
pub struct GroupNodes;

impl Preference for GroupNodes {
    fn name(&self) -> &'static str {
        "group-nodes"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        group(cx).is_some_and(|g| g.prefer_used.is_some())
    }

    fn prefers(&self, cx: &DecisionContext<'_>, node: &Node) -> bool {
        group(cx).is_some_and(|g| g.prefer_used == Some(g.used.contains(node.index())))
    }
}

/// PACK, on a node the plan does not use yet: the share of the bundles still to place that
/// fit on it one after another.
pub struct HoldsRest;

impl Scorer for HoldsRest {
    fn name(&self) -> &'static str {
        "holds-rest"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        group(cx).is_some_and(|g| g.prefer_used == Some(true) && !g.rest.is_empty())
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let Some(group) = group(cx) else { return Score::MIN };
        if group.used.contains(node.index()) {
            return Score::MIN;
        }
        let holds = group.rest.held_by(node, cx.cluster.registry());
        Score::from_ratio(holds as u128, group.rest.len() as u128)
    }
}

/// `100 × (1 − mean share left free)` over the bundle's resources, once it is placed.
pub struct LeastWaste;

impl Scorer for LeastWaste {
    fn name(&self) -> &'static str {
        "least-waste"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        group(cx).is_some()
    }

    /// Exact in order (a smaller share left is never a lower score, and two different sums of
    /// shares never tie) for bundles of up to 100 resources: a share differs by at least one
    /// millionth, and a millionth of the mean is at least one millionth of a point then.
    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let bundle = cx.request.resources();
        let resources = bundle.iter().count() as u128;
        let whole = resources * 1_000_000;
        Score::from_ratio(whole - u128::from(left_after(node, bundle)).min(whole), whole)
    }
}

/// Σ over the bundle's resources of the share of `node`'s total left free once `bundle` is
/// placed, in millionths. Computed from the free quantities, without a copy: the filters said
/// the bundle fits.
pub(crate) fn left_after(node: &Node, bundle: &ResourceSet) -> u64 {
    bundle
        .iter()
        .map(|(r, quantity)| {
            let total = node.total().get(r).units().max(1) as u128;
            let left =
                node.available().get(r).units().saturating_sub(quantity.units()).max(0) as u128;
            (left * 1_000_000 / total) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::super::stage::RestBundles;
    use crate::testutil::{cluster, index, resources};

    /// Bundles of scalar resources, as quantities of CPU and memory in tenths.
    fn bundles() -> impl Strategy<Value = Vec<(u32, u32)>> {
        proptest::collection::vec((0u32..30, 0u32..30), 0..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The running sums count what reserving one bundle after another on a copy counts,
        /// from every position of the plan.
        #[test]
        fn sums_count_what_reserving_counts(
            bundles in bundles(),
            (cpu, mem, used_cpu) in (0u32..100, 0u32..100, 0u32..50),
        ) {
            let mut c = cluster(&[("n", &format!("CPU={cpu},memory={mem}"))]);
            let node = index(&c, "n");
            let used = resources(c.registry_mut(), &format!("CPU={}", used_cpu.min(cpu)));
            c.reserve(node, &used).unwrap();
            let order: Vec<_> = bundles
                .iter()
                .map(|(a, b)| {
                    resources(c.registry_mut(), &format!("CPU={}.{},memory={}.{}", a / 10, a % 10, b / 10, b % 10))
                })
                .collect();
            let rest = RestBundles::new(order.clone(), c.registry());
            let n = c.node(node).unwrap();
            for from in 0..=order.len() {
                let mut copy = n.clone();
                let simulated =
                    order[from..].iter().take_while(|b| copy.reserve(b, c.registry()).is_ok()).count();
                prop_assert_eq!(rest.starting_at(from).held_by(n, c.registry()), simulated, "from {}", from);
            }
        }
    }
}
