//! `GET /api/v1/watch`: the changes to nodes, actors, tasks and groups as server-sent events,
//! as they become durable, filtered, resumable (Kubernetes' watch over SSE).
//!
//! Each event is `id: VERSION`, `event: change`, `data: {"version", "type": ADDED | MODIFIED |
//! DELETED, "kind", "object"}`. A client that reconnects with `since=VERSION` (or the
//! `Last-Event-ID` header an `EventSource` sends by itself) gets every change after that one,
//! exactly once and in order. A watcher costs the head no buffer of its own: the stream reads
//! the shared change log as the client takes events, so a slow client only falls behind; once
//! it is further behind than the log keeps, it gets `event: expired` and the stream ends (it
//! lists again and watches from there).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use berth_api::rest::{ApiError, ErrorKind, WatchQuery};
use futures::Stream;
use tokio::sync::watch;

use super::extract::{Failure, Query};
use super::Api;
use crate::changes::{Change, ChangeType, Object, Resume, WatchKind};
use crate::view::View;

/// Which changes a watcher wants.
struct Filter {
    kinds: Vec<WatchKind>,
    id: Option<String>,
    label: Option<(String, String)>,
    state: Option<String>,
}

impl Filter {
    fn parse(query: &WatchQuery) -> Result<Filter, Failure> {
        let kinds = match query.kind.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
            None => WatchKind::ALL.to_vec(),
            Some(list) => {
                let mut kinds = Vec::new();
                for word in list.split(',').map(str::trim) {
                    let kind = WatchKind::ALL.into_iter().find(|k| k.word() == word).ok_or_else(|| {
                        Failure::invalid(
                            Some("kind".into()),
                            format!("{word:?} is not a kind; use node, actor, task or placement_group"),
                        )
                    })?;
                    kinds.push(kind);
                }
                kinds
            }
        };
        let label = match &query.label {
            None => None,
            Some(text) => match text.split_once('=') {
                Some((key, value)) if !key.trim().is_empty() => {
                    Some((key.trim().to_string(), value.trim().to_string()))
                }
                _ => {
                    return Err(Failure::invalid(
                        Some("label".into()),
                        format!("{text:?} is not key=value"),
                    ))
                }
            },
        };
        let state = query.state.as_deref().map(|s| s.trim().to_ascii_uppercase());
        Ok(Filter { kinds, id: query.id.clone(), label, state })
    }

    fn matches(&self, object: &Object) -> bool {
        if !self.kinds.contains(&object.kind()) {
            return false;
        }
        if self.id.as_deref().is_some_and(|id| id != object.id()) {
            return false;
        }
        if let Some((key, value)) = &self.label {
            let labels = match object {
                Object::Node(n) => &n.labels,
                Object::Actor(a) => &a.spec.labels,
                Object::Task(_) | Object::Group(_) => return false,
            };
            if labels.get(key) != Some(value) {
                return false;
            }
        }
        if let Some(state) = &self.state {
            let shown = match object {
                Object::Node(n) => word(&n.state),
                Object::Actor(a) => word(&a.state),
                Object::Task(t) => word(&t.state),
                Object::Group(g) => word(&g.state),
            };
            if !shown.eq_ignore_ascii_case(state) {
                return false;
            }
        }
        true
    }
}

fn word<T: serde::Serialize>(state: &T) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The matching objects as they are in `view`, as `ADDED` changes at the view's version.
fn listing(view: &View, filter: &Filter) -> VecDeque<Event> {
    let version = view.changes.newest();
    let objects = view
        .nodes
        .values()
        .map(|n| Object::Node(n.clone()))
        .chain(view.actors.values().map(|a| Object::Actor(a.clone())))
        .chain(view.tasks.values().map(|t| Object::Task(t.clone())))
        .chain(view.groups.values().map(|g| Object::Group(g.clone())));
    objects
        .filter(|o| filter.matches(o))
        .map(|o| event(&Change::new(version, ChangeType::Added, o)))
        .collect()
}

fn event(change: &Change) -> Event {
    Event::default().id(change.version.to_string()).event("change").data(&*change.json())
}

fn expired(oldest: u64) -> Failure {
    Failure {
        status: StatusCode::GONE,
        body: ApiError {
            error: ErrorKind::Expired,
            field: Some("since".into()),
            message: format!(
                "the head keeps changes after version {oldest} only (or this version is from \
                 an earlier head): list again, then watch from the list's version"
            ),
        },
    }
}

