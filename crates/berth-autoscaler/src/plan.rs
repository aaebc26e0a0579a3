//! Scale-up: which nodes to launch so that what waits can run.
//!
//! The plan is made on a copy of the cluster (the simulation) holding the live nodes, the
//! nodes being launched and the nodes planned so far. Each waiting item, oldest first, is
//! placed there by the scheduler. If it does not fit, each node type is tried: new nodes of
//! the type are added to the simulation (one for a request; for a group, one at a time up to
//! its number of bundles, which is what STRICT_SPREAD needs) and the item is placed again. The
//! type that takes it with the fewest new nodes, then the fullest, is planned; later items see
//! those planned nodes and fill them before another is added. A type that cannot take the
//! item says why in the words `berth explain` uses for one of its nodes.

use std::collections::BTreeMap;

use berth_api::rest::{AutoscalerPlan, PlanItem};
use berth_api::spec::node_types::{AutoscalerSettings, NodeType};
use berth_core::cluster::NodeSpec;
use berth_core::pipeline::group::GroupDecision;
use berth_core::placement_group::GroupSpec;
use berth_core::{
    Cluster, Decision, NodeId, NodeIndex, Request, ResourceSet, Scheduler, SchedulerConfig,
    Strategy,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Something waiting to be placed, with the key it is reported under.
#[derive(Clone, Copy, Debug)]
pub enum Want<'a> {
    /// An actor or a task.
    Request {
        /// Its ID.
        key: &'a str,
        /// What it asks for.
        request: &'a Request,
    },
    /// A placement group (new, or with bundles lost with their nodes).
    Group {
        /// Its ID.
        key: &'a str,
        /// What it asks for.
        spec: &'a GroupSpec,
    },
}

impl Want<'_> {
    /// The key it is reported under.
    pub fn key(&self) -> &str {
        match self {
            Want::Request { key, .. } | Want::Group { key, .. } => key,
        }
    }
}

/// The autoscaled nodes the cluster has or will have.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    /// Autoscaled nodes registered and not dead, by type.
    pub alive: BTreeMap<String, u32>,
    /// Nodes launched that have not registered yet: (node ID, type).
    pub launching: Vec<(String, String)>,
}

/// A node to launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Its type.
    pub node_type: String,
    /// Why: `min_nodes`, or the first item it was planned for.
    pub reason: String,
}

/// What the plan says about one waiting item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It fits on a node the cluster has or is launching (now, or the simulation placed it
    /// there ahead of the queue).
    Fits {
        /// The node.
        node: String,
        /// True when that node is still being launched.
        launching: bool,
    },
    /// New nodes of this type are planned for it (shared with the items after it).
    Launch {
        /// The type.
        node_type: String,
        /// How many new nodes it needed.
        nodes: u32,
    },
    /// A type would take it, but a limit stops launching one.
    Limited {
        /// The best type that would.
        node_type: String,
        /// The limit, as a sentence.
        limit: String,
    },
    /// No node type could ever take it: why, per type.
    Unservable {
        /// (type, why) in type order.
        reasons: Vec<(String, String)>,
    },
    /// New nodes cannot help (it waits for its placement group's bundles).
    NotNodes {
        /// Why.
        reason: String,
    },
}

/// The plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Nodes to launch now.
    pub launch: Vec<Launch>,
    /// Nodes planned beyond what `upscaling_speed` lets launch at once: launched in a later
    /// round, if still needed.
    pub deferred: Vec<Launch>,
    /// Per waiting item, in the order given.
    pub verdicts: Vec<(String, Verdict)>,
    /// Nodes of the cluster (alive or launching) the plan put waiting work on: not idle in
    /// intent, whatever they hold now (a group's first node waits for the others to join).
    pub used: std::collections::BTreeSet<String>,
}

impl Plan {
    /// Planned nodes per type (launched now and deferred).
    pub fn by_type(&self) -> BTreeMap<&str, u32> {
        let mut out = BTreeMap::new();
        for launch in self.launch.iter().chain(&self.deferred) {
            *out.entry(launch.node_type.as_str()).or_insert(0) += 1;
        }
        out
    }
}

