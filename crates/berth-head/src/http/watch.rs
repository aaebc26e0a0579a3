//! `GET /api/v1/watch`: the changes to nodes, actors, tasks and groups as server-sent events,
//! as they become durable, filtered, resumable (Kubernetes' watch over SSE).
//!
//! Each event is `id: VERSION`, `event: change`, `data: {"version", "type": ADDED | MODIFIED |
//! DELETED, "kind", "object"}`. A client that reconnects with `since=VERSION` (or the
//! `Last-Event-ID` header an `EventSource` sends by itself) gets every change after that one,
//! exactly once and in order.
//!
//! One task per head (the [`Hub`], started by the first watch) reads each published view's new
//! changes once and hands each to the watchers whose filter takes it, found through indexes
//! (by ID, by label) rather than by asking every watcher: a thousand watchers cost one pass
//! over the changes, and a watcher is woken only for its own. Each watcher has a bounded
//! queue ([`QUEUE`] changes); a client that does not keep up is cut (`event: expired`, then
//! the stream ends; it lists again, or resumes while the head still keeps its place), so a
//! slow client never holds the head or its memory.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_api::rest::{ApiError, ErrorKind, WatchQuery};
use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use super::extract::{Failure, Query};
use super::Api;
use crate::changes::{Change, ChangeType, Object, Resume, WatchKind};
use crate::view::View;

