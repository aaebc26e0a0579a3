//! Actors, tasks, placement groups and jobs: filterable lists (state, namespace, node, job
//! and, for actors, label: `View::list_*`), and a detail page each with its scheduling
//! options, its history and, while it waits, the diagnosis in words; a job's page links to
//! what it owns.

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use axum::Extension;
use berth_api::rest::{
    Actor, Diagnosis, Event, Group, Job, Lifetime, ListQuery, Ownership, Role, Task, WorkMeasured,
};
use berth_api::spec::PlacementSpec;

use super::format::{self, NONE};
use super::svg::{self, BundleBox};
use super::{is_admin, path_param, render, Ui, UiError};
use crate::view::View;

/// Rows a page shows unless the person picks another size.
pub(crate) const PAGE_ROWS: usize = 50;
/// The page sizes offered.
pub(crate) const PAGE_SIZES: &[usize] = &[20, 50, 100, 500];
/// The order a list starts in: newest first.
pub(crate) const DEFAULT_SORT: &str = "-created_at_ms";

/// Which list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkList {
    Actors,
    Tasks,
    Groups,
    Jobs,
}

impl WorkList {
    fn title(self) -> &'static str {
        match self {
            WorkList::Actors => "Actors",
            WorkList::Tasks => "Tasks",
            WorkList::Groups => "Placement groups",
            WorkList::Jobs => "Jobs",
        }
    }

    /// The route word: `/ui/<page>`, `#<page>`.
    fn page(self) -> &'static str {
        match self {
            WorkList::Actors => "actors",
            WorkList::Tasks => "tasks",
            WorkList::Groups => "groups",
            WorkList::Jobs => "jobs",
        }
    }

    fn states(self) -> &'static [&'static str] {
        match self {
            WorkList::Actors => &["PENDING", "ALIVE", "RESTARTING", "DEAD"],
            WorkList::Tasks => &["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"],
            WorkList::Groups => &["PENDING", "CREATED", "RESCHEDULING", "REMOVED"],
            WorkList::Jobs => &["RUNNING", "FINISHED", "STOPPED", "LOST"],
        }
    }

    /// The columns of the table: heading, and the REST list's sort column (none: not
    /// sortable).
    fn columns(self) -> [(&'static str, Option<&'static str>); 9] {
        if self == WorkList::Jobs {
            return [
                ("ID", Some("job_id")),
                ("Name", Some("name")),
                ("Namespace", None),
                ("State", Some("state")),
                ("Host", None),
                ("Ended (UTC)", Some("ended_at_ms")),
                ("Started (UTC)", Some("created_at_ms")),
                ("Driver", None),
                ("Why it ended", None),
            ];
        }
        let (id, count, what) = match self {
            WorkList::Actors => ("actor_id", ("Restarts", Some("restarts")), "Labels"),
            WorkList::Tasks => ("task_id", ("Attempts", Some("attempts")), "Resources"),
            WorkList::Groups | WorkList::Jobs => {
                ("group_id", ("Strategy", Some("strategy")), "Bundles")
            }
        };
        let node = match self {
            WorkList::Groups | WorkList::Jobs => None,
            _ => Some("node_id"),
        };
        [
            ("ID", Some(id)),
            ("Name", Some("name")),
            ("Namespace", Some("namespace")),
            ("State", Some("state")),
            ("Node", node),
            count,
            ("Created (UTC)", Some("created_at_ms")),
            (what, None),
            ("Why", None),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// Lists.

/// The filters, order and page as the form sends them: an empty field is no filter. The
/// nodes' list uses it too (its form has no namespace or node field).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Filters {
    #[serde(default)]
    pub(crate) state: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    pub(crate) label: String,
    /// Only objects of this job.
    #[serde(default)]
    job: String,
    /// Searched in names and IDs.
    #[serde(default)]
    pub(crate) name: String,
    /// A REST sort (`-created_at_ms`); empty: the list's default order.
    #[serde(default)]
    sort: String,
    /// The REST cursor of the page shown; empty: the first page.
    #[serde(default)]
    cursor: String,
    /// The page's number, from 1, for "rows 51–100" (the cursor alone does not say).
    #[serde(default)]
    page: String,
    /// Rows per page; empty: [`PAGE_ROWS`].
    #[serde(default)]
    pub(crate) limit: String,
    /// The list's default order, when `sort` is empty (not a form field).
    #[serde(skip)]
    default_sort: Option<&'static str>,
}

impl Filters {
    /// Parses a query string (`state=ALIVE&label=app%3Dweb`), or a form body; unknown
    /// parameters are ignored.
    pub(crate) fn parse(query: Option<&str>) -> Result<Filters, UiError> {
        serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|e| UiError::invalid("query", e.to_string()))
    }

    /// These filters over a list whose default order is `sort` (newest first otherwise).
    pub(crate) fn ordered_by(mut self, sort: &'static str) -> Filters {
        self.default_sort = Some(sort);
        self
    }

    pub(crate) fn sort(&self) -> &str {
        let default = self.default_sort.unwrap_or(DEFAULT_SORT);
        Some(self.sort.trim()).filter(|s| !s.is_empty()).unwrap_or(default)
    }

    /// The cursor of the page shown.
    pub(crate) fn cursor(&self) -> &str {
        self.cursor.trim()
    }

    pub(crate) fn limit(&self) -> Result<usize, UiError> {
        match self.limit.trim() {
            "" => Ok(PAGE_ROWS),
            text => {
                text.parse::<usize>().ok().filter(|n| PAGE_SIZES.contains(n)).ok_or_else(|| {
                    UiError::invalid(
                        "limit",
                        format!("{text:?} is not one of the page sizes, 20, 50, 100 or 500"),
                    )
                })
            }
        }
    }

    pub(crate) fn page(&self) -> Result<usize, UiError> {
        match self.page.trim() {
            "" => Ok(1),
            text => text.parse::<usize>().ok().filter(|n| (1..=1_000_000).contains(n)).ok_or_else(
                || UiError::invalid("page", format!("{text:?} is not a page number from 1")),
            ),
        }
    }

    pub(crate) fn query(&self) -> Result<ListQuery, UiError> {
        let some = |text: &str| Some(text.trim().to_string()).filter(|t| !t.is_empty());
        Ok(ListQuery {
            state: some(&self.state),
            namespace: some(&self.namespace),
            node: some(&self.node),
            label: some(&self.label),
            job: some(&self.job),
            name: some(&self.name),
            limit: Some(self.limit()?),
            sort: Some(self.sort().to_string()),
            cursor: some(&self.cursor),
        })
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
    /// Actors, tasks and groups have a job to filter on.
    job_filter: bool,
    filters: Filters,
    /// The node IDs, for the node filter.
    nodes: Vec<String>,
    sizes: &'static [usize],
    rows: Rows,
}

/// A column heading: its text and, when sortable, the sort a click asks for and how the
/// list is sorted by it now (`ascending`, `descending`, or empty).
pub(crate) struct Heading {
    pub(crate) text: &'static str,
    pub(crate) click: Option<String>,
    pub(crate) aria_sort: &'static str,
}

/// The headings of `columns` (text, and the REST sort column when sortable) for a list sorted
/// by `sort`; a click on a column in `first_desc` (numbers, times) sorts the largest first,
/// on any other from A.
pub(crate) fn headings(
    columns: &[(&'static str, Option<&'static str>)],
    sort: &str,
    first_desc: &[&str],
) -> Vec<Heading> {
    let (descending, sorted_by) = match sort.strip_prefix('-') {
        Some(column) => (true, column),
        None => (false, sort),
    };
    columns
        .iter()
        .map(|&(text, column)| match column {
            None => Heading { text, click: None, aria_sort: "" },
            Some(column) if column == sorted_by => Heading {
                text,
                click: Some(if descending { column.to_string() } else { format!("-{column}") }),
                aria_sort: if descending { "descending" } else { "ascending" },
            },
            Some(column) => {
                let click = if first_desc.contains(&column) {
                    format!("-{column}")
                } else {
                    column.to_string()
                };
                Heading { text, click: Some(click), aria_sort: "" }
            }
        })
        .collect()
}

/// The rows of a list (what the page polls), with the sortable headings and the pager.
#[derive(Template)]
#[template(path = "dashboard/rows.html")]
pub(crate) struct Rows {
    /// The route word, for the rows' URL.
    page_word: &'static str,
    headings: Vec<Heading>,
    /// `nothing matches` in this kind's words.
    empty: &'static str,
    rows: Vec<Row>,
    total: usize,
    /// The first row's position, from 1.
    first: usize,
    page: usize,
    next_cursor: Option<String>,
    /// The order and page shown, carried by the filter form's hidden fields so the live
    /// refresh and a filter change keep them.
    sort: String,
    cursor: String,
    /// Whether the hidden fields go out of band (a refresh) or are in the page (its first
    /// rendering, before the form exists).
    oob: bool,
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
    created: String,
    /// Labels (actors), resources (tasks, groups).
    what: String,
    /// Why it waits, or why it ended.
    why: String,
    infeasible: bool,
}

impl Rows {
    /// The page of `kind` that `filters` ask for.
    pub(crate) fn new(view: &View, kind: WorkList, filters: &Filters) -> Result<Rows, UiError> {
        let query = filters.query()?;
        let (rows, total, next_cursor) = match kind {
            WorkList::Actors => {
                let list = view.list_actors(&query)?;
                (list.items.iter().map(actor_row).collect::<Vec<_>>(), list.total, list.next_cursor)
            }
            WorkList::Tasks => {
                let list = view.list_tasks(&query)?;
                (list.items.iter().map(task_row).collect(), list.total, list.next_cursor)
            }
            WorkList::Groups => {
                let list = view.list_groups(&query)?;
                (list.items.iter().map(group_row).collect(), list.total, list.next_cursor)
            }
            WorkList::Jobs => {
                let list = view.list_jobs(&query)?;
                (list.items.iter().map(job_row).collect(), list.total, list.next_cursor)
            }
        };
        let sort = filters.sort().to_string();
        // Numbers and times start with the largest, words from A.
        let first_desc = ["created_at_ms", "ended_at_ms", "restarts", "attempts"];
        let headings = headings(&kind.columns(), &sort, &first_desc);
        let empty = match kind {
            WorkList::Actors => "No actor matches.",
            WorkList::Tasks => "No task matches.",
            WorkList::Groups => "No placement group matches.",
            WorkList::Jobs => "No job matches.",
        };
        let page = filters.page()?;
        let limit = filters.limit()?;
        let first = (page - 1).saturating_mul(limit).saturating_add(1);
        Ok(Rows {
            page_word: kind.page(),
            headings,
            empty,
            rows,
            total,
            first,
            page,
            next_cursor,
            sort,
            cursor: filters.cursor.trim().to_string(),
            oob: true,
        })
    }

    /// The last row's position.
    fn last(&self) -> usize {
        self.first + self.rows.len().saturating_sub(1)
    }

    /// The filter form's hidden fields that hold the order and page shown.
    fn state_fields(&self) -> String {
        let oob = if self.oob { r#" hx-swap-oob="true""# } else { "" };
        format!(
            r#"<span id="list-state"{oob}><input type="hidden" name="sort" value="{}"><input type="hidden" name="cursor" value="{}"><input type="hidden" name="page" value="{}"></span>"#,
            format::attr(&self.sort),
            format::attr(&self.cursor),
            self.page
        )
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
        created: format::time(a.created_at_ms),
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
        created: format::time(t.created_at_ms),
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
        created: format::time(g.created_at_ms),
        what: bundles.join(" | "),
        why,
        infeasible,
    }
}

fn job_row(j: &Job) -> Row {
    let state = format::word(&j.state);
    let meta = |key: &str| j.spec.metadata.get(key).cloned().unwrap_or_default();
    let driver = [meta("sdk"), meta("pid").chars().take(16).collect::<String>()]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" pid ");
    Row {
        id: j.job_id.clone(),
        href: format::link("job", &j.job_id),
        name: j.spec.name.clone().unwrap_or_default(),
        namespace: j.spec.namespace.clone().unwrap_or_else(|| "default".into()),
        class: format::state_class(&state),
        state,
        node: meta("host"),
        count: j.ended_at_ms.map(format::time).unwrap_or_default(),
        created: format::time(j.created_at_ms),
        what: driver,
        why: j.end_reason.clone().unwrap_or_default(),
        infeasible: false,
    }
}

async fn list_page(ui: &Ui, kind: WorkList, query: Option<String>) -> Result<Response, UiError> {
    let view = ui.handle.view();
    let filters = Filters::parse(query.as_deref())?;
    let mut rows = Rows::new(&view, kind, &filters)?;
    rows.oob = false;
    Ok(render(&ListPage {
        title: kind.title(),
        page: kind.page(),
        states: kind.states(),
        label_filter: kind == WorkList::Actors,
        job_filter: kind != WorkList::Jobs,
        nodes: view.nodes.keys().cloned().collect(),
        sizes: PAGE_SIZES,
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

/// `GET /ui/jobs?…`.
pub(crate) async fn jobs_page(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_page(&ui, WorkList::Jobs, q).await
}

/// `GET /ui/jobs/rows?…`.
pub(crate) async fn job_rows(
    State(ui): State<Ui>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    list_rows(&ui, WorkList::Jobs, q).await
}

// ---------------------------------------------------------------------------------------------
// Details.

/// A detail page: what it is, how it asked to be placed, what happened to it, why it waits,
/// the actions on it and, for actors and tasks, their logs. Its live part polls itself; the
/// log panel is outside it, so a refresh never cuts a log being read.
#[derive(Template)]
#[template(path = "dashboard/detail.html")]
pub(crate) struct Detail {
    /// The whole page (live part and logs), or the live part alone (its refresh, an action's
    /// answer).
    full: bool,
    /// The list it belongs to: `Actors`, and its route, `actors`.
    list_title: &'static str,
    list_page: &'static str,
    /// `Actor`, `Task`, `Placement group`.
    noun: &'static str,
    id: String,
    /// The live part's URL (`/ui/actors/actor-1?part=live`), for the poll.
    url: String,
    state: String,
    class: &'static str,
    /// `View::explain`'s sentence: `actor-2 is PENDING, waiting: …`.
    summary: String,
    facts: Vec<(&'static str, String)>,
    /// Links to what it belongs to or owns: label and `#page…` route.
    links: Vec<(String, String)>,
    /// The scheduling options it was created with.
    options: Vec<(&'static str, String)>,
    /// The whole spec, as pretty JSON.
    spec: String,
    diagnosis: Option<DiagnosisWords>,
    bundles: Vec<BundleRow>,
    /// The bundles on their nodes, as SVG (groups).
    bundle_map: String,
    history: Vec<EventRow>,
    /// What a person may do to it now (kill, cancel, remove).
    actions: Vec<Action>,
    /// The token may take actions (admin); else they are shown disabled.
    admin: bool,
    /// The head's answer to the action just taken.
    flash: Option<String>,
    /// The attempts whose logs can be read (actors, tasks that were placed).
    attempts: Vec<u32>,
    /// The logs can be followed: the work may still write.
    followable: bool,
    /// It runs on a node whose agent may measure it: the live part also looks again every
    /// 5 s, since measurements change without the cluster changing.
    measures: bool,
}

/// A button that changes something, after the person confirms.
pub(crate) struct Action {
    pub(crate) label: &'static str,
    /// The POST route.
    pub(crate) url: String,
    /// The question asked first.
    pub(crate) confirm: String,
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

/// Links to an object's job and owner (when it names them).
fn ownership_links(ownership: &Ownership) -> Vec<(String, String)> {
    let (job, owner) = (ownership.job_id.as_deref(), ownership.owner_id.as_deref());
    let mut links = Vec::new();
    if let Some(job) = job {
        links.push((format!("Its job, {job}"), format::link("job", job)));
    }
    if let Some(owner) = owner {
        let kind = if owner.starts_with("task-") { "task" } else { "actor" };
        links.push((format!("Its owner, {owner}"), format::link(kind, owner)));
    }
    links
}

/// Who owns an object, in words: `actor-5 (its process)`, `job-3's driver`, or none.
fn owner_words(ownership: &Ownership) -> String {
    let (job, owner) = (ownership.job_id.as_deref(), ownership.owner_id.as_deref());
    let who = match (owner, job) {
        (Some(owner), _) => format!("{owner}'s process"),
        (None, Some(job)) => format!("the driver of {job}"),
        (None, None) => return "none (ends only when ended by name)".into(),
    };
    match ownership.lifetime {
        Lifetime::Detached => format!("{who}; detached: outlives it"),
        Lifetime::NonDetached => format!("{who}; ends with it"),
    }
}

impl Detail {
    fn base(view: &View, kind: WorkList, noun: &'static str, id: &str, state: String) -> Detail {
        let summary = view.explain(id).map(|e| e.summary).unwrap_or_default();
        Detail {
            full: true,
            bundle_map: String::new(),
            actions: vec![],
            admin: false,
            flash: None,
            attempts: vec![],
            followable: false,
            measures: false,
            list_title: kind.title(),
            list_page: kind.page(),
            noun,
            id: id.to_string(),
            url: format!("/ui/{}/{}?part=live", kind.page(), format::segment(id)),
            class: format::state_class(&state),
            state,
            summary,
            facts: vec![],
            links: vec![],
            options: vec![],
            spec: String::new(),
            diagnosis: None,
            bundles: vec![],
            history: Default::default(),
        }
    }

    /// An actor's page; `uses` is what its running attempt uses, as last measured.
    pub(crate) fn actor(view: &View, a: &Actor, uses: Option<&WorkMeasured>) -> Detail {
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
            ("Uses (measured)", measured_words(uses, &spec.placement.resources)),
            ("Restarts", format!("{} (at most {max})", a.restarts)),
            ("Death reason", or_none(a.death_reason.as_deref())),
            ("Owner", owner_words(&spec.ownership)),
            ("Created", format::time(a.created_at_ms)),
            ("Command", format::command_line(&spec.command, &spec.args)),
        ];
        d.links = ownership_links(&spec.ownership);
        d.options = vec![
            ("Resources", format::spec_resources(&spec.placement.resources)),
            ("Actor labels", format::pairs(&spec.labels)),
        ];
        d.options.extend(placement(&spec.placement));
        d.spec = spec_json(spec);
        d.diagnosis = a.diagnosis.as_deref().map(DiagnosisWords::new);
        d.history = events(&a.history);
        let alive = a.state != berth_api::rest::ActorState::Dead;
        if alive {
            d.actions.push(Action {
                label: "Kill",
                url: format!("/ui/actors/{}/kill", format::segment(&a.actor_id)),
                confirm: format!(
                    "Kill {}? Its process is stopped and it is not restarted.",
                    a.actor_id
                ),
            });
        }
        if a.node_id.is_some() {
            d.attempts = (1..=a.restarts.saturating_add(1)).collect();
        }
        d.followable = alive;
        d.measures = alive && a.node_id.is_some();
        d
    }

    /// A task's page; `uses` is what its running attempt uses, as last measured.
    pub(crate) fn task(view: &View, t: &Task, uses: Option<&WorkMeasured>) -> Detail {
        let mut d = Detail::base(view, WorkList::Tasks, "Task", &t.task_id, format::word(&t.state));
        let spec = &t.spec;
        d.facts = vec![
            ("Name", or_none(t.name.as_deref())),
            ("Namespace", t.namespace.clone()),
            ("Node", or_none(t.node_id.as_deref())),
            ("Instances", format::instances(&t.instances)),
            ("Uses (measured)", measured_words(uses, &spec.placement.resources)),
            ("Attempts", format!("{} (retries at most {})", t.attempts, spec.max_retries)),
            ("Exit code", t.exit_code.map(|c| c.to_string()).unwrap_or_else(|| NONE.into())),
            ("Failure", or_none(t.failure.as_deref())),
            ("Owner", owner_words(&spec.ownership)),
            ("Created", format::time(t.created_at_ms)),
            ("Command", format::command_line(&spec.command, &spec.args)),
        ];
        d.links = ownership_links(&spec.ownership);
        d.options = vec![("Resources", format::spec_resources(&spec.placement.resources))];
        d.options.extend(placement(&spec.placement));
        d.spec = spec_json(spec);
        d.diagnosis = t.diagnosis.as_deref().map(DiagnosisWords::new);
        d.history = events(&t.history);
        if !t.state.is_final() {
            d.actions.push(Action {
                label: "Cancel",
                url: format!("/ui/tasks/{}/cancel", format::segment(&t.task_id)),
                confirm: format!(
                    "Cancel {}? Its process is stopped and it is not retried.",
                    t.task_id
                ),
            });
        }
        if t.node_id.is_some() {
            d.attempts = (1..=t.attempts.max(1)).collect();
        }
        d.followable = !t.state.is_final();
        d.measures = !t.state.is_final() && t.node_id.is_some();
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
            ("Owner", owner_words(&spec.ownership)),
            ("Created", format::time(g.created_at_ms)),
        ];
        d.links = ownership_links(&spec.ownership);
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
        d.bundle_map = bundle_map(g);
        if g.state != berth_api::rest::GroupState::Removed {
            d.actions.push(Action {
                label: "Remove",
                url: format!("/ui/groups/{}/remove", format::segment(&g.group_id)),
                confirm: format!(
                    "Remove {}? Its reservations are freed and the actors and tasks in it are \
                     stopped.",
                    g.group_id
                ),
            });
        }
        d
    }

    /// A job's page: what it is, how it ended, links to what belongs to it, and Stop.
    pub(crate) fn job(view: &View, j: &Job) -> Detail {
        let mut d = Detail::base(view, WorkList::Jobs, "Job", &j.job_id, format::word(&j.state));
        let spec = &j.spec;
        d.summary = match &j.end_reason {
            Some(reason) => format!("{} is {}: {reason}", j.job_id, d.state),
            None => format!("{} is {}: its driver holds it", j.job_id, d.state),
        };
        d.facts = vec![
            ("Name", or_none(spec.name.as_deref())),
            ("Namespace", spec.namespace.clone().unwrap_or_else(|| "default".into())),
            ("Lease", format!("{:.1} s without a renewal", j.lease_ms as f64 / 1000.0)),
            ("Started", format::time(j.created_at_ms)),
            ("Ended", j.ended_at_ms.map(format::time).unwrap_or_else(|| NONE.into())),
            ("Why it ended", or_none(j.end_reason.as_deref())),
            ("Driver", format::pairs(&spec.metadata)),
        ];
        let query = ListQuery { job: Some(j.job_id.clone()), limit: Some(1), ..Default::default() };
        let counts = [
            ("actors", view.list_actors(&query).map(|l| l.total)),
            ("tasks", view.list_tasks(&query).map(|l| l.total)),
            ("groups", view.list_groups(&query).map(|l| l.total)),
        ];
        for (page, total) in counts {
            let noun = if page == "groups" { "placement groups" } else { page };
            let total = total.unwrap_or(0);
            let href = format!("#{page}?job={}", format::segment(&j.job_id));
            d.links.push((format!("Its {noun} ({total})"), href));
        }
        d.spec = spec_json(spec);
        d.history = events(&j.history);
        if !j.state.is_final() {
            d.actions.push(Action {
                label: "Stop",
                url: format!("/ui/jobs/{}/stop", format::segment(&j.job_id)),
                confirm: format!(
                    "Stop {}? Its actors that are not detached are killed, its tasks \
                     cancelled and its placement groups removed.",
                    j.job_id
                ),
            });
        }
        d
    }

    /// The live part alone, as `role` may act on it, with the head's answer to an action.
    fn live(mut self, admin: bool, flash: Option<String>) -> Detail {
        self.full = false;
        self.admin = admin;
        self.flash = flash;
        self
    }

    fn page(mut self, admin: bool) -> Detail {
        self.admin = admin;
        self
    }
}

/// The bundles of `g` on their nodes, a column per node in bundle order, unplaced ones last.
fn bundle_map(g: &Group) -> String {
    if g.bundles.is_empty() {
        return String::new();
    }
    let mut columns: Vec<(String, Vec<BundleBox>)> = Vec::new();
    for b in &g.bundles {
        let node = b.node_id.clone().unwrap_or_else(|| "not placed".to_string());
        let bundle = BundleBox { index: b.index, resources: format::shape(&b.resources) };
        match columns.iter_mut().find(|(n, _)| *n == node) {
            Some((_, boxes)) => boxes.push(bundle),
            None => columns.push((node, vec![bundle])),
        }
    }
    columns.sort_by_key(|(node, _)| node == "not placed");
    svg::bundle_map(&columns)
}

/// `?part=live` asks for the live part alone.
fn live_part(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "part" && v == "live")
    })
}

fn detail_answer(d: Detail, query: Option<&str>, role: Option<&Extension<Role>>) -> Response {
    let admin = is_admin(role);
    if live_part(query) {
        render(&d.live(admin, None))
    } else {
        render(&d.page(admin))
    }
}

/// What `work_id`'s running attempt on `node_id` uses, as its agent last measured it.
fn measured_use(ui: &Ui, node_id: Option<&str>, work_id: &str) -> Option<WorkMeasured> {
    ui.handle.measurements.work(node_id?, work_id)
}

/// What an attempt uses beside what was reserved: `CPU 0.99 · memory 10Mi · 1 process
/// (attempt 1); reserved CPU 1`, or why there is nothing to show.
fn measured_words(uses: Option<&WorkMeasured>, reserved: &impl serde::Serialize) -> String {
    match uses {
        Some(w) => {
            format!("{}; reserved {}", format::work_use(w), format::spec_resources(reserved))
        }
        None => "not measured (not running, or its node's agent does not measure)".into(),
    }
}

/// `GET /ui/actors/{id}` (`?part=live`: the live part alone).
pub(crate) async fn actor_detail(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let actor = view.actor(&id).ok_or_else(|| UiError::not_found("actor", &id))?;
    let uses = measured_use(&ui, actor.node_id.as_deref(), &actor.actor_id);
    Ok(detail_answer(Detail::actor(&view, &actor, uses.as_ref()), q.as_deref(), role.as_ref()))
}

/// `GET /ui/tasks/{id}` (`?part=live`: the live part alone).
pub(crate) async fn task_detail(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let task = view.task(&id).ok_or_else(|| UiError::not_found("task", &id))?;
    let uses = measured_use(&ui, task.node_id.as_deref(), &task.task_id);
    Ok(detail_answer(Detail::task(&view, &task, uses.as_ref()), q.as_deref(), role.as_ref()))
}

/// `GET /ui/groups/{id}` (`?part=live`: the live part alone).
pub(crate) async fn group_detail(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let group = view.group(&id).ok_or_else(|| UiError::not_found("placement_group", &id))?;
    Ok(detail_answer(Detail::group(&view, &group), q.as_deref(), role.as_ref()))
}

/// `GET /ui/jobs/{id}` (`?part=live`: the live part alone).
pub(crate) async fn job_detail(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let view = ui.handle.view();
    let job = view.job(&id).ok_or_else(|| UiError::not_found("job", &id))?;
    Ok(detail_answer(Detail::job(&view, &job), q.as_deref(), role.as_ref()))
}

/// `POST /ui/jobs/{id}/stop`: stops the job, and what it owns; answers the live part.
pub(crate) async fn stop_job(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let reason = Some("stopped from the dashboard".to_string());
    let job = ui.handle.stop_job(&id, reason).await?;
    let flash = format!("{} stopped: it is {}.", job.job_id, format::word(&job.state));
    let d = Detail::job(&ui.handle.view(), &job);
    Ok(render(&d.live(is_admin(role.as_ref()), Some(flash))))
}

/// `POST /ui/actors/{id}/kill`: kills the actor; answers the live part with the head's word.
pub(crate) async fn kill_actor(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let actor = ui.handle.kill_actor(&id).await?;
    let flash = format!("{} killed: it is {}.", actor.actor_id, format::word(&actor.state));
    let uses = measured_use(&ui, actor.node_id.as_deref(), &actor.actor_id);
    let d = Detail::actor(&ui.handle.view(), &actor, uses.as_ref());
    Ok(render(&d.live(is_admin(role.as_ref()), Some(flash))))
}

/// `POST /ui/tasks/{id}/cancel`: cancels the task; answers the live part.
pub(crate) async fn cancel_task(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let task = ui.handle.cancel_task(&id).await?;
    let flash = format!("{} cancelled: it is {}.", task.task_id, format::word(&task.state));
    let uses = measured_use(&ui, task.node_id.as_deref(), &task.task_id);
    let d = Detail::task(&ui.handle.view(), &task, uses.as_ref());
    Ok(render(&d.live(is_admin(role.as_ref()), Some(flash))))
}

/// `POST /ui/groups/{id}/remove`: removes the group; answers the live part.
pub(crate) async fn remove_group(
    State(ui): State<Ui>,
    role: Option<Extension<Role>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, UiError> {
    let id = path_param(id)?;
    let group = ui.handle.remove_group(&id).await?;
    let flash = format!("{} removed: it is {}.", group.group_id, format::word(&group.state));
    let d = Detail::group(&ui.handle.view(), &group);
    Ok(render(&d.live(is_admin(role.as_ref()), Some(flash))))
}