/// Plans the nodes to launch for `wants` on `cluster` (as the head holds it), deciding as a
/// scheduler with `config` would. Deterministic: the same inputs give the same plan.
pub fn plan(
    cluster: &Cluster,
    config: &SchedulerConfig,
    settings: &AutoscalerSettings,
    fleet: &Fleet,
    wants: &[Want<'_>],
) -> Plan {
    let mut planner = Planner {
        used: Default::default(),
        refused: std::collections::HashMap::new(),
        sim: cluster.clone(),
        scheduler: Scheduler::new(config.clone()),
        rng: ChaCha8Rng::seed_from_u64(0),
        settings,
        counts: BTreeMap::new(),
        total: 0,
        planned: Vec::new(),
        launching: fleet.launching.iter().map(|(id, _)| id.clone()).collect(),
        next: 0,
    };
    for (node_type, n) in &fleet.alive {
        *planner.counts.entry(node_type.clone()).or_insert(0) += n;
        planner.total += n;
    }
    for (id, node_type) in &fleet.launching {
        *planner.counts.entry(node_type.clone()).or_insert(0) += 1;
        planner.total += 1;
        // A launching node the cluster does not know yet is simulated as it will register.
        if cluster.index_of(id).is_none() {
            if let Some(t) = settings.node_types.iter().find(|t| &t.name == node_type) {
                let _ = add_node(&mut planner.sim, t, id);
            }
        }
    }
    for t in &settings.node_types {
        while planner.count(&t.name) < t.min_nodes && planner.total < settings.max_nodes {
            planner.add_planned(t, format!("min_nodes: {}", t.min_nodes));
        }
    }
    let verdicts = wants
        .iter()
        .enumerate()
        .map(|(i, want)| {
            let verdict = if i < MAX_PLANNED {
                planner.decide(want)
            } else {
                Verdict::NotNodes {
                    reason: format!(
                        "only the oldest {MAX_PLANNED} waiting items are planned per round"
                    ),
                }
            };
            (want.key().to_string(), verdict)
        })
        .collect();
    let alive: u32 = fleet.alive.values().sum();
    let speed_cap = (settings.upscaling_speed * f64::from(alive)).ceil() as usize;
    let room = speed_cap.max(5).saturating_sub(fleet.launching.len());
    let mut launch = planner.planned;
    let deferred = launch.split_off(room.min(launch.len()));
    Plan { launch, deferred, verdicts, used: planner.used }
}

/// Waiting items planned per round at most (the rest in later rounds, as these are placed).
pub const MAX_PLANNED: usize = 2000;

struct Planner<'s> {
    used: std::collections::BTreeSet<String>,
    /// Verdicts that no node can change within a round (no type takes it), by request shape:
    /// a thousand identical infeasible tasks are tried on the types once.
    refused: std::collections::HashMap<String, Verdict>,
    sim: Cluster,
    scheduler: Scheduler,
    rng: ChaCha8Rng,
    settings: &'s AutoscalerSettings,
    /// Autoscaled nodes per type: alive, launching and planned.
    counts: BTreeMap<String, u32>,
    total: u32,
    planned: Vec<Launch>,
    launching: Vec<String>,
    next: u32,
}

/// A placement made in the simulation, to keep or to undo.
enum Placed {
    Request(berth_core::Allocation),
    Group(String),
}

/// How a type did in a trial.
enum Trial {
    Took { nodes: u32, fullness: f64 },
    Refused(String),
}

