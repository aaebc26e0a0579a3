//! Why nodes were rejected: the reasons filters give, and the per-reason counts users see.
//!
//! Every "pending because" and every line of `berth explain` comes from these reasons, recorded
//! by the pipeline as it runs; there is no second code path that guesses.

use std::fmt;

use smallvec::SmallVec;

use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, Shortfall};
use crate::taints::{TaintId, TaintTable};

/// What a description reads besides the reasons: the names behind resource and taint IDs.
/// A [`Cluster`](crate::Cluster) converts into its own (`diagnosis.describe(&cluster)`); a
/// caller without one builds them from the registry and taint table it has.
#[derive(Clone, Copy)]
pub struct Names<'a> {
    /// Resource names by ID.
    pub resources: &'a ResourceRegistry,
    /// Taints by ID.
    pub taints: &'a TaintTable,
}

/// The expression number of [`Reason::ActorAffinity`] when no expression holds (`match: any`).
pub const ANY_EXPRESSION: u16 = u16::MAX;

/// Why one node cannot take a request, with the figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The node is dead.
    Dead,
    /// The node is draining.
    Draining,
    /// The node's heartbeats are late: it may come back, so this is worth waiting for.
    Suspect,
    /// The request's hard node affinity names another node.
    NotAffinityNode,
    /// The node's labels do not match the label selector in force.
    LabelMismatch,
    /// Hard actor affinity expression number `.0` does not hold on the node
    /// ([`ANY_EXPRESSION`]: with `match: any`, none of them holds).
    ActorAffinity(u16),
    /// A placed actor's hard anti-affinity keeps this actor off the node (the symmetric rule).
    AntiAffinityGuard,
    /// The node already holds a bundle of this `STRICT_SPREAD` group.
    SameGroup,
    /// The node has a taint the request does not tolerate.
    UntoleratedTaint(TaintId),
    /// The node lacks a resource even when empty.
    InsufficientTotal(Shortfall),
    /// The node lacks a resource now.
    InsufficientAvailable(Shortfall),
    /// Enough of a unit-instance resource is free, but not inside one instance (a fraction) or
    /// not as whole instances (a whole request).
    Fragmented {
        /// The resource.
        resource: ResourceId,
        /// The quantity asked.
        requested: Quantity,
    },
    /// Placing the request would leave less of `resource` (CPU or memory) free than the
    /// node keeps for its idle `primary` resource (SRA proportional, see
    /// [`crate::pipeline::scorers::sra`]).
    KeptForPrimary {
        /// The primary resource (`nvidia.com/gpu`).
        primary: ResourceId,
        /// How much of the primary resource is idle on the node.
        idle: Quantity,
        /// The secondary resource that would run short: CPU or memory.
        resource: ResourceId,
        /// How much of `resource` the node keeps free for its idle primary resource.
        keep: Quantity,
        /// How much more of `resource` would have to be free: `keep − (free − requested)`.
        short: Quantity,
    },
}

/// A [`Reason`] without its figures: what the [`Diagnosis`] counts nodes by. Declared in the
/// order ties are listed in: what the request could wait for first, then what rules nodes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReasonKind {
    /// See [`Reason::InsufficientAvailable`].
    InsufficientAvailable(ResourceId),
    /// See [`Reason::Fragmented`].
    Fragmented(ResourceId),
    /// See [`Reason::ActorAffinity`].
    ActorAffinity(u16),
    /// See [`Reason::AntiAffinityGuard`].
    AntiAffinityGuard,
    /// See [`Reason::Suspect`].
    Suspect,
    /// See [`Reason::KeptForPrimary`]: too little `resource` would be left for idle `primary`.
    KeptForPrimary {
        /// The primary resource.
        primary: ResourceId,
        /// CPU or memory.
        resource: ResourceId,
    },
    /// See [`Reason::SameGroup`].
    SameGroup,
    /// See [`Reason::InsufficientTotal`].
    InsufficientTotal(ResourceId),
    /// See [`Reason::UntoleratedTaint`].
    UntoleratedTaint(TaintId),
    /// See [`Reason::LabelMismatch`].
    LabelMismatch,
    /// See [`Reason::NotAffinityNode`].
    NotAffinityNode,
    /// See [`Reason::Draining`].
    Draining,
    /// See [`Reason::Dead`].
    Dead,
}

