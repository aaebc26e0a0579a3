//! Who a request comes from, and what of the cluster it may reach.
//!
//! A request carries a token (`Authorization: Bearer <secret>`: admin, read or agent; the
//! keyring knows them) or a **work credential**, `Authorization: Bearer work:<work_id>:<key>`,
//! which a process of an actor or a task holds without anyone handing it out: its agent gives
//! it the work's key (`BERTH_WORK_KEY`, derived by the head from the work's ID, never shown by
//! a GET), and the SDKs build the credential from it. So a task or an actor can create work on
//! any node, with no token file on its machine.
//!
//! A work credential reaches **the work of its own job and nothing else**: it creates actors,
//! tasks and placement groups that its process owns (in its job), and reads, waits on, kills
//! and calls (an actor's endpoint) the actors, tasks and placement groups of that job, and
//! reads the job itself. Everything else (nodes, tokens, other jobs, watches, logs) is refused
//! with 403. Work of no job (created by the CLI or plain REST) reaches only work of no job, by
//! ID. The gate ([`super::gate`]) checks the routes and puts the [`Caller`] in the request's
//! extensions; the handlers check the objects, with [`Caller::claim`], [`Caller::may_reach`]
//! and [`Caller::scope`].

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::Method;
use berth_api::rest::{ListQuery, Ownership, Role};
use berth_api::ObjectKind;

use super::extract::Failure;
use crate::view::View;

/// The scheme-less prefix of a work credential.
pub(crate) const WORK_CREDENTIAL: &str = "work:";

/// Who sent a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A token of this role.
    Token(Role),
    /// A process of this work (an actor or a task), by its work credential.
    Work(Arc<str>),
}

/// The work ID and key of a work credential's secret (`work:<work_id>:<key>`), if it is one.
pub(crate) fn work_credential(secret: &str) -> Option<(&str, &str)> {
    let rest = secret.strip_prefix(WORK_CREDENTIAL)?;
    let (work_id, key) = rest.rsplit_once(':')?;
    matches!(ObjectKind::parse(work_id), Some((ObjectKind::Actor | ObjectKind::Task, _)))
        .then_some((work_id, key))
}

/// What a work credential may not do with `method` on `path`, if anything (the objects it
/// names are checked by the handlers).
pub(crate) fn work_forbidden(method: &Method, path: &str) -> Option<String> {
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return Some(refusal(method, path));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let allowed = matches!(
        (method, parts.as_slice()),
        (&Method::POST, ["actors" | "actors:batch" | "tasks" | "tasks:batch" | "tasks:wait"])
            | (&Method::POST, ["tasks:delivered"])
            | (&Method::POST, ["placement_groups"])
            | (&Method::GET, ["actors" | "tasks" | "placement_groups"])
            | (&Method::GET, ["actors" | "tasks" | "placement_groups" | "jobs", _])
            | (&Method::DELETE, ["actors" | "placement_groups", _])
            | (&Method::GET, ["actors", _, "endpoint"] | ["placement_groups", _, "wait"])
            | (&Method::POST, ["tasks", _, "cancel"])
    );
    (!allowed).then(|| refusal(method, path))
}

fn refusal(method: &Method, path: &str) -> String {
    format!(
        "a work credential cannot {method} {}: it creates, reads, waits on, kills and calls the \
         actors, tasks and placement groups of its own job, and nothing else",
        super::extract::clip(path)
    )
}

impl Caller {
    /// The job this caller's reach is limited to: `None` for a token (no limit), `Some(None)`
    /// for work of no job, `Some(Some(job))` for work of a job. A work the head no longer
    /// holds (ended and forgotten) reaches nothing.
    fn job(&self, view: &View) -> Result<Option<Option<Arc<str>>>, Failure> {
        let Caller::Work(work_id) = self else { return Ok(None) };
        match job_of(view, work_id) {
            Some(job) => Ok(Some(job)),
            None => Err(forbidden(format!(
                "{work_id} is no longer known to the head: its credential reaches nothing"
            ))),
        }
    }

    /// The work this caller is, for a work credential.
    pub(crate) fn work(&self) -> Option<&str> {
        match self {
            Caller::Work(work_id) => Some(work_id),
            Caller::Token(_) => None,
        }
    }

    /// Makes a creation by this caller the caller's own: a work's process owns what it creates
    /// (so it ends with that process unless detached) and creates it in its own job.
    pub(crate) fn claim(&self, view: &View, ownership: &mut Ownership) -> Result<(), Failure> {
        let Caller::Work(work_id) = self else { return Ok(()) };
        if let Some(owner) = ownership.owner_id.as_deref() {
            if owner != &**work_id {
                return Err(forbidden(format!(
                    "owner_id: a work credential creates work for its own process ({work_id}), \
                     not for {owner}"
                )));
            }
        }
        let job = self.job(view)?.flatten();
        if let Some(asked) = ownership.job_id.as_deref() {
            if job.as_deref() != Some(asked) {
                return Err(forbidden(format!(
                    "job_id: a work credential creates work in its own job ({}), not in {asked}",
                    job.as_deref().unwrap_or("none")
                )));
            }
        }
        ownership.owner_id = Some(work_id.as_ref().into());
        Ok(())
    }