impl Planner<'_> {
    fn count(&self, name: &str) -> u32 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// Room for `n` more nodes of `t`, or the limit that forbids them.
    fn room(&self, t: &NodeType, n: u32) -> Result<(), String> {
        if self.total + n > self.settings.max_nodes {
            return Err(format!(
                "the cluster is at max_nodes ({}; {} autoscaled nodes alive, launching or planned)",
                self.settings.max_nodes, self.total
            ));
        }
        if self.count(&t.name) + n > t.max_nodes {
            return Err(format!(
                "node type {} is at its max_nodes ({}; {} alive, launching or planned)",
                t.name,
                t.max_nodes,
                self.count(&t.name)
            ));
        }
        Ok(())
    }

    fn add_planned(&mut self, t: &NodeType, reason: String) -> Option<NodeIndex> {
        self.next += 1;
        let id = format!("{}-planned-{}", t.name, self.next);
        let index = add_node(&mut self.sim, t, &id).ok()?;
        *self.counts.entry(t.name.clone()).or_insert(0) += 1;
        self.total += 1;
        self.planned.push(Launch { node_type: t.name.clone(), reason });
        Some(index)
    }

    fn decide(&mut self, want: &Want<'_>) -> Verdict {
        if let Want::Request { request, .. } = want {
            if let Strategy::PlacementGroup(target) = request.strategy() {
                return Verdict::NotNodes {
                    reason: format!("it waits for placement group {}", target.group),
                };
            }
        }
        if let Ok(placed) = self.place(want) {
            return self.fits(placed);
        }
        let shape = shape(want);
        if let Some(verdict) = shape.as_ref().and_then(|s| self.refused.get(s)) {
            return verdict.clone();
        }
        let verdict = self.try_types(want);
        if let (Some(shape), Verdict::Unservable { .. } | Verdict::Limited { .. }) =
            (shape, &verdict)
        {
            self.refused.insert(shape, verdict.clone());
        }
        verdict
    }

    /// New nodes of each type for `want`, which fits nowhere yet: plans the best type's.
    fn try_types(&mut self, want: &Want<'_>) -> Verdict {
        let mut best: Option<(&NodeType, u32, f64)> = None;
        let mut limited: Option<(&NodeType, String)> = None;
        let mut reasons = Vec::new();
        let settings = self.settings;
        let types = settings.node_types.as_slice();
        for t in types {
            match self.trial(want, t) {
                Trial::Took { nodes, fullness } => match self.room(t, nodes) {
                    Ok(()) => {
                        let better = best.is_none_or(|(_, n, f)| {
                            nodes < n || (nodes == n && fullness > f + 1e-9)
                        });
                        if better {
                            best = Some((t, nodes, fullness));
                        }
                    }
                    Err(limit) => {
                        if limited.is_none() {
                            limited = Some((t, limit));
                        }
                    }
                },
                Trial::Refused(reason) => reasons.push((t.name.clone(), reason)),
            }
        }
        if let Some((t, nodes, _)) = best {
            let reason = format!("for {}", want.key());
            for _ in 0..nodes {
                self.add_planned(t, reason.clone());
            }
            return match self.place(want) {
                Ok(_) => Verdict::Launch { node_type: t.name.clone(), nodes },
                // The trial took it on the same nodes; kept planned, but said.
                Err(reason) => Verdict::Limited {
                    node_type: t.name.clone(),
                    limit: format!("placing again on the planned nodes failed: {reason}"),
                },
            };
        }
        if let Some((t, limit)) = limited {
            return Verdict::Limited { node_type: t.name.clone(), limit };
        }
        Verdict::Unservable { reasons }
    }

    fn fits(&mut self, placed: Placed) -> Verdict {
        let nodes: Vec<NodeIndex> = match &placed {
            Placed::Request(allocation) => vec![allocation.node()],
            Placed::Group(id) => self
                .sim
                .group(id)
                .map(|g| (0..g.bundles.len()).filter_map(|i| g.bundle(i)).map(|l| l.node).collect())
                .unwrap_or_default(),
        };
        let ids: Vec<String> = nodes
            .iter()
            .filter_map(|&i| self.sim.node(i))
            .map(|n| n.id().as_str().to_string())
            .collect();
        self.used.extend(ids.iter().filter(|id| !id.contains("-planned-")).cloned());
        let node = ids.into_iter().next().unwrap_or_default();
        let launching = self.launching.contains(&node) || node.contains("-planned-");
        Verdict::Fits { node, launching }
    }

    /// Places `want` in the simulation, keeping the placement; `Err` says why not (the
    /// scheduler's summary).
    fn place(&mut self, want: &Want<'_>) -> Result<Placed, String> {
        match want {
            Want::Request { request, .. } => {
                let request = resolved(request, &self.sim);
                match self.scheduler.place(&mut self.sim, &request, &mut self.rng) {
                    Decision::Placed(allocation) => Ok(Placed::Request(allocation)),
                    Decision::Pending(d) | Decision::Infeasible(d) => Err(d.describe(&self.sim)),
                }
            }
            Want::Group { spec, .. } => {
                let spec = resolved_group(spec, &self.sim);
                let id = spec.id.as_str().to_string();
                let decision = if self.sim.group(&id).is_some() {
                    self.scheduler.replan_group(&mut self.sim, &id)
                } else {
                    self.scheduler.place_group(&mut self.sim, &spec)
                };
                match decision {
                    GroupDecision::Created { .. } => Ok(Placed::Group(id)),
                    GroupDecision::Pending(d) | GroupDecision::Infeasible(d) => {
                        Err(d.describe(&self.sim))
                    }
                }
            }
        }
    }

    /// Whether new nodes of `t` would take `want`, tried on a copy of the simulation for a
    /// group and on the simulation itself (undone after) for a request.
    fn trial(&mut self, want: &Want<'_>, t: &NodeType) -> Trial {
        match want {
            Want::Request { request, .. } => {
                let id = format!("{}-trial", t.name);
                let index = match add_node(&mut self.sim, t, &id) {
                    Ok(index) => index,
                    Err(reason) => return Trial::Refused(reason),
                };
                let request = resolved(request, &self.sim);
                let decision = self.scheduler.place(&mut self.sim, &request, &mut self.rng);
                let trial = match decision {
                    Decision::Placed(allocation) => {
                        let fullness = fullness(&self.sim, &[index]);
                        self.sim.release(&allocation);
                        if let Some(actor) = request.actor() {
                            self.sim.remove_actor(actor.id.as_str());
                        }
                        Trial::Took { nodes: 1, fullness }
                    }
                    Decision::Pending(d) | Decision::Infeasible(d) => {
                        // Placing reserved nothing; explaining again records why, per node.
                        let (_, explanation) =
                            self.scheduler.place_explained(&mut self.sim, &request, &mut self.rng);
                        let mut reasons: Vec<String> = Vec::new();
                        for attempt in &explanation.attempts {
                            // The first reason only: filters run static before dynamic, so
                            // a fresh node's first failure is why it can never take it.
                            let line = attempt.nodes.iter().find(|n| n.node == index);
                            if let Some(reason) = line.and_then(|n| n.reasons().next()) {
                                let text = reason.describe(&self.sim);
                                if !reasons.contains(&text) {
                                    reasons.push(text);
                                }
                            }
                        }
                        if reasons.is_empty() {
                            reasons.push(d.describe(&self.sim));
                        }
                        Trial::Refused(reasons.join("; "))
                    }
                };
                let _ = self.sim.remove_node(index);
                trial
            }
            Want::Group { spec, .. } => {
                let most = spec.alternatives.iter().map(|a| a.bundles.len()).max().unwrap_or(1);
                let mut sim = self.sim.clone();
                let mut added = Vec::new();
                for n in 1..=most.max(1) {
                    let id = format!("{}-trial-{n}", t.name);
                    match add_node(&mut sim, t, &id) {
                        Ok(index) => added.push(index),
                        Err(reason) => return Trial::Refused(reason),
                    }
                    let spec = resolved_group(spec, &sim);
                    let id = spec.id.as_str();
                    let decision = if sim.group(id).is_some() {
                        self.scheduler.replan_group(&mut sim, id)
                    } else {
                        self.scheduler.place_group(&mut sim, &spec)
                    };
                    if let GroupDecision::Created { .. } = decision {
                        let fullness = fullness(&sim, &added);
                        return Trial::Took { nodes: n as u32, fullness };
                    }
                }
                Trial::Refused(self.group_reasons(spec, t, most))
            }
        }
    }

    /// Why `most` new nodes of `t` alone cannot take group `spec`, from the scheduler's
    /// diagnosis on a cluster of just those nodes.
    fn group_reasons(&mut self, spec: &GroupSpec, t: &NodeType, most: usize) -> String {
        let mut alone = Cluster::new(self.sim.registry().clone());
        alone.set_rare_resources(self.sim.rare_resources());
        for n in 1..=most.max(1) {
            if let Err(reason) = add_node(&mut alone, t, &format!("{}-{n}", t.name)) {
                return reason;
            }
        }
        let spec = resolved_group(spec, &alone);
        match self.scheduler.place_group(&mut alone, &spec) {
            GroupDecision::Pending(d) | GroupDecision::Infeasible(d) => d.describe(&alone),
            // Alone it fits: what refuses it is the rest of the cluster (actors' anti-affinity).
            GroupDecision::Created { .. } => {
                "the nodes would take it alone, but not beside the cluster's work".to_string()
            }
        }
    }
}

