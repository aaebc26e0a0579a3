//! A strategy as a short list of attempts ([`attempts`]): each attempt says which nodes it
//! looks at, how it selects and what to do when the nodes that could take the request are
//! busy. The runner ([`Scheduler::choose`](super::Scheduler)) tries them in order.

use smallvec::{smallvec, SmallVec};

use super::profile::Profile;
use super::scorers::best_fit;
use super::select::Select;
use super::stage::Prepared;
use crate::cluster::Cluster;
use crate::diagnosis::AttemptKind;
use crate::node::NodeIndex;
use crate::request::{Request, Strategy};

/// What a strategy does when an attempt finds nodes that could take the request later but
/// none now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnBusy {
    /// Stop: the request is pending.
    Wait,
    /// Stop: the request is infeasible (`fail_on_unavailable`).
    Fail,
    /// Try the next attempt.
    Next,
}

/// Which nodes an attempt looks at one by one.
#[derive(Clone, Copy, Debug)]
pub(super) enum Scope {
    /// Every alive node.
    Alive,
    /// One node (`None`: the named node does not exist).
    Only(Option<NodeIndex>),
}

pub(super) struct Attempt {
    pub(super) kind: AttemptKind,
    pub(super) scope: Scope,
    pub(super) select: Select,
    pub(super) on_busy: OnBusy,
    /// The label selector alternative in force (see [`AttemptDiagnosis::alternative`](crate::diagnosis::AttemptDiagnosis::alternative)).
    pub(super) alternative: Option<usize>,
}

/// The attempts a request's strategy makes, in order: the strategy's own attempts under
/// `label_selector`, then again under each `fallback_strategy` selector. While another
/// alternative remains, "wait" means "try the next one": the first alternative with a node that
/// can take the request now wins, and the request is pending only after all were tried.
pub(super) fn attempts(cluster: &Cluster, request: &Request) -> SmallVec<[Attempt; 2]> {
    let alternatives = 1 + request.fallback().len();
    let has_selectors = !request.label_selector().is_empty() || alternatives > 1;
    let mut all = SmallVec::new();
    for alternative in 0..alternatives {
        let last = alternative + 1 == alternatives;
        for mut attempt in strategy_attempts(cluster, request) {
            attempt.alternative = has_selectors.then_some(alternative);
            if !last && attempt.on_busy == OnBusy::Wait {
                attempt.on_busy = OnBusy::Next;
            }
            all.push(attempt);
        }
    }
    all
}

/// The attempts of the request's strategy alone.
fn strategy_attempts(cluster: &Cluster, request: &Request) -> SmallVec<[Attempt; 2]> {
    let attempt =
        |kind, scope, select, on_busy| Attempt { kind, scope, select, on_busy, alternative: None };
    let default = || attempt(AttemptKind::Default, Scope::Alive, Select::TopK, OnBusy::Wait);
    match request.strategy() {
        Strategy::Default => smallvec![default()],
        Strategy::Spread => {
            smallvec![attempt(AttemptKind::Spread, Scope::Alive, Select::RoundRobin, OnBusy::Wait)]
        }
        Strategy::Random => {
            smallvec![attempt(AttemptKind::Random, Scope::Alive, Select::Random, OnBusy::Wait)]
        }
        Strategy::NodeLabel(_) => {
            smallvec![attempt(AttemptKind::NodeLabel, Scope::Alive, Select::TopK, OnBusy::Wait)]
        }
        Strategy::ActorAffinity(_) => {
            smallvec![attempt(AttemptKind::ActorAffinity, Scope::Alive, Select::TopK, OnBusy::Wait)]
        }
        // Chosen by `choose_bundle`, before any attempt.
        Strategy::PlacementGroup(_) => SmallVec::new(),
        Strategy::NodeAffinity(affinity) => {
            let on_busy = match (
                affinity.soft,
                affinity.spill_on_unavailable,
                affinity.fail_on_unavailable,
            ) {
                (true, true, _) => OnBusy::Next,
                (false, _, true) => OnBusy::Fail,
                _ => OnBusy::Wait,
            };
            let target = attempt(
                AttemptKind::AffinityNode { node: affinity.node.clone(), soft: affinity.soft },
                Scope::Only(cluster.index_of(&affinity.node)),
                Select::Only,
                on_busy,
            );
            if affinity.soft {
                smallvec![target, default()]
            } else {
                smallvec![target]
            }
        }
    }
}

/// What the stages of one attempt read that depends on the request but not on the node,
/// computed once: the nodes satisfying each soft actor affinity expression, and the largest
/// totals when the profile's scorers read them.
pub(super) fn prepare(
    cluster: &Cluster,
    request: &Request,
    attempt: &Attempt,
    profile: &Profile,
) -> Prepared {
    let mut prepared = Prepared::default();
    if attempt.select != Select::TopK {
        return prepared;
    }
    if profile.needs_largest_total() {
        prepared.largest_total = Some(best_fit::largest_totals(cluster));
    }
    if let Strategy::ActorAffinity(affinity) = request.strategy() {
        for expression in affinity.expressions.iter().filter(|e| e.soft) {
            prepared.soft_affinity.push(cluster.actors().satisfying(
                request.namespace(),
                expression,
                cluster.label_index(),
                cluster.alive(),
            ));
        }
    }
    prepared
}