impl Reason {
    /// The reason without figures.
    pub fn kind(&self) -> ReasonKind {
        match *self {
            Reason::Dead => ReasonKind::Dead,
            Reason::Draining => ReasonKind::Draining,
            Reason::Suspect => ReasonKind::Suspect,
            Reason::NotAffinityNode => ReasonKind::NotAffinityNode,
            Reason::LabelMismatch => ReasonKind::LabelMismatch,
            Reason::ActorAffinity(i) => ReasonKind::ActorAffinity(i),
            Reason::AntiAffinityGuard => ReasonKind::AntiAffinityGuard,
            Reason::SameGroup => ReasonKind::SameGroup,
            Reason::UntoleratedTaint(taint) => ReasonKind::UntoleratedTaint(taint),
            Reason::InsufficientTotal(s) => ReasonKind::InsufficientTotal(s.resource),
            Reason::InsufficientAvailable(s) => ReasonKind::InsufficientAvailable(s.resource),
            Reason::Fragmented { resource, .. } => ReasonKind::Fragmented(resource),
            Reason::KeptForPrimary { primary, resource, .. } => {
                ReasonKind::KeptForPrimary { primary, resource }
            }
        }
    }

    /// A sentence for one node: `needs 2 GPU, has 1 in total`.
    pub fn describe<'n>(&self, names: impl Into<Names<'n>>) -> String {
        let names = names.into();
        let registry = names.resources;
        match *self {
            Reason::InsufficientTotal(s) => {
                format!(
                    "needs {} {}, has {} in total",
                    s.requested,
                    registry.name(s.resource),
                    s.have
                )
            }
            Reason::InsufficientAvailable(s) => {
                format!("needs {} {}, has {} free", s.requested, registry.name(s.resource), s.have)
            }
            Reason::Fragmented { resource, requested } => {
                let name = registry.name(resource);
                if requested.is_whole() {
                    format!("needs {requested} whole {name} instances; free {name} is split across instances")
                } else {
                    format!("needs {requested} {name} inside one instance; no single instance has that much free")
                }
            }
            Reason::KeptForPrimary { primary, idle, resource, keep, short } => {
                let (primary, name) = (registry.name(primary), registry.name(resource));
                // `short` beyond `keep` means the request asks more than is free at all.
                let left = match keep.checked_sub(short) {
                    Some(left) => format!("leaves {left} {name} free"),
                    None => format!("asks more {name} than is free"),
                };
                format!(
                    "{left}, below the {keep} {name} kept for {idle} idle {primary}: \
                     {short} {name} short"
                )
            }
            Reason::UntoleratedTaint(taint) => {
                let taint = names.taints.get(taint);
                format!(
                    "has taint {}={}, which the request does not tolerate",
                    taint.key, taint.value
                )
            }
            _ => self.kind().describe(names),
        }
    }
}

