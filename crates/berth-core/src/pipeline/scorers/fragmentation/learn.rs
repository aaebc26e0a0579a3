//! Typical shapes learned from the requests a scorer ranks nodes for (`shapes: learned`, the
//! default profile's on clusters with GPUs).
//!
//! Assumptions: the requests seen so far are a fair sample of those to come; nobody has to
//! describe the workload up front. Rules: every request the scorer ranks nodes for counts once
//! by its shape (CPU, GPU, the accelerator types its label selector accepts); the learner
//! hands the scorer every shape counted, weighted by its count, as counted at its last rebuild:
//! after the 1st, 2nd, 4th, … request and then every [`REBUILD_EVERY`] requests. The typical shapes are
//! those that together cover [`COVERAGE_PERCENT`] of the weight (the FGD paper's rule), cut
//! once the scorer has weighed the counts by the cluster's supply
//! ([`ShapeTable::covering`](super::ShapeTable::covering)): a shape that is rare but that few
//! nodes could take stays. A request retried
//! while it waits counts again: the shapes that wait weigh more, which is where room is
//! wanted. Behaviour: the first request is ranked for its own shape (it is counted before the
//! scorer builds its table), and within a few dozen requests the shapes settle on those of a
//! stationary workload.
//!
//! Beside what it counts, the scorer adds a whole node of each of the cluster's largest kinds
//! and one whole GPU as shapes, each weighing one in [`WHOLE_NODE_SHARE`] of the requests seen:
//! the largest requests fit only on those nodes, and until one comes nothing else keeps them
//! whole; nor, until a request for a whole GPU comes, would anything keep a share off a whole
//! GPU.

use std::collections::BTreeMap;

use super::Shape;
use crate::labels::ACCELERATOR_TYPE;
use crate::quantity::Quantity;
use crate::request::Request;
use crate::resource::ResourceId;
use crate::selector::Condition;

/// The share of the weight that the typical shapes cover, in percent.
pub const COVERAGE_PERCENT: u64 = 95;
/// Requests between two rebuilds once past the doubling phase.
pub const REBUILD_EVERY: u64 = 256;
/// A whole node of the largest kind and a whole GPU are shapes from the start, each weighing one
/// in this many of the requests seen (see `learned_table` in the fragmentation scorer).
pub const WHOLE_NODE_SHARE: u64 = 1000;

/// A shape without its weight: CPU units, GPU units, accepted accelerator types.
type Key = (i64, i64, Vec<String>);

/// The counts of the shapes seen, and the shapes as counted at the last rebuild (the scorer
/// builds its table from those: [`Learner::built`]).
#[derive(Debug, Default)]
pub struct Learner {
    counts: BTreeMap<Key, u32>,
    seen: u64,
    /// The shapes as counted at the last rebuild.
    built: Vec<Shape>,
    /// Bumped at every rebuild, so that tables derived from this one know they are stale.
    generation: u64,
}

impl Learner {
    /// Counts `request`; rebuilds the table when it is due.
    pub fn observe(&mut self, request: &Request) {
        let resources = request.resources();
        let key = (
            resources.get(ResourceId::CPU).units(),
            resources.get(ResourceId::GPU).units(),
            accelerators(request),
        );
        *self.counts.entry(key).or_default() += 1;
        self.seen += 1;
        if self.seen.is_power_of_two() && self.seen < REBUILD_EVERY
            || self.seen.is_multiple_of(REBUILD_EVERY)
        {
            self.built = self.shapes();
            self.generation += 1;
        }
    }

    /// The shapes as counted at the last rebuild.
    pub fn built(&self) -> &[Shape] {
        &self.built
    }

    /// Rebuilds so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every shape counted, most frequent first (ties: by CPU, GPU and types, ascending).
    pub fn shapes(&self) -> Vec<Shape> {
        let mut ranked: Vec<(&Key, u32)> = self.counts.iter().map(|(k, &n)| (k, n)).collect();
        // Stable: equal counts keep the key order.
        ranked.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        ranked
            .into_iter()
            .map(|((cpu, gpu, accelerators), count)| Shape {
                cpu: Quantity::from_units(*cpu),
                gpu: Quantity::from_units(*gpu),
                accelerators: accelerators.clone(),
                weight: count,
            })
            .collect()
    }
}

/// The accelerator types `request` accepts, sorted and unique: those its label selector
/// allows for `berth.io/accelerator-type` by `in(…)` or `=`; empty (any) otherwise.
pub fn accelerators(request: &Request) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for (key, conditions) in request.label_selector().iter() {
        if key != ACCELERATOR_TYPE {
            continue;
        }
        for condition in conditions {
            match condition {
                Condition::In(values) => types.extend(values.iter().cloned()),
                Condition::Equal(value) => types.push(value.clone()),
                _ => {}
            }
        }
    }
    types.sort_unstable();
    types.dedup();
    types
}

#[cfg(test)]
mod tests {
    use super::super::ShapeTable;
    use super::*;
    use crate::request::Strategy;
    use crate::resource::ResourceRegistry;
    use crate::selector::LabelSelector;
    use crate::testutil::{request, resources};
    use crate::Cluster;

    #[test]
    fn shapes_are_counted_and_cut_at_95_percent_of_the_weight() {
        let mut c = Cluster::new(ResourceRegistry::default());
        let mut learner = Learner::default();
        let share = request(&mut c, "CPU=4,GPU=0.5", Strategy::Default);
        let whole = request(&mut c, "CPU=8,GPU=1", Strategy::Default);
        let set = resources(c.registry_mut(), "CPU=2,GPU=2");
        let t4 = Request::new(set, Strategy::Default, c.registry()).unwrap().with_label_selector(
            LabelSelector::parse([(ACCELERATOR_TYPE, "in(T4,A10,T4)")]).unwrap(),
        );
        for _ in 0..60 {
            learner.observe(&share);
        }
        for _ in 0..36 {
            learner.observe(&whole);
        }
        for _ in 0..4 {
            learner.observe(&t4);
        }
        let shapes = learner.shapes();
        assert_eq!(shapes.len(), 3);
        assert_eq!((shapes[0].gpu, shapes[0].weight), (Quantity::parse("0.5").unwrap(), 60));
        assert_eq!((shapes[1].cpu, shapes[1].weight), (Quantity::from_whole(8), 36));
        assert_eq!((shapes[2].gpu, shapes[2].weight), (Quantity::from_whole(2), 4));
        // 60 + 36 = 96 of 100 requests: the third shape is not needed for 95%.
        let typical = ShapeTable::new(&shapes).covering(COVERAGE_PERCENT);
        assert_eq!(typical.total_weight(), 96);
        assert_eq!(accelerators(&t4), ["A10", "T4"]);
        assert!(accelerators(&share).is_empty());
        // Rebuilt after requests 1, 2, 4, …, 64 (7 times) within the first 100.
        assert_eq!(learner.generation(), 7);
        // The last rebuild, at 64 requests, saw 60 shares and 4 whole GPUs.
        assert_eq!(ShapeTable::new(learner.built()).total_weight(), 64);
    }
}
