//! Actors, tasks and placement groups: filterable lists (state, namespace, node and, for
//! actors, label: `View::list_*`), and a detail page each with its scheduling options, its
//! history and, while it waits, the diagnosis in words.

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use berth_api::rest::{Actor, Diagnosis, Event, Group, ListQuery, Task};
use berth_api::spec::PlacementSpec;

use super::format::{self, NONE};
use super::{path_param, render, Ui, UiError};
use crate::view::View;

/// The most rows a list shows; the page says how many more match.
pub(crate) const LIST_LIMIT: usize = 500;

/// Which list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkList {
    Actors,
    Tasks,
    Groups,
}

impl WorkList {
    fn title(self) -> &'static str {
        match self {
            WorkList::Actors => "Actors",
            WorkList::Tasks => "Tasks",
            WorkList::Groups => "Placement groups",
        }
    }

    /// The route word: `/ui/<page>`, `#<page>`.
    fn page(self) -> &'static str {
        match self {
            WorkList::Actors => "actors",
            WorkList::Tasks => "tasks",
            WorkList::Groups => "groups",
        }
    }

    fn states(self) -> &'static [&'static str] {
        match self {
            WorkList::Actors => &["PENDING", "ALIVE", "RESTARTING", "DEAD"],
            WorkList::Tasks => &["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"],
            WorkList::Groups => &["PENDING", "CREATED", "RESCHEDULING", "REMOVED"],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lists.

/// The filters as the form sends them: an empty field is no filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Filters {
    #[serde(default)]
    state: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    label: String,
}

impl Filters {
    /// Parses a query string (`state=ALIVE&label=app%3Dweb`); unknown parameters are ignored.
    fn parse(query: Option<&str>) -> Result<Filters, UiError> {
        serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| UiError::invalid("query", e.to_string()))
    }

    fn query(&self) -> ListQuery {
        let some = |text: &str| Some(text.trim().to_string()).filter(|t| !t.is_empty());
        ListQuery {
            state: some(&self.state),
            namespace: some(&self.namespace),
            node: some(&self.node),
            label: some(&self.label),
            limit: Some(LIST_LIMIT),
        }
    }
}

/// A list page: heading, filter form, and the live rows.
#[derive(Template)]
#[template(path = "dashboard/list.html")]
struct ListPage {
    title: &'static str,
    page: &'static str,
    states: &'static [&'static str],
    /// Only actors have labels to filter on.
    label_filter: bool,
    filters: Filters,
    /// The node IDs, for the node filter.
    nodes: Vec<String>,
    rows: Rows,
}

/// The rows of a list (what the page polls).
#[derive(Template)]
#[template(path = "dashboard/rows.html")]
pub(crate) struct Rows {
    /// The heading of the `count` column: restarts, attempts, strategy.
    count_label: &'static str,
    /// The heading of the `what` column: labels, resources, bundles.
    what_label: &'static str,
    /// `nothing matches` in this kind's words.
    empty: &'static str,
    rows: Vec<Row>,
    total: usize,
}

/// One actor, task or group in a list. Columns not of its kind are empty.
struct Row {
    id: String,
    href: String,
    name: String,
    namespace: String,
    state: String,
    class: &'static str,
    /// The node (actors, tasks) or the bundles' nodes (groups).
    node: String,
    /// Restarts (actors), attempts (tasks), strategy (groups).
    count: String,
    /// Labels (actors), resources (tasks, groups).
    what: String,
    /// Why it waits, or why it ended.
    why: String,
    infeasible: bool,
}

impl Rows {
    /// The rows of `kind` that `filters` keep.
    pub(crate) fn new(view: &View, kind: WorkList, filters: &Filters) -> Result<Rows, UiError> {
        let query = filters.query();
        let (rows, total) = match kind {
            WorkList::Actors => {
                let list = view.list_actors(&query)?;
                (list.items.iter().map(actor_row).collect(), list.total)
            }
            WorkList::Tasks => {
                let list = view.list_tasks(&query)?;
                (list.items.iter().map(task_row).collect(), list.total)
            }
            WorkList::Groups => {
                let list = view.list_groups(&query)?;
                (list.items.iter().map(group_row).collect(), list.total)
            }
        };
        let (count_label, what_label, empty) = match kind {
            WorkList::Actors => ("Restarts", "Labels", "No actor matches."),
            WorkList::Tasks => ("Attempts", "Resources", "No task matches."),
            WorkList::Groups => ("Strategy", "Bundles", "No placement group matches."),
        };
        Ok(Rows { count_label, what_label, empty, rows, total })
    }
}

