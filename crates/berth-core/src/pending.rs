//! The pending queue: requests that wait for the cluster to change.
//!
//! The head drives it (the core never loops on its own): after anything that can make room it
//! calls [`PendingQueue::retry`] with what changed, and gets back what could now be placed.
//! Requests are retried in the order they arrived, so earlier requests get the first chance at
//! freed resources (seed 002's spill-over, made deterministic).
//!
//! Only requests the change can affect are re-decided: after resources are released on node
//! `n`, or `n` joins, a pending request is retried only if `n` can now take it by the checks
//! that place it ([`Scheduler::fits_now`]: the filters, or for a request into a placement
//! group, its bundles on `n`), since nothing else changed for it; infeasible requests are
//! retried when a node joins, never after a release (releases do not change totals). A
//! change to a node (capacity, labels, taints) re-decides every waiting request, and the loss
//! of a node every pending one, since what it waited for may be gone: it becomes infeasible,
//! and autoscaler demand, instead of waiting forever. A node joining or changing may bring a
//! resource a request named before any node had it: the name is resolved first.
//!
//! `tests/pending_model.rs` checks the triggers against re-deciding everything after every
//! step.

use rand::Rng;

use crate::cluster::{Allocation, Cluster};
use crate::diagnosis::Diagnosis;
use crate::node::NodeIndex;
use crate::pipeline::group::bundle_request;
use crate::pipeline::{Decision, Scheduler};
use crate::placement_group::{BundleSet, GroupSpec, PlacedGroup};
use crate::request::Request;
use crate::resource::ResourceSet;

/// What changed in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Work ended on this node and gave its resources back.
    Released(NodeIndex),
    /// This node joined the cluster.
    NodeJoined(NodeIndex),
    /// This node changed: its capacity (up or down), labels or taints (a removed taint wakes
    /// the requests it kept away), or it became alive again after draining or being suspect.
    NodeChanged(NodeIndex),
    /// This node died, was removed, started draining, or became suspect.
    NodeLost(NodeIndex),
    /// An actor was placed, moved or removed: requests waiting on actor affinity (or kept away
    /// by an actor's anti-affinity) may now be placed.
    ActorsChanged,
    /// A placement group got its bundles: requests waiting to go into a group may now be
    /// placed (groups waiting themselves are not helped).
    GroupReserved,
    /// Anything may have changed (a configuration reload): retry everything.
    Everything,
}

/// Whether a queued request could be placed on the cluster as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Some node could hold it once work ends there.
    Pending,
    /// No node could ever hold it: autoscaler demand.
    Infeasible,
}

/// One queued request.
#[derive(Clone, Debug)]
pub struct QueuedRequest<K> {
    /// The caller's key (actor or task ID).
    pub key: K,
    /// The request.
    pub request: Request,
    /// Pending or infeasible, as of the last attempt.
    pub waiting: Waiting,
    /// Why, as of the last attempt.
    pub diagnosis: Diagnosis,
}

/// Requests waiting to be placed, in arrival order.
#[derive(Clone, Debug, Default)]
pub struct PendingQueue<K> {
    entries: Vec<QueuedRequest<K>>,
}

impl<K: PartialEq> PendingQueue<K> {
    /// An empty queue.
    pub fn new() -> PendingQueue<K> {
        PendingQueue { entries: Vec::new() }
    }

    /// Places `request` now if it can; otherwise queues it at the back and returns `None`.
    /// Infeasible requests are queued too: they are the autoscaler's demand and are placed when
    /// a node that can hold them joins. A caller that must fail them instead (a hard node
    /// affinity with `fail_on_unavailable`) removes them with [`PendingQueue::remove`].
    pub fn submit<R: Rng + ?Sized>(
        &mut self,
        key: K,
        request: Request,
        scheduler: &mut Scheduler,
        cluster: &mut Cluster,
        rng: &mut R,
    ) -> Option<Allocation> {
        let (waiting, diagnosis) = match scheduler.place(cluster, &request, rng) {
            Decision::Placed(allocation) => return Some(allocation),
            Decision::Pending(diagnosis) => (Waiting::Pending, diagnosis),
            Decision::Infeasible(diagnosis) => (Waiting::Infeasible, diagnosis),
        };
        self.entries.push(QueuedRequest { key, request, waiting, diagnosis });
        None
    }

