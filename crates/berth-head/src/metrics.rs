//! The head's Prometheus metrics: one [`Registry`] per head (no globals), rendered by
//! `GET /metrics` in the OpenMetrics text format.
//!
//! Families (names as scraped):
//! - `berth_decisions_total{outcome}`: placement decisions by outcome (`placed`, `pending`,
//!   `infeasible`), and `berth_decision_seconds`: how long each took (1 µs to 1 s buckets).
//! - `berth_group_bundles_ranked_total`: bundles of placement groups ranked on the nodes while
//!   planning them, the unit of a group plan's cost (a group too big for what is free is not
//!   planned, so a waiting group adds nothing here until room could exist).
//! - `berth_pending{kind,waiting}`: requests waiting now, by kind (`actor`, `task`,
//!   `placement_group`) and why (`pending`, `infeasible`).
//! - `berth_nodes{state}`: nodes by state (`alive`, `draining`, `suspect`, `dead`).
//! - `berth_node_transitions_total{to}`: nodes that became `suspect` (heartbeats late), `dead`
//!   (for any reason: heartbeats stopped, or removed) or `alive` again after being suspect.
//!   A `suspect` count that grows without `dead` says the head or its machine is overloaded
//!   (or the network slow), not that nodes die.
//! - `berth_jobs_ended_total{state}`: jobs that ended, by how (`finished`: their driver ended
//!   them; `stopped`: a user did; `lost`: their driver stopped renewing its lease). A growing
//!   `lost` count says drivers are killed, or cannot reach the head.
//! - `berth_store_commit_seconds` and `berth_store_ops_total`: group commits and the writes
//!   they carried.
//! - `berth_owner_cycle_seconds` and `berth_owner_commands_total`: the owner task's cycles
//!   (applying a burst of commands, retrying what waits, preparing the writes) and the commands
//!   they applied. Every change goes through this one task: the cycle seconds' rate near 1 means
//!   the head is bound by it.
//! - `berth_http_requests_total{method,route,status}` (status as a class, `2xx`) and
//!   `berth_http_request_seconds{method,route}`: the REST API, by route template.
//! - `berth_connections`: connections served now; `berth_connections_evicted_total`: idle ones
//!   closed to make room at the cap; `berth_connections_refused_total`: new ones closed at
//!   once because every connection had a request in flight (`--max-connections`).
//! - `berth_autoscaler_nodes{state}`: autoscaled nodes now (`launching`, `alive`, `idle`,
//!   `removing`), and `berth_autoscaler_events_total{event}`: `launched`, `registered`,
//!   `failed` (the provider failed), `given_up` (never registered), `removed`.
//! - `berth_node_cpu_used_cores{node}`, `berth_node_cpus{node}`,
//!   `berth_node_memory_used_bytes{node}` and `berth_node_memory_total_bytes{node}`: what each
//!   live node's machine uses, as its agent last measured it (nodes whose agent measures).
//! - `berth_node_gpu_memory_used_bytes{node,gpu}`, `berth_node_gpu_memory_total_bytes{node,gpu}`
//!   and `berth_node_gpu_utilization_percent{node,gpu}`: each GPU of those machines, as NVML
//!   reports it (nodes whose machine has the NVIDIA driver).
//!   One series per node (and GPU), set afresh at each scrape, so a node that goes leaves no series
//!   behind. What each actor or task uses is not here (one series per work item would grow
//!   without bound): it is in the REST API (`GET /api/v1/nodes/{node}`) and the dashboard.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets_range, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

/// The content type of [`Metrics::render`]'s text (prometheus-client writes OpenMetrics).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PendingLabels {
    kind: String,
    waiting: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    node: String,
    gpu: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    // Method and status class are from fixed sets: no allocation per request for them.
    method: &'static str,
    route: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn decision_histogram() -> Histogram {
    // 1 µs .. 1 s, ×√10 per bucket.
    Histogram::new(exponential_buckets_range(1e-6, 1.0, 13))
}

fn commit_histogram() -> Histogram {
    // 100 µs .. 10 s.
    Histogram::new(exponential_buckets_range(1e-4, 10.0, 11))
}