/// What decides where a request can go, without its identity: requests with the same shape
/// get the same verdict from the same cluster. `None` for groups (rare, and each unique).
fn shape(want: &Want<'_>) -> Option<String> {
    let Want::Request { request, .. } = want else { return None };
    let actor = request.actor().map(|a| (&a.namespace, &a.labels));
    Some(format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        request.resources(),
        request.preferred_node(),
        request.unknown_resources(),
        request.strategy(),
        request.label_selector(),
        request.fallback(),
        request.tolerations(),
        actor
    ))
}

/// Adds a node of type `t` named `id` to `cluster`, as it will register.
fn add_node(cluster: &mut Cluster, t: &NodeType, id: &str) -> Result<NodeIndex, String> {
    let mut total = ResourceSet::new();
    for (name, amount) in &t.resources {
        let resource = cluster.registry_mut().intern(name).map_err(|e| e.to_string())?;
        total.set(resource, *amount);
    }
    let spec = NodeSpec {
        id: NodeId::new(id).map_err(|e| e.to_string())?,
        total,
        labels: t.labels.clone(),
        facts: t.facts.clone(),
        taints: t.taints.clone(),
    };
    cluster.add_node_with(spec).map_err(|e| e.to_string())
}

/// `request` with the resources nodes have brought since (a planned node may be the first
/// with a custom resource).
fn resolved(request: &Request, cluster: &Cluster) -> Request {
    let mut request = request.clone();
    request.resolve_unknown(cluster.registry());
    request
}