/// The version to resume from: `since`, else the `Last-Event-ID` header.
fn resume_from(query: &WatchQuery, headers: &HeaderMap) -> Result<Option<u64>, Failure> {
    if query.since.is_some() {
        return Ok(query.since);
    }
    match headers.get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None => Ok(None),
        Some(Ok("")) => Ok(None),
        Some(Ok(text)) => text.parse().map(Some).map_err(|_| {
            Failure::invalid(Some("Last-Event-ID".into()), format!("{text:?} is not a version"))
        }),
        Some(Err(_)) => Err(Failure::invalid(Some("Last-Event-ID".into()), "not text")),
    }
}

/// Watch changes (server-sent events).
///
/// Events: `id: VERSION`, `event: change`, `data: {"version", "type" (ADDED, MODIFIED,
/// DELETED), "kind" (node, actor, task, placement_group), "object"}`; `event: expired` when the
/// client fell further behind than the head keeps (then the stream ends). Without `since`, the
/// stream starts with the matching objects as they are (`ADDED`, all at the current version).
#[utoipa::path(
    get, path = "/api/v1/watch", tag = "cluster", operation_id = "watch",
    params(WatchQuery),
    responses(
        (status = 200, description = "A stream of server-sent events (text/event-stream)", content_type = "text/event-stream", body = String),
        (status = 400, description = "A bad filter or version; `field` names it", body = ApiError),
        (status = 410, description = "`since` is older than the changes the head keeps: list again", body = ApiError),
    )
)]
pub(crate) async fn watch(
    State(api): State<Api>,
    Query(query): Query<WatchQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Failure> {
    let filter = Filter::parse(&query)?;
    let since = resume_from(&query, &headers)?;
    let mut views = api.handle.subscribe();
    let view = views.borrow_and_update().clone();
    let (pending, position) = match since {
        None if query.listing == Some(false) => (VecDeque::new(), view.changes.newest()),
        None => (listing(&view, &filter), view.changes.newest()),
        Some(version) => match view.changes.after(version) {
            Ok(_) => (VecDeque::new(), version),
            Err(Resume::Expired { oldest }) => return Err(expired(oldest)),
            Err(Resume::Unknown { newest }) => {
                return Err(Failure::invalid(
                    Some("since".into()),
                    format!("{version} is newer than the newest change ({newest})"),
                ))
            }
        },
    };
    let state = Watcher { views, view, filter, pending, position, done: false };
    let stream = futures::stream::unfold(state, |mut w| async move {
        w.next().await.map(|event| (Ok(event), w))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// One client's place in the change log.
struct Watcher {
    views: watch::Receiver<Arc<View>>,
    view: Arc<View>,
    filter: Filter,
    pending: VecDeque<Event>,
    /// The version of the last change looked at.
    position: u64,
    done: bool,
}

impl Watcher {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            match self.view.changes.after(self.position) {
                Ok(changes) => {
                    for change in changes {
                        self.position = change.version;
                        if self.filter.matches(&change.object) {
                            self.pending.push_back(event(change));
                        }
                    }
                }
                Err(Resume::Expired { oldest }) => {
                    self.done = true;
                    let message = expired(oldest).body.message;
                    let data = serde_json::json!({"error": "expired", "message": message});
                    return Some(Event::default().event("expired").data(data.to_string()));
                }
                Err(Resume::Unknown { .. }) => return None,
            }
            if self.pending.is_empty() {
                // Nothing new for this client: wait for the next published view.
                if self.views.changed().await.is_err() {
                    return None; // the head is stopping
                }
                self.view = self.views.borrow_and_update().clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_read_and_bad_ones_named() {
        let query = |kind: &str, label: Option<&str>| WatchQuery {
            kind: Some(kind.into()),
            label: label.map(str::to_string),
            ..WatchQuery::default()
        };
        let filter = Filter::parse(&query("actor, node", None)).unwrap();
        assert_eq!(filter.kinds, [WatchKind::Actor, WatchKind::Node]);
        assert_eq!(Filter::parse(&query("", None)).unwrap().kinds, WatchKind::ALL);
        let err = Filter::parse(&query("pods", None)).err().unwrap();
        assert_eq!(err.body.field.as_deref(), Some("kind"));
        let err = Filter::parse(&query("actor", Some("app"))).err().unwrap();
        assert_eq!(err.body.field.as_deref(), Some("label"));
    }

    #[test]
    fn the_last_event_id_header_resumes_when_since_is_absent() {
        let mut headers = HeaderMap::new();
        headers.insert("last-event-id", "42".parse().unwrap());
        assert_eq!(resume_from(&WatchQuery::default(), &headers).unwrap(), Some(42));
        let query = WatchQuery { since: Some(7), ..WatchQuery::default() };
        assert_eq!(resume_from(&query, &headers).unwrap(), Some(7));
        headers.insert("last-event-id", "x".parse().unwrap());
        let err = resume_from(&WatchQuery::default(), &headers).err().unwrap();
        assert_eq!(err.body.field.as_deref(), Some("Last-Event-ID"));
    }
}