fn why(diagnosis: Option<&Diagnosis>, ended: Option<&str>) -> (String, bool) {
    match (diagnosis, ended) {
        (Some(d), _) => (d.summary.clone(), d.infeasible),
        (None, Some(reason)) => (reason.to_string(), false),
        (None, None) => (String::new(), false),
    }
}

fn actor_row(a: &Actor) -> Row {
    let state = format::word(&a.state);
    let (why, infeasible) = why(a.diagnosis.as_deref(), a.death_reason.as_deref());
    Row {
        id: a.actor_id.to_string(),
        href: format::link("actor", &a.actor_id),
        name: a.name.as_deref().unwrap_or_default().to_string(),
        namespace: a.namespace.clone(),
        class: format::state_class(&state),
        state,
        node: a.node_id.as_deref().unwrap_or_default().to_string(),
        count: a.restarts.to_string(),
        what: format::pairs(&a.spec.labels),
        why,
        infeasible,
    }
}

fn task_row(t: &Task) -> Row {
    let state = format::word(&t.state);
    let (why, infeasible) = why(t.diagnosis.as_deref(), t.failure.as_deref());
    Row {
        id: t.task_id.to_string(),
        href: format::link("task", &t.task_id),
        name: t.name.as_deref().unwrap_or_default().to_string(),
        namespace: t.namespace.clone(),
        class: format::state_class(&state),
        state,
        node: t.node_id.as_deref().unwrap_or_default().to_string(),
        count: t.attempts.to_string(),
        what: format::spec_resources(&t.spec.placement.resources),
        why,
        infeasible,
    }
}