/// Which changes a watcher wants.
struct Filter {
    kinds: Vec<WatchKind>,
    id: Option<String>,
    job: Option<String>,
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
                            format!("{word:?} is not a kind; use node, actor, task, placement_group or job"),
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
        Ok(Filter { kinds, id: query.id.clone(), job: query.job.clone(), label, state })
    }

    fn matches(&self, object: &Object) -> bool {
        if !self.kinds.contains(&object.kind()) {
            return false;
        }
        if self.id.as_deref().is_some_and(|id| id != object.id()) {
            return false;
        }
        if let Some(job) = &self.job {
            let of = match object {
                Object::Node(_) => None,
                Object::Actor(a) => a.spec.ownership.job_id.as_deref(),
                Object::Task(t) => t.spec.ownership.job_id.as_deref(),
                Object::Group(g) => g.spec.ownership.job_id.as_deref(),
                Object::Job(j) => Some(j.job_id.as_str()),
            };
            if of != Some(job.as_str()) {
                return false;
            }
        }
        if let Some((key, value)) = &self.label {
            let labels = match object {
                Object::Node(n) => &n.labels,
                Object::Actor(a) => &a.spec.labels,
                Object::Task(_) | Object::Group(_) | Object::Job(_) => return false,
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
                Object::Job(j) => word(&j.state),
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
fn listing(view: &View, filter: &Filter) -> VecDeque<Bytes> {
    let version = view.changes.newest();
    let objects = view
        .nodes
        .values()
        .map(|n| Object::Node(n.clone()))
        .chain(view.actors.values().map(|a| Object::Actor(a.clone())))
        .chain(view.tasks.values().map(|t| Object::Task(t.clone())))
        .chain(view.groups.values().map(|g| Object::Group(g.clone())))
        .chain(view.jobs.values().map(|j| Object::Job(j.clone())));
    objects
        .filter(|o| filter.matches(o))
        .map(|o| Change::new(version, ChangeType::Added, o).event())
        .collect()
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

/// Changes a watcher may have waiting before it is cut.
pub(crate) const QUEUE: usize = 4096;
/// How often the hub forgets the watchers whose client has gone.
const SWEEP: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a stream carries a comment, so that proxies and clients see it alive while
/// nothing changes (what `EventSource` and most proxies expect: well under a minute).
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);
/// A keep-alive: an SSE comment, which clients skip.
const KEEP_ALIVE_EVENT: &[u8] = b":\n\n";

/// Watch changes (server-sent events).
///
/// Events: `id: VERSION`, `event: change`, `data: {"version", "type" (ADDED, MODIFIED,
/// DELETED), "kind" (node, actor, task, placement_group), "object"}`; `event: expired` when the
/// client fell further behind than the head keeps for it (then the stream ends). Without
/// `since`, the stream starts with the matching objects as they are (`ADDED`, all at the
/// current version; `listing=false` leaves them out).
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
) -> Result<Response, Failure> {
    let filter = Filter::parse(&query)?;
    let since = resume_from(&query, &headers)?;
    let view = api.handle.view();
    let (mut pending, position) = match since {
        None if query.listing == Some(false) => (VecDeque::new(), view.changes.newest()),
        None => (listing(&view, &filter), view.changes.newest()),
        Some(version) => match view.changes.after(version) {
            // What this view already has after `version` is sent from here; the hub sends
            // what comes after the view.
            Ok(changes) => {
                let events = changes.filter(|c| filter.matches(&c.object)).map(|c| c.event());
                (events.collect(), view.changes.newest())
            }
            Err(Resume::Expired { oldest }) => return Err(expired(oldest)),
            Err(Resume::Unknown { newest }) => {
                return Err(Failure::invalid(
                    Some("since".into()),
                    format!("{version} is newer than the newest change ({newest})"),
                ))
            }
        },
    };
    let hub = api.watchers.get_or_init(|| Hub::start(api.handle.subscribe()));
    let (sender, queue) = mpsc::channel(QUEUE);
    let cut = Arc::new(AtomicBool::new(false));
    let joined = hub.join(Joining { filter, after: position, sender, cut: cut.clone() });
    if !joined {
        pending.clear(); // the head is stopping
    }
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.reset(); // the first comment after a period, not at once
    let state = Watcher { pending, queue: joined.then_some(queue), cut, keep_alive };
    let stream = futures::stream::unfold(state, |mut w| async move {
        w.next().await.map(|event| (Ok::<_, Infallible>(event), w))
    });
    // The events as they are: each change's event was encoded once, for every watcher (axum's
    // `Sse` builds and copies each event for each client, and resets a timer per event).
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    Ok((headers, Body::from_stream(stream)).into_response())
}

/// One client's stream: what it is sent before the hub's changes, then its queue.
struct Watcher {
    pending: VecDeque<Bytes>,
    /// `None` once the queue has ended.
    queue: Option<mpsc::Receiver<Arc<Change>>>,
    /// Set by the hub when it cut this watcher (its queue was full).
    cut: Arc<AtomicBool>,
    /// When a keep-alive comment is due.
    keep_alive: tokio::time::Interval,
}

impl Watcher {
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(event) = self.pending.pop_front() {
            return Some(event);
        }
        let queue = self.queue.as_mut()?;
        // `recv` is cancel-safe: a keep-alive that comes first loses no change.
        let received = tokio::select! {
            received = queue.recv() => received,
            _ = self.keep_alive.tick() => return Some(Bytes::from_static(KEEP_ALIVE_EVENT)),
        };
        match received {
            Some(change) => Some(change.event()),
            None => {
                self.queue = None;
                self.cut.load(Ordering::Acquire).then(|| {
                    let message = format!(
                        "this client fell {QUEUE} changes behind and was cut: watch again with \
                         since (the last id) while the head keeps it, else list again"
                    );
                    let data = serde_json::json!({"error": "expired", "message": message});
                    Bytes::from(format!("event: expired\ndata: {data}\n\n"))
                })
            }
        }
    }
}

/// A watcher joining the hub: it has been sent everything up to `after`.
struct Joining {
    filter: Filter,
    after: u64,
    sender: mpsc::Sender<Arc<Change>>,
    cut: Arc<AtomicBool>,
}

/// The task that hands changes to watchers (see the module's documentation).
pub(crate) struct Hub {
    joins: mpsc::UnboundedSender<Joining>,
}

/// The hub of a head, started by the first watch.
pub(crate) type Watchers = Arc<OnceLock<Hub>>;

impl Hub {
    fn start(views: watch::Receiver<Arc<View>>) -> Hub {
        let (joins, joining) = mpsc::unbounded_channel();
        tokio::spawn(Dispatch::default().run(views, joining));
        Hub { joins }
    }

    /// False when the hub has stopped (the head is stopping).
    fn join(&self, joining: Joining) -> bool {
        self.joins.send(joining).is_ok()
    }
}

/// The hub's state: its watchers and their indexes.
#[derive(Default)]
struct Dispatch {
    next: u64,
    watchers: HashMap<u64, Joining>,
    by_id: HashMap<String, Vec<u64>>,
    by_label: HashMap<(String, String), Vec<u64>>,
    /// Watchers with neither an ID nor a label filter: asked about every change.
    others: Vec<u64>,
}

impl Dispatch {
    async fn run(
        mut self,
        mut views: watch::Receiver<Arc<View>>,
        mut joining: mpsc::UnboundedReceiver<Joining>,
    ) {
        let mut view = views.borrow_and_update().clone();
        let mut position = view.changes.newest();
        // Watchers whose client left are forgotten when a change comes for them, or by this
        // sweep (a watcher of one finished object may never get another change).
        let mut sweep = tokio::time::interval(SWEEP);
        loop {
            tokio::select! {
                _ = sweep.tick() => {
                    let gone: Vec<u64> = self
                        .watchers
                        .iter()
                        .filter(|(_, w)| w.sender.is_closed())
                        .map(|(&id, _)| id)
                        .collect();
                    for id in gone {
                        self.remove(id);
                    }
                }
                joined = joining.recv() => match joined {
                    Some(joined) => self.add(joined, &view, position),
                    None => return,
                },
                changed = views.changed() => {
                    if changed.is_err() {
                        return; // the head is stopping: dropping the senders ends the streams
                    }
                    view = views.borrow_and_update().clone();
                    match view.changes.after(position) {
                        Ok(changes) => {
                            for change in changes {
                                self.dispatch(&change);
                            }
                        }
                        // Only a hub stalled for MAX_CHANGES changes: its watchers missed
                        // changes, so they all go.
                        Err(_) => self.cut_all(),
                    }
                    position = view.changes.newest();
                }
            }
        }
    }

    /// Adds a watcher, first sending it what the hub has dispatched since its view.
    fn add(&mut self, joined: Joining, view: &View, position: u64) {
        let id = self.next;
        self.next += 1;
        if joined.after < position {
            let Ok(changes) = view.changes.after(joined.after) else {
                joined.cut.store(true, Ordering::Release);
                return;
            };
            for change in changes.take_while(|c| c.version <= position) {
                if joined.filter.matches(&change.object) && joined.sender.try_send(change).is_err()
                {
                    joined.cut.store(true, Ordering::Release);
                    return;
                }
            }
        }
        match (&joined.filter.id, &joined.filter.label) {
            (Some(object), _) => self.by_id.entry(object.clone()).or_default().push(id),
            (None, Some(label)) => self.by_label.entry(label.clone()).or_default().push(id),
            (None, None) => self.others.push(id),
        }
        self.watchers.insert(id, joined);
    }

    /// Hands `change` to every watcher that takes it; cuts those that cannot keep up and
    /// forgets those whose client has gone.
    fn dispatch(&mut self, change: &Arc<Change>) {
        let object = &change.object;
        let mut candidates: Vec<u64> = self.others.clone();
        if let Some(ids) = self.by_id.get(object.id()) {
            candidates.extend_from_slice(ids);
        }
        if !self.by_label.is_empty() {
            for (key, value) in labels(object) {
                if let Some(ids) = self.by_label.get(&(key.clone(), value.clone())) {
                    candidates.extend_from_slice(ids);
                }
            }
        }
        for id in candidates {
            let Some(watcher) = self.watchers.get(&id) else { continue };
            if watcher.after >= change.version || !watcher.filter.matches(object) {
                continue;
            }
            match watcher.sender.try_send(change.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    watcher.cut.store(true, Ordering::Release);
                    self.remove(id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => self.remove(id),
            }
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(watcher) = self.watchers.remove(&id) else { return };
        let from = |ids: &mut Vec<u64>| ids.retain(|&w| w != id);
        match (&watcher.filter.id, &watcher.filter.label) {
            (Some(object), _) => {
                if let Some(ids) = self.by_id.get_mut(object) {
                    from(ids);
                    if ids.is_empty() {
                        self.by_id.remove(object);
                    }
                }
            }
            (None, Some(label)) => {
                if let Some(ids) = self.by_label.get_mut(label) {
                    from(ids);
                    if ids.is_empty() {
                        self.by_label.remove(label);
                    }
                }
            }
            (None, None) => from(&mut self.others),
        }
    }

    fn cut_all(&mut self) {
        for (_, watcher) in self.watchers.drain() {
            watcher.cut.store(true, Ordering::Release);
        }
        self.by_id.clear();
        self.by_label.clear();
        self.others.clear();
    }
}

/// The labels a label filter looks at: a node's, an actor's; tasks, groups and jobs have none.
fn labels(object: &Object) -> Vec<(&String, &String)> {
    match object {
        Object::Node(n) => n.labels.iter().collect(),
        Object::Actor(a) => a.spec.labels.iter().collect(),
        Object::Task(_) | Object::Group(_) | Object::Job(_) => Vec::new(),
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

#[cfg(test)]
mod hub_tests {
    use super::*;
    use crate::changes::ChangeLog;

    fn actor(id: &str, team: &str) -> Object {
        let json = serde_json::json!({"actor_id": id, "namespace": "default", "state": "ALIVE",
            "instances": {}, "restarts": 0, "history": [], "created_at_ms": 0,
            "spec": {"command": "x", "resources": {}, "labels": {"team": team}}});
        Object::Actor(Arc::new(serde_json::from_value(json).unwrap()))
    }

    fn joining(label: Option<&str>, capacity: usize) -> (Joining, mpsc::Receiver<Arc<Change>>) {
        let query = WatchQuery { label: label.map(str::to_string), ..WatchQuery::default() };
        let (sender, receiver) = mpsc::channel(capacity);
        let filter = Filter::parse(&query).unwrap();
        (Joining { filter, after: 0, sender, cut: Arc::new(AtomicBool::new(false)) }, receiver)
    }

    #[test]
    fn changes_go_only_to_the_watchers_that_take_them_and_a_full_queue_is_cut() {
        let mut log = ChangeLog::starting_at(1);
        let view = View::default();
        let mut hub = Dispatch::default();
        let (a, mut a_rx) = joining(Some("team=a"), 8);
        let (slow, _slow_rx) = joining(None, 2);
        let slow_cut = slow.cut.clone();
        hub.add(a, &view, 0);
        hub.add(slow, &view, 0);
        for (id, team) in [("actor-1", "a"), ("actor-2", "b"), ("actor-3", "a")] {
            log.push(ChangeType::Added, actor(id, team));
        }
        for change in log.after(0).unwrap() {
            hub.dispatch(&change);
        }
        let got: Vec<String> = std::iter::from_fn(|| a_rx.try_recv().ok())
            .map(|c| c.object.id().to_string())
            .collect();
        assert_eq!(got, ["actor-1", "actor-3"], "its label's changes only, in order");
        // The unfiltered watcher took two, then its queue was full: cut, and forgotten.
        assert!(slow_cut.load(Ordering::Acquire));
        assert!(hub.others.is_empty());
        assert_eq!(hub.watchers.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_sends_what_waits_then_its_queue_keep_alives_and_why_it_was_cut() {
        let (sender, queue) = mpsc::channel(4);
        let cut = Arc::new(AtomicBool::new(false));
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.reset();
        let pending = VecDeque::from([Bytes::from_static(b"listed\n\n")]);
        let mut w = Watcher { pending, queue: Some(queue), cut: cut.clone(), keep_alive };
        assert_eq!(w.next().await.unwrap(), "listed\n\n");
        let mut log = ChangeLog::starting_at(1);
        log.push(ChangeType::Added, actor("actor-1", "a"));
        let change = log.after(0).unwrap().next().unwrap();
        sender.try_send(change.clone()).unwrap();
        let sent = w.next().await.unwrap();
        assert_eq!(sent.as_ptr(), change.event().as_ptr(), "the change's own event, not a copy");
        // Nothing to send: a comment once the period has passed (the paused clock jumps).
        let idle = tokio::time::Instant::now();
        assert_eq!(&w.next().await.unwrap()[..], KEEP_ALIVE_EVENT);
        assert_eq!(idle.elapsed(), KEEP_ALIVE);
        // The hub cut it: it marks the watcher, then drops its end of the queue.
        cut.store(true, Ordering::Release);
        drop(sender);
        let expired = w.next().await.unwrap();
        let data = expired.strip_prefix(b"event: expired\ndata: ").expect("an expired event");
        let data: serde_json::Value = serde_json::from_slice(data).unwrap();
        assert_eq!(data["error"], "expired");
        assert!(expired.ends_with(b"\n\n"));
        assert!(w.next().await.is_none(), "then the stream ends");
    }

    #[test]
    fn a_watcher_whose_client_left_is_forgotten() {
        let mut log = ChangeLog::starting_at(1);
        let mut hub = Dispatch::default();
        let (gone, rx) = joining(Some("team=a"), 8);
        hub.add(gone, &View::default(), 0);
        drop(rx);
        log.push(ChangeType::Added, actor("actor-1", "a"));
        for change in log.after(0).unwrap() {
            hub.dispatch(&change);
        }
        assert!(hub.watchers.is_empty() && hub.by_label.is_empty());
    }
}