fn resolved_group(spec: &GroupSpec, cluster: &Cluster) -> GroupSpec {
    let mut spec = spec.clone();
    spec.resolve_unknown(cluster.registry());
    spec
}

/// How full `nodes` are, 0 to 1: the mean over their resources of the share in use.
fn fullness(cluster: &Cluster, nodes: &[NodeIndex]) -> f64 {
    let mut sum = 0.0;
    let mut n = 0u32;
    for node in nodes.iter().filter_map(|&i| cluster.node(i)) {
        for (resource, total) in node.total().iter() {
            if total.is_zero() {
                continue;
            }
            let free = node.available().get(resource);
            sum += 1.0 - free.to_f64() / total.to_f64();
            n += 1;
        }
    }
    if n == 0 {
        0.0
    } else {
        sum / f64::from(n)
    }
}

/// Items a plan answer lists at most.
pub const MAX_ITEMS: usize = 200;

/// The plan as the REST API shows it (at most [`MAX_ITEMS`] items), made at `at_ms`.
pub fn answer(plan: &Plan, at_ms: u64) -> AutoscalerPlan {
    let count = |launches: &[Launch]| {
        let mut out = BTreeMap::new();
        for l in launches {
            *out.entry(l.node_type.clone()).or_insert(0) += 1;
        }
        out
    };
    let items = plan
        .verdicts
        .iter()
        .take(MAX_ITEMS)
        .map(|(id, verdict)| {
            let (word, target, nodes, detail) = match verdict {
                Verdict::Fits { node, launching } => (
                    "fits",
                    Some(node.clone()),
                    None,
                    vec![if *launching {
                        "on a node being launched or planned".to_string()
                    } else {
                        "on a node the cluster has, now or once work there ends".to_string()
                    }],
                ),
                Verdict::Launch { node_type, nodes } => {
                    ("launch", Some(node_type.clone()), Some(*nodes), Vec::new())
                }
                Verdict::Limited { node_type, limit } => {
                    ("limited", Some(node_type.clone()), None, vec![limit.clone()])
                }
                Verdict::Unservable { reasons } => (
                    "unservable",
                    None,
                    None,
                    reasons.iter().map(|(t, r)| format!("{t}: {r}")).collect(),
                ),
                Verdict::NotNodes { reason } => ("not_nodes", None, None, vec![reason.clone()]),
            };
            PlanItem { id: id.clone(), verdict: word.to_string(), target, nodes, detail }
        })
        .collect();
    AutoscalerPlan {
        at_ms,
        launch: count(&plan.launch),
        deferred: count(&plan.deferred),
        items,
        items_total: plan.verdicts.len() as u64,
    }
}

#[cfg(test)]
mod tests;