fn group_row(g: &Group) -> Row {
    let state = format::word(&g.state);
    let (why, infeasible) = why(g.diagnosis.as_ref(), None);
    // Each node once, in bundle order.
    let mut nodes: Vec<&str> = Vec::new();
    for node in g.bundles.iter().filter_map(|b| b.node_id.as_deref()) {
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    let bundles: Vec<String> = g.bundles.iter().map(|b| format::shape(&b.resources)).collect();
    Row {
        id: g.group_id.clone(),
        href: format::link("placement_group", &g.group_id),
        name: g.name.clone().unwrap_or_default(),
        namespace: g.namespace.clone(),
        class: format::state_class(&state),
        state,
        node: nodes.join(", "),
        count: g.strategy.clone(),
        what: bundles.join(" | "),
        why,
        infeasible,
    }
}

async fn list_page(ui: &Ui, kind: WorkList, query: Option<String>) -> Result<Response, UiError> {
    let view = ui.handle.view();
    let filters = Filters::parse(query.as_deref())?;
    let rows = Rows::new(&view, kind, &filters)?;
    Ok(render(&ListPage {
        title: kind.title(),
        page: kind.page(),
        states: kind.states(),
        label_filter: kind == WorkList::Actors,
        nodes: view.nodes.keys().cloned().collect(),
        filters,
        rows,
    }))
}

async fn list_rows(ui: &Ui, kind: WorkList, query: Option<String>) -> Result<Response, UiError> {
    let filters = Filters::parse(query.as_deref())?;
    Ok(render(&Rows::new(&ui.handle.view(), kind, &filters)?))
}

/// `GET /ui/actors?state=&namespace=&node=&label=`.
pub(crate) async fn actors_page(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_page(&ui, WorkList::Actors, q).await
}

/// `GET /ui/actors/rows?…`.
pub(crate) async fn actor_rows(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_rows(&ui, WorkList::Actors, q).await
}

/// `GET /ui/tasks?…`.
pub(crate) async fn tasks_page(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_page(&ui, WorkList::Tasks, q).await
}

/// `GET /ui/tasks/rows?…`.
pub(crate) async fn task_rows(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_rows(&ui, WorkList::Tasks, q).await
}

/// `GET /ui/groups?…`.
pub(crate) async fn groups_page(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_page(&ui, WorkList::Groups, q).await
}

/// `GET /ui/groups/rows?…`.
pub(crate) async fn group_rows(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_rows(&ui, WorkList::Groups, q).await
}

// ---------------------------------------------------------------------------------------------
// Details.

/// A detail page: what it is, how it asked to be placed, what happened to it, and why it
/// waits. It polls itself.
#[derive(Template)]
#[template(path = "dashboard/detail.html")]
pub(crate) struct Detail {
    /// The list it belongs to: `Actors`, and its route, `actors`.
    list_title: &'static str,
    list_page: &'static str,
    /// `Actor`, `Task`, `Placement group`.
    noun: &'static str,
    id: String,
    /// Its own URL (`/ui/actors/actor-1`), for the poll.
    url: String,
    state: String,
    class: &'static str,
    /// `View::explain`'s sentence: `actor-2 is PENDING, waiting: …`.
    summary: String,
    facts: Vec<(&'static str, String)>,
    /// The scheduling options it was created with.
    options: Vec<(&'static str, String)>,
    /// The whole spec, as pretty JSON.
    spec: String,
    diagnosis: Option<DiagnosisWords>,
    bundles: Vec<BundleRow>,
    history: Vec<EventRow>,
}

/// A diagnosis in words.
struct DiagnosisWords {
    infeasible: bool,
    summary: String,
    /// `3 nodes`, `too little GPU in total`, `insufficient_total:GPU`.
    reasons: Vec<(String, String, String)>,
}

impl DiagnosisWords {
    fn new(d: &Diagnosis) -> DiagnosisWords {
        DiagnosisWords {
            infeasible: d.infeasible,
            summary: d.summary.clone(),
            reasons: d
                .reasons
                .iter()
                .map(|r| {
                    let nodes = if r.count == 1 { "node" } else { "nodes" };
                    (format!("{} {nodes}", r.count), r.text.clone(), r.code.clone())
                })
                .collect(),
        }
    }
}

struct BundleRow {
    index: usize,
    resources: String,
    node: String,
}

struct EventRow {
    time: String,
    kind: String,
    node: String,
    message: String,
}

fn events(history: &[Event]) -> Vec<EventRow> {
    // Newest first: what just happened is what a person looks for.
    history
        .iter()
        .rev()
        .map(|e| EventRow {
            time: format::time(e.at_ms),
            kind: e.kind.as_str().replace('_', " "),
            node: e.node_id.as_deref().unwrap_or_default().to_string(),
            message: e.message.to_string(),
        })
        .collect()
}

fn spec_json<T: serde::Serialize>(spec: &T) -> String {
    serde_json::to_string_pretty(spec).unwrap_or_default()
}

fn or_none(text: Option<&str>) -> String {
    text.filter(|t| !t.is_empty()).unwrap_or(NONE).to_string()
}

/// The placement keys every kind shares.
fn placement(spec: &PlacementSpec) -> Vec<(&'static str, String)> {
    let strategy = spec.scheduling_strategy.as_ref();
    let fallback = Some(&spec.fallback_strategy).filter(|f| !f.is_empty());
    vec![
        ("Strategy", strategy.map_or_else(|| "DEFAULT".into(), |s| format::optional(Some(s)))),
        ("Label selector", format::optional(spec.label_selector.as_ref())),
        ("Fallback", format::optional(fallback)),
        ("Tolerations", format::optional(spec.tolerations.as_ref())),
    ]
}

impl Detail {
    fn base(view: &View, kind: WorkList, noun: &'static str, id: &str, state: String) -> Detail {
        let summary = view.explain(id).map(|e| e.summary).unwrap_or_default();
        Detail {
            list_title: kind.title(),
            list_page: kind.page(),
            noun,
            id: id.to_string(),
            url: format!("/ui/{}/{}", kind.page(), format::segment(id)),
            class: format::state_class(&state),
            state,
            summary,
            facts: vec![],
            options: vec![],
            spec: String::new(),
            diagnosis: None,
            bundles: vec![],
            history: Default::default(),
        }
    }

    pub(crate) fn actor(view: &View, a: &Actor) -> Detail {
        let mut d =
            Detail::base(view, WorkList::Actors, "Actor", &a.actor_id, format::word(&a.state));
        let spec = &a.spec;
        let max =
            if spec.max_restarts < 0 { "always".into() } else { spec.max_restarts.to_string() };
        d.facts = vec![
            ("Name", or_none(a.name.as_deref())),
            ("Namespace", a.namespace.clone()),
            ("Node", or_none(a.node_id.as_deref())),
            ("Instances", format::instances(&a.instances)),
            ("Restarts", format!("{} (at most {max})", a.restarts)),
            ("Death reason", or_none(a.death_reason.as_deref())),
            ("Created", format::time(a.created_at_ms)),
            ("Command", format::command_line(&spec.command, &spec.args)),
        ];
        d.options = vec![
            ("Resources", format::spec_resources(&spec.placement.resources)),
            ("Actor labels", format::pairs(&spec.labels)),
        ];
        d.options.extend(placement(&spec.placement));
        d.spec = spec_json(spec);
        d.diagnosis = a.diagnosis.as_deref().map(DiagnosisWords::new);
        d.history = events(&a.history);
        d
    }

    pub(crate) fn task(view: &View, t: &Task) -> Detail {
        let mut d = Detail::base(view, WorkList::Tasks, "Task", &t.task_id, format::word(&t.state));
        let spec = &t.spec;
        d.facts = vec![
            ("Name", or_none(t.name.as_deref())),
            ("Namespace", t.namespace.clone()),
            ("Node", or_none(t.node_id.as_deref())),
            ("Instances", format::instances(&t.instances)),
            ("Attempts", format!("{} (retries at most {})", t.attempts, spec.max_retries)),
            ("Exit code", t.exit_code.map(|c| c.to_string()).unwrap_or_else(|| NONE.into())),
            ("Failure", or_none(t.failure.as_deref())),
            ("Created", format::time(t.created_at_ms)),
            ("Command", format::command_line(&spec.command, &spec.args)),
        ];
        d.options = vec![("Resources", format::spec_resources(&spec.placement.resources))];
        d.options.extend(placement(&spec.placement));
        d.spec = spec_json(spec);
        d.diagnosis = t.diagnosis.as_deref().map(DiagnosisWords::new);
        d.history = events(&t.history);
        d
    }

    pub(crate) fn group(view: &View, g: &Group) -> Detail {
        let mut d = Detail::base(
            view,
            WorkList::Groups,
            "Placement group",
            &g.group_id,
            format::word(&g.state),
        );
        let spec = &g.spec;
        let alternative = match g.alternative {
            None => NONE.to_string(),
            Some(0) => "0 (bundles)".to_string(),
            Some(i) => format!("{i} (fallback_strategy[{}])", i - 1),
        };
        d.facts = vec![
            ("Name", or_none(g.name.as_deref())),
            ("Namespace", g.namespace.clone()),
            ("Alternative reserved", alternative),
            ("Created", format::time(g.created_at_ms)),
        ];
        d.options = vec![
            ("Strategy", g.strategy.clone()),
            (
                "Bundle label selectors",
                format::optional(spec.placement.bundle_label_selector.as_ref()),
            ),
            ("Tolerations", format::optional(spec.placement.tolerations.as_ref())),
            (
                "Fallback",
                format::optional(Some(&spec.placement.fallback_strategy).filter(|f| !f.is_empty())),
            ),
        ];
        d.spec = spec_json(spec);
        d.bundles = g
            .bundles
            .iter()
            .map(|b| BundleRow {
                index: b.index,
                resources: format::shape(&b.resources),
                node: or_none(b.node_id.as_deref()),
            })
            .collect();
        d.diagnosis = g.diagnosis.as_ref().map(DiagnosisWords::new);
        d.history = events(&g.history);
        d
    }
}

/// `GET /ui/actors/{id}`.
pub(crate) async fn actor_detail(
    State(ui): State<Ui>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let actor = view.actor(&id).ok_or_else(|| UiError::not_found("actor", &id))?;
    Ok(render(&Detail::actor(&view, &actor)))
}

/// `GET /ui/tasks/{id}`.
pub(crate) async fn task_detail(
    State(ui): State<Ui>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let task = view.task(&id).ok_or_else(|| UiError::not_found("task", &id))?;
    Ok(render(&Detail::task(&view, &task)))
}

/// `GET /ui/groups/{id}`.
pub(crate) async fn group_detail(
    State(ui): State<Ui>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let group = view.group(&id).ok_or_else(|| UiError::not_found("placement_group", &id))?;
    Ok(render(&Detail::group(&view, &group)))
}