    /// Removes a request (cancelled, or its owner died).
    pub fn remove(&mut self, key: &K) -> Option<QueuedRequest<K>> {
        let position = self.entries.iter().position(|e| &e.key == key)?;
        Some(self.entries.remove(position))
    }

    /// The queued requests, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &QueuedRequest<K>> {
        self.entries.iter()
    }

    /// The most recently queued request (the one [`PendingQueue::submit`] just queued).
    pub fn last(&self) -> Option<&QueuedRequest<K>> {
        self.entries.last()
    }

    /// Number of queued requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Retries, oldest first, every request that `trigger` can help; returns the ones placed,
    /// in the order they were placed, and keeps the others with their new diagnosis.
    pub fn retry<R: Rng + ?Sized>(
        &mut self,
        trigger: Trigger,
        scheduler: &mut Scheduler,
        cluster: &mut Cluster,
        rng: &mut R,
    ) -> Vec<(K, Allocation)> {
        let mut placed = Vec::new();
        let mut kept = Vec::with_capacity(self.entries.len());
        for mut entry in self.entries.drain(..) {
            // A node may have brought a resource the request named before any node had it.
            if matches!(
                trigger,
                Trigger::NodeJoined(_) | Trigger::NodeChanged(_) | Trigger::Everything
            ) {
                entry.request.resolve_unknown(cluster.registry());
            }
            if !may_help(trigger, &entry, scheduler, cluster) {
                kept.push(entry);
                continue;
            }
            match scheduler.place(cluster, &entry.request, rng) {
                Decision::Placed(allocation) => placed.push((entry.key, allocation)),
                Decision::Pending(diagnosis) => {
                    entry.waiting = Waiting::Pending;
                    entry.diagnosis = diagnosis;
                    kept.push(entry);
                }
                Decision::Infeasible(diagnosis) => {
                    entry.waiting = Waiting::Infeasible;
                    entry.diagnosis = diagnosis;
                    kept.push(entry);
                }
            }
        }
        self.entries = kept;
        placed
    }
}

fn may_help<K>(
    trigger: Trigger,
    entry: &QueuedRequest<K>,
    scheduler: &Scheduler,
    cluster: &Cluster,
) -> bool {
    match (trigger, entry.waiting) {
        (Trigger::Everything | Trigger::NodeChanged(_), _) => true,
        (Trigger::NodeLost(_), waiting) => waiting == Waiting::Pending,
        (Trigger::GroupReserved, _) => {
            matches!(entry.request.strategy(), crate::request::Strategy::PlacementGroup(_))
        }
        (Trigger::ActorsChanged, Waiting::Infeasible) => false,
        (Trigger::ActorsChanged, Waiting::Pending) => {
            entry.request.actor().is_some()
                || matches!(entry.request.strategy(), crate::request::Strategy::ActorAffinity(_))
        }
        (Trigger::Released(_), Waiting::Infeasible) => false,
        (Trigger::NodeJoined(_), Waiting::Infeasible) => true,
        (Trigger::Released(node) | Trigger::NodeJoined(node), Waiting::Pending) => {
            scheduler.fits_now(cluster, &entry.request, node)
        }
    }
}

