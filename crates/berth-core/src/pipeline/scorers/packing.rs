//! Share packing: a share of one GPU goes where the cluster's partly used GPUs stay most
//! varied in what they have free, after the Sum-of-Squares rule of online bin packing (Csirik,
//! Johnson, Kenyon, Orlin, Shor and Weber, "On the Sum-of-Squares algorithm for bin packing",
//! JACM 2006).
//!
//! Assumptions: shares come in a handful of sizes, again and again; a partly used GPU whose
//! free part matches a size that keeps coming will be filled, while many GPUs with the same
//! free part compete for the same requests and some stay partly idle.
//!
//! Rules: `N(g)` is the number of the cluster's partly used GPUs with `g` free (in thousandths
//! of a GPU; wholly free and wholly used GPUs do not count, and neither do free parts smaller
//! than the smallest share the scorer has ranked: no share seen fits them, they are idle
//! whatever comes). A share `s` placed on a node goes to the GPU the ledger takes (the one
//! with the least free that fits, see [`crate::instances`]), whose free part moves from `f` to
//! `f − s`; that changes `Σ N(g)²` by `2 × (N(f − s) − N(f) + 1)`. The raw score is
//! `50 − 50 × (N(f − s) − N(f) + 1) / (L / 100)`, clamped to 0..=100, with `L` the partly used
//! GPUs counted: 50 for a move that keeps the sum, 0.5 point per percent of `L` it saves or
//! costs. It applies to requests for a share of one GPU only.
//!
//! Behaviour: a share fills a GPU whose free part is common before one whose free part is
//! rare, and leaves behind a free part that few GPUs have. Idle free parts (below the smallest
//! share) are not counted, unlike the original rule: those GPUs are not bins any size can go
//! to. It gains most where shares are many (measurements: `docs/placement-log.md`).
//!
//! Cost: the counts are kept from decision to decision, brought up to date from the cluster's
//! change feed ([`crate::feed`]): each decision counts again the GPUs of the nodes changed since
//! the last one (usually one or two); a score is one pass over the node's GPUs and two lookups.

use std::cell::RefCell;

use super::super::stage::{DecisionContext, Score, Scorer};
use super::per_node::PerNode;
use crate::cluster::Cluster;
use crate::node::Node;
use crate::quantity::UNITS_PER_WHOLE;
use crate::resource::ResourceId;

/// Units of GPU per counted step of free part: a thousandth of a GPU.
const STEP: i64 = UNITS_PER_WHOLE / 1000;

/// The share packing scorer. See the module documentation.
#[derive(Debug, Default)]
pub struct SharePacking {
    counts: RefCell<Counts>,
}

/// The partly used GPUs by free part, and what they were counted from.
#[derive(Debug)]
struct Counts {
    /// `by_free[g]`: partly used GPUs with `g` thousandths free (0 and 1000 stay 0).
    by_free: Vec<u32>,
    /// Per node slot, the free parts it added.
    nodes: PerNode<Vec<u16>>,
    /// The smallest share ranked so far, in steps; free parts below it do not count.
    smallest: usize,
    /// The partly used GPUs counted (free part at least `smallest`).
    live: u64,
}

impl Default for Counts {
    fn default() -> Counts {
        Counts { by_free: vec![0; 1001], nodes: PerNode::default(), smallest: 1000, live: 0 }
    }
}

impl Clone for SharePacking {
    /// A scorer that counts again from nothing.
    fn clone(&self) -> Self {
        SharePacking::default()
    }
}

/// A share of one GPU asked by the request, in units; `None` when it asks none or whole GPUs.
fn share(cx: &DecisionContext<'_>) -> Option<i64> {
    let gpu = cx.request.resources().get(ResourceId::GPU).units();
    (gpu > 0 && gpu < UNITS_PER_WHOLE).then_some(gpu)
}

/// The free parts of the node's partly used GPUs, in steps.
fn partly_free(node: &Node) -> Vec<u16> {
    node.pool(ResourceId::GPU)
        .map(|pool| {
            pool.free_per_instance()
                .map(|free| free.units() / STEP)
                .filter(|&g| g > 0 && g < 1000)
                .map(|g| g as u16)
                .collect()
        })
        .unwrap_or_default()
}

impl Counts {
    /// Brings the counts up to date with the nodes changed since the last call. Alive or not:
    /// a node that died has had its work given back, so none of its GPUs is partly used; a
    /// removed node counts nothing.
    fn follow(&mut self, cluster: &Cluster) {
        let by_free = &mut self.by_free;
        let count = |node: Option<&Node>| node.map(partly_free).unwrap_or_default();
        self.nodes.follow(cluster, count, |before, now| {
            for g in before {
                by_free[usize::from(g)] -= 1;
            }
            for &g in now {
                by_free[usize::from(g)] += 1;
            }
        });
        self.live = self.by_free[self.smallest..1000].iter().map(|&n| u64::from(n)).sum();
    }

    /// `N(g)` for a free part of `units`.
    fn at(&self, units: i64) -> i64 {
        let g = (units / STEP) as usize;
        if g < self.smallest.max(1) || g >= 1000 {
            0
        } else {
            i64::from(self.by_free[g])
        }
    }
}

impl Scorer for SharePacking {
    fn name(&self) -> &'static str {
        "packing"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        let Some(asked) = share(cx) else { return false };
        let mut counts = self.counts.borrow_mut();
        counts.smallest = counts.smallest.min((asked / STEP).max(1) as usize);
        counts.follow(cx.cluster);
        true
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let (Some(asked), Some(pool)) = (share(cx), node.pool(ResourceId::GPU)) else {
            return Score::MIN;
        };
        let Some(free) = pool.free_per_instance().map(|q| q.units()).filter(|&f| f >= asked).min()
        else {
            return Score::MIN;
        };
        let counts = self.counts.borrow();
        let change = counts.at(free - asked) - counts.at(free) + 1;
        // Score::from_ratio(n, d) is 100 n / d points: here 50 − 50 × change / (L / 100).
        let live = counts.live.max(100) as i128;
        let numerator = (50 * live - 5000 * i128::from(change)).clamp(0, 100 * live);
        Score::from_ratio(numerator as u128, (100 * live) as u128)
    }
}

#[cfg(test)]
mod tests;
