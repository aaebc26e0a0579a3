//! The last hour of the cluster for the overview's charts: every [`SAMPLE_EVERY`] the head
//! notes, from the published view, each resource's reserved and total amounts over the alive
//! and draining nodes and how many requests wait, and keeps the last [`KEPT`] samples.
//!
//! Kept in memory only, bounded, and lost when the head restarts: the long-term store of
//! such series is Prometheus (`/metrics`), which this does not replace.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_api::rest::NodeState;
use tokio::sync::watch;

use crate::view::View;

/// How often a sample is taken.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Samples kept: an hour of them.
pub(crate) const KEPT: usize = 360;

/// One moment of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    /// When (ms since the Unix epoch).
    pub(crate) at_ms: u64,
    /// Resource name to (reserved, total) over the alive and draining nodes.
    pub(crate) resources: BTreeMap<String, (f64, f64)>,
    /// Requests waiting to be placed.
    pub(crate) waiting: u64,
}

impl Sample {
    /// The sample of `view` at `at_ms`.
    pub(crate) fn of(view: &View, at_ms: u64) -> Sample {
        let mut resources: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for node in view.nodes.values().filter(|n| n.state != NodeState::Dead) {
            for (name, amounts) in node.resources.iter() {
                let entry = resources.entry(name.to_string()).or_default();
                entry.0 += amounts.used.to_f64();
                entry.1 += amounts.total.to_f64();
            }
        }
        Sample { at_ms, resources, waiting: view.waiting.len() as u64 }
    }
}

/// The ring of samples, shared by the sampler and the pages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Samples(Arc<Mutex<VecDeque<Sample>>>);

impl Samples {
    /// Adds a sample, dropping the oldest beyond [`KEPT`].
    pub(crate) fn push(&self, sample: Sample) {
        // Every update is one push and at most one pop: a panic cannot leave it half-done.
        let mut ring = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if ring.len() >= KEPT {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// The samples, oldest first.
    pub(crate) fn all(&self) -> Vec<Sample> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().cloned().collect()
    }
}

/// Takes a sample of the published view at once and then every [`SAMPLE_EVERY`], until
/// `shutdown` turns true or the view's sender is gone.
pub(crate) async fn run(
    samples: Samples,
    mut view: watch::Receiver<Arc<View>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let current = view.borrow_and_update().clone();
                samples.push(Sample::of(&current, crate::clock::now_ms()));
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
            }
            changed = view.changed() => {
                // Only to notice the head going away; samples keep their own pace.
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_hour_oldest_first() {
        let samples = Samples::default();
        for at in 0..(KEPT as u64 + 5) {
            samples.push(Sample { at_ms: at, resources: BTreeMap::new(), waiting: at });
        }
        let all = samples.all();
        assert_eq!(all.len(), KEPT);
        assert_eq!(all[0].at_ms, 5);
        assert_eq!(all.last().unwrap().at_ms, KEPT as u64 + 4);
    }
}