impl ReasonKind {
    /// True when the node could take the request once work ends there (the request is
    /// pending, not infeasible, on its account).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ReasonKind::InsufficientAvailable(_)
                | ReasonKind::Fragmented(_)
                | ReasonKind::KeptForPrimary { .. }
                | ReasonKind::ActorAffinity(_)
                | ReasonKind::AntiAffinityGuard
                | ReasonKind::Suspect
        )
    }

    /// A short phrase for counts: `3 too little GPU in total`.
    pub fn describe<'n>(self, names: impl Into<Names<'n>>) -> String {
        let names = names.into();
        let registry = names.resources;
        match self {
            ReasonKind::Dead => "dead".to_string(),
            ReasonKind::Draining => "draining".to_string(),
            ReasonKind::Suspect => "suspect (heartbeats late)".to_string(),
            ReasonKind::NotAffinityNode => "not the affinity node".to_string(),
            ReasonKind::LabelMismatch => "labels do not match".to_string(),
            ReasonKind::ActorAffinity(ANY_EXPRESSION) => {
                "no hard actor affinity expression holds".to_string()
            }
            ReasonKind::ActorAffinity(i) => format!("hard actor affinity expression {i} fails"),
            ReasonKind::AntiAffinityGuard => {
                "kept away by a placed actor's anti-affinity".to_string()
            }
            ReasonKind::SameGroup => "already hold a bundle of the group".to_string(),
            ReasonKind::UntoleratedTaint(taint) => {
                let taint = names.taints.get(taint);
                format!("untolerated taint {}={}", taint.key, taint.value)
            }
            ReasonKind::InsufficientTotal(r) => format!("too little {} in total", registry.name(r)),
            ReasonKind::InsufficientAvailable(r) => format!("too little {} free", registry.name(r)),
            ReasonKind::Fragmented(r) => {
                format!("{} fragmented across instances", registry.name(r))
            }
            ReasonKind::KeptForPrimary { primary, resource } => format!(
                "would leave too little {} for idle {}",
                registry.name(resource),
                registry.name(primary)
            ),
        }
    }

    /// A stable machine-readable code: `insufficient_total:GPU`, `untolerated_taint:k=v`.
    pub fn code<'n>(self, names: impl Into<Names<'n>>) -> String {
        let names = names.into();
        let registry = names.resources;
        match self {
            ReasonKind::Dead => "dead".to_string(),
            ReasonKind::Draining => "draining".to_string(),
            ReasonKind::Suspect => "suspect".to_string(),
            ReasonKind::NotAffinityNode => "not_affinity_node".to_string(),
            ReasonKind::LabelMismatch => "label_mismatch".to_string(),
            ReasonKind::ActorAffinity(ANY_EXPRESSION) => "actor_affinity:any".to_string(),
            ReasonKind::ActorAffinity(i) => format!("actor_affinity:{i}"),
            ReasonKind::AntiAffinityGuard => "anti_affinity_guard".to_string(),
            ReasonKind::SameGroup => "same_group".to_string(),
            ReasonKind::UntoleratedTaint(taint) => {
                let taint = names.taints.get(taint);
                format!("untolerated_taint:{}={}", taint.key, taint.value)
            }
            ReasonKind::InsufficientTotal(r) => format!("insufficient_total:{}", registry.name(r)),
            ReasonKind::InsufficientAvailable(r) => {
                format!("insufficient_available:{}", registry.name(r))
            }
            ReasonKind::Fragmented(r) => format!("fragmented:{}", registry.name(r)),
            // The secondary resource (CPU or memory, never a `:` in it) first, so the code
            // splits unambiguously even when the primary's name has a `:`.
            ReasonKind::KeptForPrimary { primary, resource } => {
                format!("kept_for_primary:{}:{}", registry.name(resource), registry.name(primary))
            }
        }
    }
}

/// Which part of a strategy an attempt ran (soft node affinity tries its node, then DEFAULT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptKind {
    /// The hybrid pack-then-spread policy.
    Default,
    /// Round-robin spread.
    Spread,
    /// Uniformly random.
    Random,
    /// Node-label scheduling (hard selector, soft preference).
    NodeLabel,
    /// Actor affinity and anti-affinity.
    ActorAffinity,
    /// One bundle of a placement group being planned.
    Bundle {
        /// The bundle's index.
        index: usize,
    },
    /// A request placed into a placement group's bundles.
    PlacementGroup {
        /// The group.
        group: String,
    },
    /// Only the node named by node affinity.
    AffinityNode {
        /// The node's ID as the request gave it.
        node: String,
        /// Whether the affinity is soft.
        soft: bool,
    },
}

impl AttemptKind {
    /// A stable machine-readable code: `default`, `spread`, `random`, `node_affinity`,
    /// `soft_node_affinity`.
    pub fn code(&self) -> &'static str {
        match self {
            AttemptKind::Default => "default",
            AttemptKind::Spread => "spread",
            AttemptKind::Random => "random",
            AttemptKind::NodeLabel => "node_label",
            AttemptKind::ActorAffinity => "actor_affinity",
            AttemptKind::Bundle { .. } => "bundle",
            AttemptKind::PlacementGroup { .. } => "placement_group",
            AttemptKind::AffinityNode { soft: false, .. } => "node_affinity",
            AttemptKind::AffinityNode { soft: true, .. } => "soft_node_affinity",
        }
    }
}

impl fmt::Display for AttemptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptKind::Default => f.write_str("DEFAULT"),
            AttemptKind::Spread => f.write_str("SPREAD"),
            AttemptKind::Random => f.write_str("RANDOM"),
            AttemptKind::NodeLabel => f.write_str("NODE_LABEL"),
            AttemptKind::ActorAffinity => f.write_str("ACTOR_AFFINITY"),
            AttemptKind::Bundle { index } => write!(f, "bundle {index}"),
            AttemptKind::PlacementGroup { group } => write!(f, "placement group {group}"),
            AttemptKind::AffinityNode { node, soft: true } => {
                write!(f, "soft node affinity to {node}")
            }
            AttemptKind::AffinityNode { node, soft: false } => write!(f, "node affinity to {node}"),
        }
    }
}