fn http_histogram() -> Histogram {
    // 100 µs .. 1000 s (a placement-group wait may take up to 600 s).
    Histogram::new(exponential_buckets_range(1e-4, 1e3, 15))
}

/// The head's metrics. Cheap to update from any task (atomics and short locks).
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    decisions: Family<OutcomeLabels, Counter>,
    decision_seconds: Histogram,
    bundles_ranked: Counter,
    pending: Family<PendingLabels, Gauge>,
    nodes: Family<StateLabels, Gauge>,
    node_transitions: Family<TransitionLabels, Counter>,
    jobs_ended: Family<JobLabels, Counter>,
    commit_seconds: Histogram,
    store_ops: Counter,
    cycle_seconds: Histogram,
    commands: Counter,
    http_requests: Family<RequestLabels, Counter>,
    http_seconds: HistogramFamily<RouteLabels>,
    autoscaler_nodes: Family<StateLabels, Gauge>,
    autoscaler_events: Family<EventLabels, Counter>,
    connections: Gauge,
    connections_evicted: Counter,
    connections_refused: Counter,
    node_cpu_used: Family<NodeLabels, Gauge<f64, AtomicU64>>,
    node_cpus: Family<NodeLabels, Gauge>,
    node_memory_used: Family<NodeLabels, Gauge>,
    node_memory_total: Family<NodeLabels, Gauge>,
    gpu_memory_used: Family<GpuLabels, Gauge>,
    gpu_memory_total: Family<GpuLabels, Gauge>,
    gpu_utilization: Family<GpuLabels, Gauge>,
    /// Held through a scrape: the per-node families are cleared and set again for each, and
    /// a concurrent scrape must not render them half set.
    scrape: Mutex<()>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    to: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered (and empty).
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::default();
        let decisions = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "berth_decisions",
            "Placement decisions, by outcome (placed, pending, infeasible)",
            decisions.clone(),
        );
        let decision_seconds = decision_histogram();
        registry.register_with_unit(
            "berth_decision",
            "Time to decide one placement",
            Unit::Seconds,
            decision_seconds.clone(),
        );
        let bundles_ranked = Counter::default();
        registry.register(
            "berth_group_bundles_ranked",
            "Bundles of placement groups ranked on the nodes while planning them",
            bundles_ranked.clone(),
        );
        let pending = Family::<PendingLabels, Gauge>::default();
        registry.register(
            "berth_pending",
            "Requests waiting to be placed, by kind and by why (pending, infeasible)",
            pending.clone(),
        );
        let nodes = Family::<StateLabels, Gauge>::default();
        registry.register("berth_nodes", "Nodes, by state", nodes.clone());
        let node_transitions = Family::<TransitionLabels, Counter>::default();
        registry.register(
            "berth_node_transitions",
            "Nodes that became suspect (heartbeats late), dead, or alive again after suspect",
            node_transitions.clone(),
        );
        let jobs_ended = Family::<JobLabels, Counter>::default();
        registry.register(
            "berth_jobs_ended",
            "Jobs that ended: finished by their driver, stopped by a user, or lost (no lease renewal)",
            jobs_ended.clone(),
        );
        let commit_seconds = commit_histogram();
        registry.register_with_unit(
            "berth_store_commit",
            "Time to make one cycle's changes durable",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        let store_ops = Counter::default();
        registry.register("berth_store_ops", "Writes made durable", store_ops.clone());
        let cycle_seconds = decision_histogram();
        registry.register_with_unit(
            "berth_owner_cycle",
            "Time the owner task spent on one cycle of commands",
            Unit::Seconds,
            cycle_seconds.clone(),
        );
        let commands = Counter::default();
        registry.register("berth_owner_commands", "Commands the owner applied", commands.clone());
        let http_requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "berth_http_requests",
            "REST requests, by method, route template and status class",
            http_requests.clone(),
        );
        let http_seconds: HistogramFamily<RouteLabels> =
            Family::new_with_constructor(http_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "berth_http_request",
            "Time to answer a REST request (until the head of the answer)",
            Unit::Seconds,
            http_seconds.clone(),
        );
        let autoscaler_nodes = Family::<StateLabels, Gauge>::default();
        registry.register(
            "berth_autoscaler_nodes",
            "Autoscaled nodes, by state (launching, alive, idle, removing)",
            autoscaler_nodes.clone(),
        );
        let autoscaler_events = Family::<EventLabels, Counter>::default();
        registry.register(
            "berth_autoscaler_events",
            "Autoscaler events (launched, registered, failed, given_up, removed)",
            autoscaler_events.clone(),
        );
        let connections = Gauge::default();
        registry.register("berth_connections", "Connections served now", connections.clone());
        let connections_evicted = Counter::default();
        registry.register(
            "berth_connections_evicted",
            "Idle connections closed to make room for new ones at --max-connections",
            connections_evicted.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "berth_connections_refused",
            "New connections closed at once: every one served had a request in flight",
            connections_refused.clone(),
        );
        let node_cpu_used = Family::<NodeLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "berth_node_cpu_used_cores",
            "CPU a node's machine uses, in cores, as its agent last measured it",
            node_cpu_used.clone(),
        );
        let node_cpus = Family::<NodeLabels, Gauge>::default();
        registry.register("berth_node_cpus", "A node's machine's logical CPUs", node_cpus.clone());
        let node_memory_used = Family::<NodeLabels, Gauge>::default();
        registry.register_with_unit(
            "berth_node_memory_used",
            "Memory a node's machine uses, as its agent last measured it",
            Unit::Bytes,
            node_memory_used.clone(),
        );
        let node_memory_total = Family::<NodeLabels, Gauge>::default();
        registry.register_with_unit(
            "berth_node_memory_total",
            "A node's machine's memory",
            Unit::Bytes,
            node_memory_total.clone(),
        );
        let gpu_memory_used = Family::<GpuLabels, Gauge>::default();
        registry.register_with_unit(
            "berth_node_gpu_memory_used",
            "Memory a GPU of a node's machine uses, as NVML reports it",
            Unit::Bytes,
            gpu_memory_used.clone(),
        );
        let gpu_memory_total = Family::<GpuLabels, Gauge>::default();
        registry.register_with_unit(
            "berth_node_gpu_memory_total",
            "A GPU's memory, as NVML reports it",
            Unit::Bytes,
            gpu_memory_total.clone(),
        );
        let gpu_utilization = Family::<GpuLabels, Gauge>::default();
        registry.register(
            "berth_node_gpu_utilization_percent",
            "The share of the driver's last sample period in which a kernel ran on a GPU",
            gpu_utilization.clone(),
        );
        Metrics {
            gpu_memory_used,
            gpu_memory_total,
            gpu_utilization,
            node_transitions,
            jobs_ended,
            node_cpu_used,
            node_cpus,
            node_memory_used,
            node_memory_total,
            scrape: Mutex::new(()),
            connections,
            connections_evicted,
            connections_refused,
            registry,
            decisions,
            decision_seconds,
            bundles_ranked,
            pending,
            nodes,
            commit_seconds,
            store_ops,
            cycle_seconds,
            commands,
            http_requests,
            http_seconds,
            autoscaler_nodes,
            autoscaler_events,
        }
    }

    /// One placement decision: `outcome` is `placed`, `pending` or `infeasible`.
    pub(crate) fn decision(&self, outcome: &str, seconds: f64) {
        self.decisions.get_or_create(&OutcomeLabels { outcome: outcome.to_string() }).inc();
        self.decision_seconds.observe(seconds);
    }

    /// A connection is served.
    pub(crate) fn connection_opened(&self) {
        self.connections.inc();
    }

    /// A served connection ended.
    pub(crate) fn connection_closed(&self) {
        self.connections.dec();
    }

    /// An idle connection was closed to make room.
    pub(crate) fn connection_evicted(&self) {
        self.connections_evicted.inc();
    }

    /// A new connection was closed at once.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Bundles ranked by group plans since the last call.
    pub(crate) fn bundles_ranked(&self, bundles: u64) {
        self.bundles_ranked.inc_by(bundles);
    }

    /// Sets the gauges that count what `view` holds (nodes by state, what waits), at a scrape:
    /// counting them at every cycle instead walked every node a thousand times a second under
    /// load, for a figure read every few seconds.
    pub(crate) fn count(&self, view: &crate::view::View) {
        let counts = view.status_counts();
        self.set_nodes("alive", counts.alive as i64);
        self.set_nodes("draining", counts.draining as i64);
        self.set_nodes("suspect", counts.suspect as i64);
        self.set_nodes("dead", counts.dead as i64);
        let mut pending = [[0i64; 2]; 3];
        for w in view.waiting.values() {
            let kind = match w.item.kind.as_str() {
                "actor" => 0,
                "task" => 1,
                _ => 2,
            };
            pending[kind][usize::from(w.item.diagnosis.infeasible)] += 1;
        }
        for (kind, counts) in ["actor", "task", "placement_group"].into_iter().zip(pending) {
            self.set_pending(kind, "pending", counts[0]);
            self.set_pending(kind, "infeasible", counts[1]);
        }
    }

    /// How many requests of `kind` (`actor`, `task`, `placement_group`) wait now, `waiting`
    /// being `pending` or `infeasible`.
    pub(crate) fn set_pending(&self, kind: &str, waiting: &str, n: i64) {
        let labels = PendingLabels { kind: kind.to_string(), waiting: waiting.to_string() };
        self.pending.get_or_create(&labels).set(n);
    }

    /// How many nodes are in `state` (`alive`, `draining`, `dead`).
    pub(crate) fn set_autoscaler_nodes(&self, state: &str, n: i64) {
        self.autoscaler_nodes.get_or_create(&StateLabels { state: state.to_string() }).set(n);
    }

    /// A node became `to`: `suspect`, `dead` or `alive` (again, after suspect).
    pub(crate) fn node_transition(&self, to: &'static str) {
        self.node_transitions.get_or_create(&TransitionLabels { to }).inc();
    }

    pub(crate) fn job_ended(&self, state: berth_api::rest::JobState) {
        let state = match state {
            berth_api::rest::JobState::Running => return,
            berth_api::rest::JobState::Finished => "finished",
            berth_api::rest::JobState::Stopped => "stopped",
            berth_api::rest::JobState::Lost => "lost",
        };
        self.jobs_ended.get_or_create(&JobLabels { state }).inc();
    }

    pub(crate) fn autoscaler_event(&self, event: &str) {
        self.autoscaler_events.get_or_create(&EventLabels { event: event.to_string() }).inc();
    }

    pub(crate) fn set_nodes(&self, state: &str, n: i64) {
        self.nodes.get_or_create(&StateLabels { state: state.to_string() }).set(n);
    }

    /// One group commit of `ops` writes that took `seconds`.
    pub(crate) fn commit(&self, seconds: f64, ops: u64) {
        self.commit_seconds.observe(seconds);
        self.store_ops.inc_by(ops);
    }

    /// One owner cycle of `commands` that took `seconds`.
    pub(crate) fn cycle(&self, seconds: f64, commands: u64) {
        self.cycle_seconds.observe(seconds);
        self.commands.inc_by(commands);
    }

    /// One REST request: `route` is the matched template (`/api/v1/actors/{id}`), never the
    /// raw path, so the label set stays small.
    pub(crate) fn http(&self, method: &'static str, route: &str, status: u16, seconds: f64) {
        let class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let labels = RequestLabels { method, route: route.to_string(), status: class };
        self.http_requests.get_or_create(&labels).inc();
        let labels = RouteLabels { method: labels.method, route: labels.route };
        self.http_seconds.get_or_create(&labels).observe(seconds);
    }

    /// A scrape: the counts of `view` ([`Metrics::count`]), each live node's `measured`
    /// machine, then every family rendered.
    pub(crate) fn scrape(
        &self,
        view: &crate::view::View,
        measured: &[(String, berth_api::rest::NodeMeasured)],
    ) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(|p| p.into_inner());
        self.count(view);
        self.node_cpu_used.clear();
        self.node_cpus.clear();
        self.node_memory_used.clear();
        self.node_memory_total.clear();
        self.gpu_memory_used.clear();
        self.gpu_memory_total.clear();
        self.gpu_utilization.clear();
        for (node_id, m) in measured {
            let live = view
                .nodes
                .get(node_id.as_str())
                .is_some_and(|n| n.state != berth_api::rest::NodeState::Dead);
            if !live {
                continue;
            }
            let labels = NodeLabels { node: node_id.clone() };
            if let Some(millicores) = m.cpu_millicores {
                self.node_cpu_used.get_or_create(&labels).set(millicores as f64 / 1000.0);
            }
            let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.node_cpus.get_or_create(&labels).set(i64::from(m.cpus));
            self.node_memory_used.get_or_create(&labels).set(clamp(m.memory_used_bytes));
            self.node_memory_total.get_or_create(&labels).set(clamp(m.memory_total_bytes));
            for g in &m.gpus {
                let labels = GpuLabels { node: node_id.clone(), gpu: g.index };
                self.gpu_memory_used.get_or_create(&labels).set(clamp(g.memory_used_bytes));
                self.gpu_memory_total.get_or_create(&labels).set(clamp(g.memory_total_bytes));
                if let Some(percent) = g.utilization_percent {
                    self.gpu_utilization.get_or_create(&labels).set(i64::from(percent));
                }
            }
        }
        self.render()
    }

    /// Every family in the OpenMetrics text format (ends with `# EOF`).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; a label encoding error would leave a partial
        // text, which is still better than no answer.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::warn!("encoding the metrics failed; the answer is partial");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_every_family_after_observations() {
        let m = Metrics::new();
        m.decision("placed", 0.000_05);
        m.decision("infeasible", 0.002);
        m.set_pending("actor", "pending", 3);
        m.set_pending("placement_group", "infeasible", 1);
        m.set_nodes("alive", 5);
        m.set_nodes("dead", 1);
        m.commit(0.004, 17);
        m.cycle(0.000_3, 64);
        m.cycle(0.000_1, 2);
        m.http("GET", "/api/v1/actors/{id}", 404, 0.0002);
        m.http("POST", "/api/v1/actors", 201, 0.01);
        let text = m.render();
        for needle in [
            "berth_decisions_total{outcome=\"placed\"} 1",
            "berth_decisions_total{outcome=\"infeasible\"} 1",
            "berth_decision_seconds_count 2",
            "berth_decision_seconds_bucket{le=\"0.000001\"}",
            "berth_pending{kind=\"actor\",waiting=\"pending\"} 3",
            "berth_pending{kind=\"placement_group\",waiting=\"infeasible\"} 1",
            "berth_nodes{state=\"alive\"} 5",
            "berth_nodes{state=\"dead\"} 1",
            "berth_store_commit_seconds_count 1",
            "berth_store_ops_total 17",
            "berth_owner_cycle_seconds_count 2",
            "berth_owner_commands_total 66",
            "berth_http_requests_total{method=\"GET\",route=\"/api/v1/actors/{id}\",status=\"4xx\"} 1",
            "berth_http_requests_total{method=\"POST\",route=\"/api/v1/actors\",status=\"2xx\"} 1",
            "berth_http_request_seconds_count{method=\"GET\",route=\"/api/v1/actors/{id}\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn metrics_autoscaler_families_count_events_and_set_node_states() {
        let m = Metrics::new();
        m.autoscaler_event("launched");
        m.autoscaler_event("launched");
        m.set_autoscaler_nodes("idle", 3);
        m.set_autoscaler_nodes("idle", 1);
        let text = m.render();
        assert!(text.contains(r#"berth_autoscaler_events_total{event="launched"} 2"#), "{text}");
        assert!(text.contains(r#"berth_autoscaler_nodes{state="idle"} 1"#), "{text}");
    }

    #[test]
    fn metrics_gauges_are_set_not_added_and_registries_are_separate() {
        let a = Metrics::new();
        let b = Metrics::new();
        a.set_nodes("alive", 5);
        a.set_nodes("alive", 2);
        assert!(a.render().contains("berth_nodes{state=\"alive\"} 2"));
        assert!(!b.render().contains("berth_nodes{state=\"alive\"}"));
    }

    #[test]
    fn metrics_label_values_are_escaped() {
        let m = Metrics::new();
        m.http("GET", "/odd\"route\n", 200, 0.0);
        let text = m.render();
        assert!(text.contains(r#"route="/odd\"route\n""#), "{text}");
    }
}
