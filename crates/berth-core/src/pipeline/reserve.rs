//! Stage 5, reserve: take what the earlier stages chose from the node's (or the bundle's)
//! ledger, and place the actor there if the request is one.

use crate::actors::ActorAffinity;
use crate::cluster::{Cluster, ClusterError};
use crate::diagnosis::{AttemptDiagnosis, AttemptKind, Diagnosis};
use crate::node::NodeIndex;
use crate::request::{Request, Strategy};

use super::Decision;

/// Stage 5 on a node: reserve, and place the actor (if it is one) with its affinity.
pub(super) fn reserve_on_node(
    cluster: &mut Cluster,
    request: &Request,
    node: NodeIndex,
) -> Decision {
    match cluster.reserve(node, request.resources()) {
        Ok(allocation) => {
            if let Some(actor) = request.actor() {
                let affinity = match request.strategy() {
                    Strategy::ActorAffinity(affinity) => affinity.clone(),
                    _ => ActorAffinity::default(),
                };
                cluster.place_actor(actor, node, affinity).expect("the node is alive: reserved");
            }
            Decision::Placed(allocation)
        }
        // Filters passed, so this is a bug; keep the request rather than lose it.
        Err(err) => internal_pending(&err),
    }
}

/// Stage 5 in a bundle: take from its ledger, and place the actor (if it is one) there.
pub(super) fn reserve_in_bundle(
    cluster: &mut Cluster,
    request: &Request,
    group: &str,
    bundle: usize,
) -> Decision {
    match cluster.reserve_in_bundle(group, bundle, request.resources()) {
        Ok(allocation) => {
            if let Some(actor) = request.actor() {
                let node = allocation.node();
                cluster
                    .place_actor(actor, node, ActorAffinity::default())
                    .expect("the bundle's node is alive");
                cluster.note_bundle_actor(group, bundle, actor.id.clone());
            }
            Decision::Placed(allocation)
        }
        Err(err) => internal_pending(&err),
    }
}

/// A reservation that failed after its checks passed: a bug, reported and kept pending so
/// the request is not lost.
pub(super) fn internal_pending(err: &ClusterError) -> Decision {
    debug_assert!(false, "reserving what the checks passed failed: {err}");
    let mut found = AttemptDiagnosis::new(AttemptKind::Default, None);
    found.note = Some(format!("internal: {err}"));
    found.could_fit_later = true;
    Decision::Pending(Diagnosis { attempts: vec![found] })
}