/// ` with label_selector`, ` with fallback_strategy[0]`, or nothing.
pub fn alternative_suffix(alternative: Option<usize>) -> String {
    match alternative {
        None => String::new(),
        Some(0) => " with label_selector".to_string(),
        Some(i) => format!(" with fallback_strategy[{}]", i - 1),
    }
}

/// What one attempt found: how many nodes it saw and why each rejected one was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptDiagnosis {
    /// The attempt.
    pub kind: AttemptKind,
    /// Which label selector was in force: `None` when the request has none, `Some(0)` for
    /// `label_selector`, `Some(i)` for `fallback_strategy[i − 1]`.
    pub alternative: Option<usize>,
    /// Nodes looked at (every node of the cluster, rejected in bulk or one by one).
    pub nodes: u64,
    /// Rejected nodes per reason, first failing reason per node, most frequent first.
    pub rejected: SmallVec<[(ReasonKind, u64); 4]>,
    /// True when some node could take the request once work ends there.
    pub could_fit_later: bool,
    /// A remark on how the attempt ended, when the counts alone do not say it.
    pub note: Option<String>,
}

impl AttemptDiagnosis {
    pub(crate) fn new(kind: AttemptKind, alternative: Option<usize>) -> AttemptDiagnosis {
        AttemptDiagnosis {
            kind,
            alternative,
            nodes: 0,
            rejected: SmallVec::new(),
            could_fit_later: false,
            note: None,
        }
    }

    pub(crate) fn count(&mut self, kind: ReasonKind, nodes: u64) {
        if nodes == 0 {
            return;
        }
        if kind.is_transient() {
            self.could_fit_later = true;
        }
        match self.rejected.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += nodes,
            None => self.rejected.push((kind, nodes)),
        }
    }

    pub(crate) fn finish(&mut self) {
        self.rejected.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }

    /// `0/5 nodes: 3 too little GPU in total, 2 draining`.
    pub fn describe<'n>(&self, names: impl Into<Names<'n>>) -> String {
        let names = names.into();
        let rejected: u64 = self.rejected.iter().map(|(_, n)| n).sum();
        // A note with no node rejected says why none was looked at (a resource no node has,
        // a group not reserved): then none can take it, for that reason.
        let only_note = self.rejected.is_empty() && self.note.is_some();
        let can = if only_note { 0 } else { self.nodes - rejected };
        let mut text = format!(
            "{}{}: {}/{} {} can take it now",
            self.kind,
            alternative_suffix(self.alternative),
            can,
            self.nodes,
            if matches!(self.kind, AttemptKind::PlacementGroup { .. }) {
                "bundles"
            } else {
                "nodes"
            }
        );
        for (i, (kind, n)) in self.rejected.iter().enumerate() {
            text.push_str(if i == 0 { ": " } else { ", " });
            text.push_str(&format!("{n} {}", kind.describe(names)));
        }
        match &self.note {
            Some(note) if only_note => text.push_str(&format!(": {note}")),
            Some(note) => text.push_str(&format!(" ({note})")),
            None => {}
        }
        text
    }
}

/// Why a request was not placed: one entry per attempt the strategy made, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnosis {
    /// The attempts, in the order they ran.
    pub attempts: Vec<AttemptDiagnosis>,
}

impl Diagnosis {
    /// Every attempt on its own line-part, joined by `; `.
    pub fn describe<'n>(&self, names: impl Into<Names<'n>>) -> String {
        let names = names.into();
        let parts: Vec<String> = self.attempts.iter().map(|a| a.describe(names)).collect();
        parts.join("; ")
    }

    /// Rejected nodes per reason, summed over attempts.
    pub fn totals(&self) -> Vec<(ReasonKind, u64)> {
        let mut totals: Vec<(ReasonKind, u64)> = Vec::new();
        for (kind, n) in self.attempts.iter().flat_map(|a| a.rejected.iter()) {
            match totals.iter_mut().find(|(k, _)| k == kind) {
                Some((_, total)) => *total += n,
                None => totals.push((*kind, *n)),
            }
        }
        totals
    }
}
