//! The overview: nodes by state, resources used over total, counts by state, what waits and
//! why, and the demand by shape (what an autoscaler would add). All from `View::status()`.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use berth_api::rest::{ClusterStatus, StringCounts};

use super::format::{self, Bar};
use super::samples::Sample;
use super::svg::{self, Point};
use super::{render, Ui};
use crate::view::View;

/// `GET /ui/overview`: the whole page, which polls itself.
pub(crate) async fn overview(State(ui): State<Ui>) -> Response {
    let view = ui.handle.view();
    let mut page = Overview::new(&view);
    // The samples, and the cluster as it is now as the last point: the charts end at the
    // moment the page shows, not at the last sample up to 10 s before.
    let now = crate::clock::now_ms();
    let mut samples = ui.samples.all();
    samples.push(Sample::of(&view, now));
    page.charts = charts(&samples, now);
    render(&page)
}

/// The most resources charted (the first by name; the table shows every one).
const MOST_CHARTS: usize = 8;

/// A chart per resource (reserved and total) and one of the waiting requests, over the
/// samples of the last hour.
fn charts(samples: &[Sample], now_ms: u64) -> Vec<(String, String)> {
    let mut names: Vec<&String> = Vec::new();
    for sample in samples {
        for name in sample.resources.keys() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.sort();
    names.truncate(MOST_CHARTS);
    let mut out: Vec<(String, String)> = names
        .into_iter()
        .map(|name| {
            let points: Vec<Point> = samples
                .iter()
                .map(|s| {
                    let (used, total) = s.resources.get(name).copied().unwrap_or_default();
                    Point { at_ms: s.at_ms, value: used, total: Some(total) }
                })
                .collect();
            let label = format!("{name} reserved");
            let picture = svg::chart(&label, name, &points, now_ms);
            (label, picture)
        })
        .collect();
    let waiting: Vec<Point> = samples
        .iter()
        .map(|s| Point { at_ms: s.at_ms, value: s.waiting as f64, total: None })
        .collect();
    out.push(("Waiting requests".into(), svg::chart("Waiting requests", "", &waiting, now_ms)));
    out
}

/// The overview page.
#[derive(Template)]
#[template(path = "dashboard/overview.html")]
pub(crate) struct Overview {
    alive: u64,
    draining: u64,
    dead: u64,
    bars: Vec<Bar>,
    /// Actors, tasks, placement groups: their counts by state.
    kinds: Vec<KindCounts>,
    pending_total: u64,
    infeasible_total: u64,
    /// Pending rows shown (the status lists the oldest 100).
    shown: u64,
    pending: Vec<PendingRow>,
    demand: Vec<DemandRow>,
    /// The autoscaler, when the head runs one.
    autoscaler: Option<AutoscalerCard>,
    /// The last hour: label and SVG chart.
    charts: Vec<(String, String)>,
}

/// The autoscaler at a glance: nodes per type and the latest decisions.
struct AutoscalerCard {
    provider: String,
    nodes: usize,
    launching: u32,
    idle: u32,
    types: Vec<berth_api::rest::NodeTypeStatus>,
    /// The latest decisions, newest first: time, action, node, why.
    decisions: Vec<(String, String, String, String)>,
}

/// One kind of work and its counts by state.
struct KindCounts {
    title: &'static str,
    href: &'static str,
    total: u64,
    states: Vec<(String, u64, &'static str)>,
}

/// A waiting request.
struct PendingRow {
    kind: String,
    id: String,
    href: String,
    infeasible: bool,
    summary: String,
}

/// Demand of one shape.
struct DemandRow {
    count: u64,
    infeasible: u64,
    shape: String,
    selector: String,
    tolerations: String,
}

impl Overview {
    pub(crate) fn new(view: &View) -> Overview {
        let status: ClusterStatus = view.status();
        let kinds = vec![
            KindCounts::new("Actors", "#actors", &status.actors),
            KindCounts::new("Tasks", "#tasks", &status.tasks),
            KindCounts::new("Placement groups", "#groups", &status.placement_groups),
        ];
        let pending: Vec<PendingRow> = status
            .pending
            .iter()
            .map(|p| PendingRow {
                kind: p.kind.replace('_', " "),
                id: p.id.clone(),
                href: format::link(&p.kind, &p.id),
                infeasible: p.diagnosis.infeasible,
                summary: p.diagnosis.summary.clone(),
            })
            .collect();
        let demand = status
            .demand
            .iter()
            .map(|d| DemandRow {
                count: d.count,
                infeasible: d.infeasible,
                shape: format::shape(&d.shape),
                selector: format::pairs(&d.label_selector),
                tolerations: format::pairs(&d.tolerations),
            })
            .collect();
        Overview {
            alive: status.nodes.alive,
            draining: status.nodes.draining,
            dead: status.nodes.dead,
            bars: Bar::all(status.resources.iter().map(|(name, use_)| (name.as_str(), use_))),
            kinds,
            pending_total: status.pending_total,
            infeasible_total: view.waiting.values().filter(|w| w.item.diagnosis.infeasible).count()
                as u64,
            shown: pending.len() as u64,
            pending,
            demand,
            autoscaler: view.autoscaler.as_deref().map(AutoscalerCard::new),
            charts: Vec::new(),
        }
    }
}

impl AutoscalerCard {
    fn new(status: &berth_api::rest::AutoscalerStatus) -> AutoscalerCard {
        AutoscalerCard {
            provider: status.provider.clone(),
            nodes: status.nodes.len(),
            launching: status.node_types.iter().map(|t| t.launching).sum(),
            idle: status.node_types.iter().map(|t| t.idle).sum(),
            types: status.node_types.clone(),
            decisions: status
                .decisions
                .iter()
                .rev()
                .take(8)
                .map(|d| {
                    let time = format::time(d.at_ms);
                    (time, d.action.replace('_', " "), d.node_id.clone(), d.reason.clone())
                })
                .collect(),
        }
    }
}

impl KindCounts {
    fn new(title: &'static str, href: &'static str, counts: &StringCounts) -> KindCounts {
        KindCounts {
            title,
            href,
            total: counts.values().sum(),
            states: counts
                .iter()
                .map(|(state, n)| (state.clone(), *n, format::state_class(state)))
                .collect(),
        }
    }
}
