//! Stages 1 to 4 for a request into a placement group: no node is ranked, the request takes
//! the free reservation of one of its target bundles.

use smallvec::{smallvec, SmallVec};

use super::explain::{AttemptExplanation, BundleVerdict, Explanation};
use super::{Choice, Decision};
use crate::cluster::Cluster;
use crate::diagnosis::{AttemptDiagnosis, AttemptKind, Diagnosis, Reason};
use crate::placement_group::BundleLedger;
use crate::request::{GroupPlacement, Request};

/// Why bundle `ledger` cannot take `request` now (too small ever, or too full now), if so.
/// The one bundle check: [`choose_bundle`] places by it and [`Scheduler::fits_now`](super::Scheduler::fits_now) retries by
/// it, so a retry never skips a request the decision would place.
pub(super) fn bundle_unfit(ledger: &BundleLedger, request: &Request) -> Option<Reason> {
    if let Some(shortfall) = ledger.total_shortfall(request.resources()) {
        Some(Reason::InsufficientTotal(shortfall))
    } else {
        ledger.unfit(request.resources()).map(Reason::InsufficientAvailable)
    }
}

/// Stages 1 to 4 for a request into a placement group: the first of its target bundles whose
/// free reservation can take it. Pending while the group is not reserved (yet) or a target
/// bundle is lost or busy; infeasible when no target bundle could ever hold it.
pub(super) fn choose_bundle<'r>(
    cluster: &Cluster,
    request: &Request,
    target: &'r GroupPlacement,
    mut explanation: Option<&mut Explanation>,
) -> Choice<'r> {
    let kind = AttemptKind::PlacementGroup { group: target.group.to_string() };
    if let Some(explanation) = explanation.as_deref_mut() {
        explanation.attempts.push(AttemptExplanation {
            kind: kind.clone(),
            alternative: None,
            nodes: Vec::new(),
            shortlist: Vec::new(),
            chosen: None,
            bundles: Vec::new(),
        });
    }
    let mut found = AttemptDiagnosis::new(kind, None);
    let Some(group) = cluster.group(target.group.as_str()) else {
        found.note = Some("the placement group is not reserved (yet)".to_string());
        found.could_fit_later = true;
        return Choice::Decided(Decision::Pending(Diagnosis { attempts: vec![found] }));
    };
    let bundles = group.bundles.len();
    let targets: SmallVec<[usize; 8]> = match target.bundle {
        Some(i) if i >= bundles => {
            found.note = Some(format!("bundle {i} does not exist: the group has {bundles}"));
            return Choice::Decided(Decision::Infeasible(Diagnosis { attempts: vec![found] }));
        }
        Some(i) => smallvec![i],
        None => (0..bundles).collect(),
    };
    found.nodes = targets.len() as u64;
    let mut chosen = None;
    // Every bundle's verdict, when explaining: the ones not named, then the targets as tried.
    let mut verdicts =
        if explanation.is_some() { vec![BundleVerdict::NotTargeted; bundles] } else { Vec::new() };
    for &i in &targets {
        let verdict = match group.bundle(i) {
            None => {
                found.could_fit_later = true;
                found.note =
                    Some(format!("bundle {i} was lost with its node and waits to be re-planned"));
                BundleVerdict::Lost
            }
            Some(ledger) => match bundle_unfit(ledger, request) {
                Some(reason) => {
                    found.count(reason.kind(), 1);
                    BundleVerdict::Unfit(reason)
                }
                None => BundleVerdict::Chosen,
            },
        };
        if let Some(slot) = verdicts.get_mut(i) {
            *slot = verdict;
        }
        if verdict == BundleVerdict::Chosen {
            chosen = Some(i);
            for &later in targets.iter().filter(|&&t| t > i) {
                if let Some(slot) = verdicts.get_mut(later) {
                    *slot = BundleVerdict::NotTried;
                }
            }
            break;
        }
    }
    if let Some(attempt) = explanation.and_then(|e| e.attempts.last_mut()) {
        attempt.bundles = verdicts;
    }
    found.finish();
    let Some(bundle) = chosen else {
        let diagnosis = Diagnosis { attempts: vec![found] };
        return Choice::Decided(if diagnosis.attempts[0].could_fit_later {
            Decision::Pending(diagnosis)
        } else {
            Decision::Infeasible(diagnosis)
        });
    };
    Choice::Bundle { group: target.group.as_str(), bundle }
}
