//! Stage 4, select: one node among those that passed, by the attempt's rule (top k, round
//! robin, random, the only one), with the ties broken the same way for the same inputs.

use rand::Rng;
use smallvec::{smallvec, SmallVec};

use super::profile::Pick;
use super::visit::Ranked;
use super::Scheduler;
use crate::node::NodeIndex;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};
use crate::request::Request;

/// How an attempt picks among the nodes that passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Select {
    /// Best tier, then random among the `top_k` best scores; the caller's node wins ties.
    TopK,
    /// The first node at or after the round-robin cursor.
    RoundRobin,
    /// Uniformly random.
    Random,
    /// The only candidate.
    Only,
}

impl Scheduler {
    /// Picks among `self.ranked` (in node order) by the attempt's rule.
    pub(super) fn select<R: Rng + ?Sized>(
        &mut self,
        select: Select,
        pick: Pick,
        request: &Request,
        alive: u64,
        rng: &mut R,
    ) -> Shortlist {
        let ranked = &mut self.ranked;
        if ranked.is_empty() {
            return Shortlist::default();
        }
        match select {
            Select::Only => Shortlist::single(ranked[0].node),
            Select::Random => {
                let pick = ranked[rng.random_range(0..ranked.len())].node;
                Shortlist {
                    chosen: Some(pick),
                    candidates: ranked.iter().map(|r| r.node).collect(),
                }
            }
            Select::RoundRobin => {
                let cursor = self.spread_cursor;
                let pick = ranked.iter().find(|r| r.node.0 >= cursor).unwrap_or(&ranked[0]).node;
                self.spread_cursor = pick.0.wrapping_add(1);
                Shortlist::single(pick)
            }
            Select::TopK => {
                let best_tier = ranked.iter().map(|r| r.tier).max().unwrap_or(0);
                if ranked.iter().any(|r| r.tier != best_tier) {
                    ranked.retain(|r| r.tier == best_tier);
                }
                let k = match pick {
                    Pick::TopK => top_k(alive, self.config.top_k_fraction).min(ranked.len()),
                    Pick::TopKFraction(fraction) => top_k(alive, fraction).min(ranked.len()),
                    // Every node tied for the best total.
                    Pick::Best | Pick::Auto => {
                        let best = ranked.iter().map(|r| r.score).max().unwrap_or(0);
                        ranked.iter().filter(|r| r.score == best).count()
                    }
                };
                // Best score first; on ties the caller's node, then node order: the same inputs
                // give the same list, and a preferred node that ties for best is always in it.
                let preferred = request.preferred_node();
                let is_preferred = |r: &Ranked| Some(r.node) == preferred;
                let by_rank = |a: &Ranked, b: &Ranked| {
                    b.score
                        .cmp(&a.score)
                        .then(is_preferred(b).cmp(&is_preferred(a)))
                        .then(a.node.cmp(&b.node))
                };
                if k < ranked.len() {
                    ranked.select_nth_unstable_by(k - 1, by_rank);
                }
                let top = &mut ranked[..k];
                top.sort_unstable_by(by_rank);
                let preferred = preferred.filter(|p| top[0].node == *p);
                let pick = preferred.unwrap_or_else(|| top[rng.random_range(0..k)].node);
                Shortlist { chosen: Some(pick), candidates: top.iter().map(|r| r.node).collect() }
            }
        }
    }
}

/// The nodes a selection picked among, and the pick.
#[derive(Default)]
pub(super) struct Shortlist {
    pub(super) chosen: Option<NodeIndex>,
    /// Inline up to 16: the top 20% of the 64-odd nodes an early-stopping visit finds.
    pub(super) candidates: SmallVec<[NodeIndex; 16]>,
}

impl Shortlist {
    fn single(node: NodeIndex) -> Shortlist {
        Shortlist { chosen: Some(node), candidates: smallvec![node] }
    }
}

/// `max(1, ⌊alive × fraction⌋)`.
fn top_k(alive: u64, fraction: Quantity) -> usize {
    let k = u128::from(alive) * fraction.units() as u128 / UNITS_PER_WHOLE as u128;
    (k as usize).max(1)
}