/// Whether `trigger` may let a waiting placement group be reserved, by the rules for requests
/// with the group's bundles still to place as its requests: a release on (or the arrival of)
/// node `n` helps a pending group only when one of those bundles fits on `n` now and, for one
/// alternative, the bundles ask no more in all than the alive nodes have free together; changes
/// to actors or other groups never help one. Both conditions are needed for any plan, so no
/// group that could be reserved is left waiting. `placed` is the group's reservation when it
/// lost bundles with a node (only those are placed again); `None` while it waits whole. `free`
/// is what the alive nodes have free together, summed on first use: the caller keeps it for
/// the groups it asks about at once.
pub fn group_may_help(
    trigger: Trigger,
    waiting: Waiting,
    (spec, placed): (&GroupSpec, Option<&PlacedGroup>),
    scheduler: &Scheduler,
    cluster: &Cluster,
    free: &mut Option<ResourceSet>,
) -> bool {
    match (trigger, waiting) {
        (Trigger::Everything | Trigger::NodeChanged(_), _) => true,
        (Trigger::NodeLost(_), waiting) => waiting == Waiting::Pending,
        (Trigger::ActorsChanged | Trigger::GroupReserved, _) => false,
        (Trigger::Released(_), Waiting::Infeasible) => false,
        (Trigger::NodeJoined(_), Waiting::Infeasible) => true,
        (Trigger::Released(node) | Trigger::NodeJoined(node), Waiting::Pending) => {
            let free = free.get_or_insert_with(|| {
                let mut sum = ResourceSet::new();
                for index in cluster.alive().iter() {
                    if let Some(n) = cluster.node(index) {
                        sum.add(n.available());
                    }
                }
                sum
            });
            let room = |set: &BundleSet, todo: &mut dyn Iterator<Item = usize>| {
                let mut demand = ResourceSet::new();
                let mut fits_one = false;
                let mut previous: Option<usize> = None;
                for i in todo {
                    demand.add(&set.bundles[i]);
                    // A bundle like the one before it fits where that one does.
                    let same = previous.is_some_and(|p| {
                        set.bundles[i] == set.bundles[p] && set.selector(i) == set.selector(p)
                    });
                    if !fits_one && !same {
                        fits_one = bundle_request(cluster, spec, set, i)
                            .is_some_and(|request| scheduler.fits_now(cluster, &request, node));
                    }
                    previous = Some(i);
                }
                fits_one && demand.is_subset_of(free)
            };
            match placed {
                Some(group) => room(group.bundle_set(), &mut group.lost().into_iter()),
                None => spec.alternatives.iter().any(|set| room(set, &mut (0..set.bundles.len()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::node::NodeId;
    use crate::pipeline::SchedulerConfig;
    use crate::quantity::Quantity;
    use crate::request::Strategy;
    use crate::resource::ResourceId;
    use crate::testutil::{cluster, index, request, resources};

    struct Fixture {
        cluster: Cluster,
        scheduler: Scheduler,
        rng: ChaCha8Rng,
        queue: PendingQueue<&'static str>,
    }

    impl Fixture {
        fn new(nodes: &[(&str, &str)]) -> Fixture {
            Fixture {
                cluster: cluster(nodes),
                scheduler: Scheduler::new(SchedulerConfig::default()),
                rng: ChaCha8Rng::seed_from_u64(7),
                queue: PendingQueue::new(),
            }
        }

        fn submit(&mut self, key: &'static str, spec: &str) -> Option<Allocation> {
            let req = request(&mut self.cluster, spec, Strategy::Default);
            self.queue.submit(key, req, &mut self.scheduler, &mut self.cluster, &mut self.rng)
        }

        fn retry(&mut self, trigger: Trigger) -> Vec<&'static str> {
            let placed =
                self.queue.retry(trigger, &mut self.scheduler, &mut self.cluster, &mut self.rng);
            placed.into_iter().map(|(key, _)| key).collect()
        }

        fn waiting(&self) -> Vec<(&'static str, Waiting)> {
            self.queue.iter().map(|e| (e.key, e.waiting)).collect()
        }
    }

    #[test]
    fn released_resources_go_to_the_oldest_request_first() {
        let mut f = Fixture::new(&[("a", "CPU=4")]);
        let running = f.submit("running", "CPU=4").expect("fits");
        assert!(f.submit("big", "CPU=3").is_none());
        assert!(f.submit("small", "CPU=2").is_none());
        assert!(f.submit("tiny", "CPU=1").is_none());
        assert_eq!(f.queue.len(), 3);
        f.cluster.release(&running);
        let node = index(&f.cluster, "a");
        // big (3) comes first; small (2) no longer fits; tiny (1) takes the rest.
        assert_eq!(f.retry(Trigger::Released(node)), ["big", "tiny"]);
        assert_eq!(f.waiting(), [("small", Waiting::Pending)]);
    }

    #[test]
    fn releases_do_not_retry_infeasible_requests_but_new_nodes_do() {
        let mut f = Fixture::new(&[("a", "CPU=4")]);
        let running = f.submit("running", "CPU=1").expect("fits");
        assert!(f.submit("gpu", "CPU=1,GPU=1").is_none());
        assert_eq!(f.waiting(), [("gpu", Waiting::Infeasible)]);
        f.cluster.release(&running);
        assert!(f.retry(Trigger::Released(index(&f.cluster, "a"))).is_empty());
        let total = resources(f.cluster.registry_mut(), "CPU=2,GPU=1");
        let node = f.cluster.add_node(NodeId::new("g").unwrap(), total).unwrap();
        assert_eq!(f.retry(Trigger::NodeJoined(node)), ["gpu"]);
        assert!(f.queue.is_empty());
    }

    #[test]
    fn capacity_growth_places_what_waited() {
        let mut f = Fixture::new(&[("a", "CPU=2")]);
        f.submit("first", "CPU=2").expect("fits");
        assert!(f.submit("second", "CPU=2").is_none());
        let node = index(&f.cluster, "a");
        f.cluster.set_capacity(node, ResourceId::CPU, Quantity::from_whole(4)).unwrap();
        assert_eq!(f.retry(Trigger::NodeChanged(node)), ["second"]);
    }

    #[test]
    fn an_infeasible_request_becomes_pending_when_a_node_could_hold_it() {
        let mut f = Fixture::new(&[("a", "CPU=2")]);
        assert!(f.submit("big", "CPU=4").is_none());
        assert_eq!(f.waiting(), [("big", Waiting::Infeasible)]);
        let node = index(&f.cluster, "a");
        f.submit("filler", "CPU=2").expect("fits");
        f.cluster.set_capacity(node, ResourceId::CPU, Quantity::from_whole(4)).unwrap();
        // 2 of 4 free now: big could fit once filler ends.
        assert!(f.retry(Trigger::NodeChanged(node)).is_empty());
        assert_eq!(f.waiting(), [("big", Waiting::Pending)]);
        assert!(f.queue.iter().next().unwrap().diagnosis.attempts[0].could_fit_later);
    }

    #[test]
    fn pending_requests_become_infeasible_when_what_they_waited_for_is_gone() {
        let mut f = Fixture::new(&[("a", "CPU=4"), ("b", "CPU=2")]);
        f.submit("filler", "CPU=4").expect("fits");
        f.submit("filler-b", "CPU=2").expect("fits");
        assert!(f.submit("waits-for-a", "CPU=3").is_none());
        assert_eq!(f.waiting(), [("waits-for-a", Waiting::Pending)]);
        let a = index(&f.cluster, "a");
        f.cluster.set_capacity(a, ResourceId::CPU, Quantity::from_whole(2)).unwrap();
        assert!(f.retry(Trigger::NodeChanged(a)).is_empty());
        assert_eq!(f.waiting(), [("waits-for-a", Waiting::Infeasible)]);

        let mut f = Fixture::new(&[("a", "CPU=4"), ("b", "CPU=2")]);
        f.submit("filler", "CPU=4").expect("fits");
        assert!(f.submit("waits-for-a", "CPU=3").is_none());
        let a = index(&f.cluster, "a");
        f.cluster.set_state(a, crate::node::NodeState::Dead).unwrap();
        // A release elsewhere does not re-decide it; losing the node it waited for does.
        assert!(f.retry(Trigger::Released(index(&f.cluster, "b"))).is_empty());
        assert_eq!(f.waiting(), [("waits-for-a", Waiting::Pending)]);
        assert!(f.retry(Trigger::NodeLost(a)).is_empty());
        assert_eq!(f.waiting(), [("waits-for-a", Waiting::Infeasible)]);
    }

    #[test]
    fn work_waiting_for_a_busy_bundle_is_placed_when_the_bundle_frees() {
        use crate::placement_group::{BundleSet, GroupId, GroupSpec, GroupStrategy};
        use crate::request::GroupPlacement;
        // The bundle takes the whole node: nothing is free on the node itself.
        let mut f = Fixture::new(&[("a", "CPU=2")]);
        let bundle = resources(f.cluster.registry_mut(), "CPU=2");
        let spec = GroupSpec {
            id: GroupId::new("pg").unwrap(),
            name: String::new(),
            namespace: "default".into(),
            strategy: GroupStrategy::Pack,
            alternatives: vec![BundleSet {
                bundles: vec![bundle],
                selectors: Vec::new(),
                unknown: Vec::new(),
            }],
            tolerations: Default::default(),
        };
        let created = f.scheduler.place_group(&mut f.cluster, &spec);
        assert!(matches!(created, crate::pipeline::group::GroupDecision::Created { .. }));
        let into = || {
            Strategy::PlacementGroup(GroupPlacement {
                group: GroupId::new("pg").unwrap(),
                bundle: Some(0),
            })
        };
        let first = request(&mut f.cluster, "CPU=2", into());
        let holding = f
            .queue
            .submit("first", first, &mut f.scheduler, &mut f.cluster, &mut f.rng)
            .expect("the bundle takes it");
        let second = request(&mut f.cluster, "CPU=2", into());
        assert!(f
            .queue
            .submit("second", second, &mut f.scheduler, &mut f.cluster, &mut f.rng)
            .is_none());
        assert_eq!(f.waiting(), [("second", Waiting::Pending)]);
        // The first ends: the bundle (not the node's free pool) takes the second.
        f.cluster.release(&holding);
        assert_eq!(f.retry(Trigger::Released(holding.node())), ["second"]);
        assert!(f.queue.is_empty());
    }

    #[test]
    fn a_resource_no_node_has_is_infeasible_until_a_node_brings_it() {
        let mut f = Fixture::new(&[("a", "CPU=4")]);
        let names = f.cluster.registry().len();
        let mut unknown = crate::resource::UnknownResources::default();
        unknown.push("TPU", Quantity::from_whole(2));
        let tpu =
            request(&mut f.cluster, "CPU=1", Strategy::Default).with_unknown_resources(unknown);
        assert!(f.queue.submit("tpu", tpu, &mut f.scheduler, &mut f.cluster, &mut f.rng).is_none());
        assert_eq!(f.waiting(), [("tpu", Waiting::Infeasible)]);
        let note = f.queue.iter().next().unwrap().diagnosis.attempts[0].note.clone();
        assert_eq!(note.as_deref(), Some("no node has the resource \"TPU\" (asked 2)"));
        assert_eq!(f.cluster.registry().len(), names, "asking did not intern the name");
        // A node with too few TPUs: the name resolves, the request waits for a bigger one.
        let small = resources(f.cluster.registry_mut(), "CPU=2,TPU=1");
        let node = f.cluster.add_node(NodeId::new("t1").unwrap(), small).unwrap();
        assert!(f.retry(Trigger::NodeJoined(node)).is_empty());
        assert_eq!(f.waiting(), [("tpu", Waiting::Infeasible)]);
        assert!(f.queue.iter().next().unwrap().request.unknown_resources().is_empty());
        let big = resources(f.cluster.registry_mut(), "CPU=2,TPU=4");
        let node = f.cluster.add_node(NodeId::new("t4").unwrap(), big).unwrap();
        assert_eq!(f.retry(Trigger::NodeJoined(node)), ["tpu"]);
    }

    #[test]
    fn removed_requests_are_not_retried() {
        let mut f = Fixture::new(&[("a", "CPU=1")]);
        let running = f.submit("running", "CPU=1").expect("fits");
        assert!(f.submit("gone", "CPU=1").is_none());
        assert_eq!(f.queue.remove(&"gone").map(|e| e.key), Some("gone"));
        assert_eq!(f.queue.remove(&"gone").map(|e| e.key), None);
        assert!(f.submit("stays", "CPU=1").is_none());
        f.cluster.release(&running);
        assert_eq!(f.retry(Trigger::Everything), ["stays"], "only the remaining request is placed");
        assert!(f.queue.is_empty());
    }
}
