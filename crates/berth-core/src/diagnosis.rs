//! Why nodes were rejected: the reasons filters give, and the per-reason counts users see.
//!
//! Every "pending because" and every line of `berth explain` comes from these reasons, recorded
//! by the pipeline as it runs; there is no second code path that guesses.

use std::fmt;

use smallvec::SmallVec;

use crate::quantity::Quantity;
use crate::resource::{ResourceId, ResourceRegistry, Shortfall};

/// Why one node cannot take a request, with the figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The node is dead.
    Dead,
    /// The node is draining.
    Draining,
    /// The request's hard node affinity names another node.
    NotAffinityNode,
    /// The node lacks a resource even when empty.
    InsufficientTotal(Shortfall),
    /// The node lacks a resource now.
    InsufficientAvailable(Shortfall),
    /// Enough of a unit-instance resource is free, but not inside one instance (a fraction) or
    /// not as whole instances (a whole request).
    Fragmented {
        /// The resource.
        resource: ResourceId,
        /// The amount asked.
        requested: Quantity,
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
    /// See [`Reason::InsufficientTotal`].
    InsufficientTotal(ResourceId),
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
            Reason::NotAffinityNode => ReasonKind::NotAffinityNode,
            Reason::InsufficientTotal(s) => ReasonKind::InsufficientTotal(s.resource),
            Reason::InsufficientAvailable(s) => ReasonKind::InsufficientAvailable(s.resource),
            Reason::Fragmented { resource, .. } => ReasonKind::Fragmented(resource),
        }
    }

    /// A sentence for one node: `needs GPU 2, has 1 in total`.
    pub fn describe(&self, registry: &ResourceRegistry) -> String {
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
            _ => self.kind().describe(registry),
        }
    }
}

impl ReasonKind {
    /// True when the node could take the request once work ends there (the request is
    /// pending, not infeasible, on its account).
    pub fn is_transient(self) -> bool {
        matches!(self, ReasonKind::InsufficientAvailable(_) | ReasonKind::Fragmented(_))
    }

    /// A short phrase for counts: `3 too little GPU in total`.
    pub fn describe(self, registry: &ResourceRegistry) -> String {
        match self {
            ReasonKind::Dead => "dead".to_string(),
            ReasonKind::Draining => "draining".to_string(),
            ReasonKind::NotAffinityNode => "not the affinity node".to_string(),
            ReasonKind::InsufficientTotal(r) => format!("too little {} in total", registry.name(r)),
            ReasonKind::InsufficientAvailable(r) => format!("too little {} free", registry.name(r)),
            ReasonKind::Fragmented(r) => {
                format!("{} fragmented across instances", registry.name(r))
            }
        }
    }

    /// A stable machine-readable code: `insufficient_total:GPU`.
    pub fn code(self, registry: &ResourceRegistry) -> String {
        match self {
            ReasonKind::Dead => "dead".to_string(),
            ReasonKind::Draining => "draining".to_string(),
            ReasonKind::NotAffinityNode => "not_affinity_node".to_string(),
            ReasonKind::InsufficientTotal(r) => format!("insufficient_total:{}", registry.name(r)),
            ReasonKind::InsufficientAvailable(r) => {
                format!("insufficient_available:{}", registry.name(r))
            }
            ReasonKind::Fragmented(r) => format!("fragmented:{}", registry.name(r)),
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
            AttemptKind::AffinityNode { node, soft: true } => {
                write!(f, "soft node affinity to {node}")
            }
            AttemptKind::AffinityNode { node, soft: false } => write!(f, "node affinity to {node}"),
        }
    }
}

/// What one attempt found: how many nodes it saw and why each rejected one was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptDiagnosis {
    /// The attempt.
    pub kind: AttemptKind,
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
    pub(crate) fn new(kind: AttemptKind) -> AttemptDiagnosis {
        AttemptDiagnosis {
            kind,
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
    pub fn describe(&self, registry: &ResourceRegistry) -> String {
        let rejected: u64 = self.rejected.iter().map(|(_, n)| n).sum();
        let mut text = format!(
            "{}: {}/{} nodes can take it now",
            self.kind,
            self.nodes - rejected,
            self.nodes
        );
        for (i, (kind, n)) in self.rejected.iter().enumerate() {
            text.push_str(if i == 0 { ": " } else { ", " });
            text.push_str(&format!("{n} {}", kind.describe(registry)));
        }
        if let Some(note) = &self.note {
            text.push_str(&format!(" ({note})"));
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
    pub fn describe(&self, registry: &ResourceRegistry) -> String {
        let parts: Vec<String> = self.attempts.iter().map(|a| a.describe(registry)).collect();
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