    /// Ok when this caller may reach the actor, task, placement group or job `id` (one the view
    /// does not hold is left to the handler's 404).
    pub(crate) fn may_reach(&self, view: &View, id: &str) -> Result<(), Failure> {
        let Some(own) = self.job(view)? else { return Ok(()) };
        let theirs = match ObjectKind::parse(id) {
            Some((ObjectKind::Job, _)) => Some(Some(Arc::from(id))),
            _ => job_of(view, id),
        };
        match theirs {
            None => Ok(()),
            Some(theirs) if theirs == own => Ok(()),
            Some(theirs) => Err(forbidden(format!(
                "a work credential reaches the work of its own job ({}) only; {id} is of {}",
                own.as_deref().unwrap_or("no job"),
                theirs.as_deref().unwrap_or("no job")
            ))),
        }
    }

    /// Limits a list to this caller's job (work of no job may not list).
    pub(crate) fn scope(&self, view: &View, query: &mut ListQuery) -> Result<(), Failure> {
        let Some(own) = self.job(view)? else { return Ok(()) };
        let Some(own) = own else {
            return Err(forbidden(
                "a work credential of work of no job reads objects by ID only, not lists".into(),
            ));
        };
        match query.job.as_deref() {
            Some(asked) if asked != &*own => Err(forbidden(format!(
                "job: a work credential lists the objects of its own job ({own}) only, not of \
                 {asked}"
            ))),
            _ => {
                query.job = Some(own.to_string());
                Ok(())
            }
        }
    }
}

/// The job of the actor, task or placement group `id` as the view has it: `None` when the view
/// does not hold it, `Some(None)` for work of no job.
fn job_of(view: &View, id: &str) -> Option<Option<Arc<str>>> {
    let job = match ObjectKind::parse(id)? {
        (ObjectKind::Actor, _) => view.actor(id)?.spec.ownership.job_id.clone(),
        (ObjectKind::Task, _) => view.task(id)?.spec.ownership.job_id.clone(),
        (ObjectKind::Group, _) => view.group(id)?.spec.ownership.job_id.clone(),
        (ObjectKind::Job, _) => return None,
    };
    Some(job.map(|j| Arc::from(&*j)))
}

fn forbidden(message: String) -> Failure {
    Failure::forbidden(message)
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Failure;

    /// The caller the gate found; a handler on a route no gate checked refuses (fails closed).
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| forbidden("no credential was checked for this request".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_work_credential_names_an_actor_or_a_task() {
        assert_eq!(work_credential("work:actor-3:abc"), Some(("actor-3", "abc")));
        assert_eq!(work_credential("work:task-12:k"), Some(("task-12", "k")));
        for not in ["actor-3:abc", "work:pg-1:k", "work:job-1:k", "work:actor-3", "work::k", "x"] {
            assert_eq!(work_credential(not), None, "{not}");
        }
    }

    #[test]
    fn a_work_credential_reaches_the_routes_of_work_only() {
        let ok = |m: Method, p: &str| assert_eq!(work_forbidden(&m, p), None, "{m} {p}");
        let no = |m: Method, p: &str| assert!(work_forbidden(&m, p).is_some(), "{m} {p}");
        ok(Method::POST, "/api/v1/actors");
        ok(Method::POST, "/api/v1/tasks:batch");
        ok(Method::POST, "/api/v1/tasks:wait");
        ok(Method::GET, "/api/v1/actors/actor-1/endpoint");
        ok(Method::DELETE, "/api/v1/actors/actor-1");
        ok(Method::POST, "/api/v1/tasks/task-1/cancel");
        ok(Method::GET, "/api/v1/placement_groups/pg-1/wait");
        ok(Method::GET, "/api/v1/jobs/job-1");
        no(Method::GET, "/api/v1/jobs");
        no(Method::POST, "/api/v1/jobs");
        no(Method::POST, "/api/v1/jobs/job-1/stop");
        no(Method::GET, "/api/v1/nodes");
        no(Method::POST, "/api/v1/nodes/a/drain");
        no(Method::GET, "/api/v1/tokens");
        no(Method::GET, "/api/v1/watch");
        no(Method::GET, "/api/v1/logs/actor-1");
        no(Method::PUT, "/api/v1/nodes/a/resources");
        no(Method::GET, "/metrics");
    }
}
