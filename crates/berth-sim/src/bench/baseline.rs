//! The naive baseline: the same workloads decided by a linear scan over every node (and, for
//! anti-affinity, over every placed actor), with hash maps and no indexes — what a scheduler
//! without Berth's data structures does. Run in the same process on the same cluster and
//! requests, so the ratio to Berth holds on a noisy machine.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use berth_core::labels::node_labels;
use berth_core::selector::{LabelSelector, Tolerations};
use berth_core::{ResourceId, ResourceSet};

use super::cluster::node_spec;
use super::cluster::ZONES;
use super::workloads::{
    gpu_mix_for, replica_zones, resources_for, selector_for, service_for, Timings, Workload,
    SERVICES,
};

const ZONE: &str = "berth.io/availability-zone";

struct NaiveNode {
    labels: HashMap<String, String>,
    taints: Vec<(String, String)>,
    total: HashMap<ResourceId, i64>,
    free: HashMap<ResourceId, i64>,
    /// Free units of each GPU.
    gpus: Vec<i64>,
}

struct NaiveActor {
    node: usize,
    labels: HashMap<String, String>,
}

/// What a naive placement took, to give it back.
struct Taken {
    node: usize,
    resources: Vec<(ResourceId, i64)>,
    gpus: Vec<(usize, i64)>,
}

struct Naive {
    nodes: Vec<NaiveNode>,
    actors: Vec<NaiveActor>,
}

const ONE: i64 = 10_000;

impl Naive {
    fn new(n: usize) -> Naive {
        let nodes = (0..n)
            .map(|i| {
                let spec = node_spec(i);
                let labels =
                    node_labels(spec.id.as_str(), &spec.facts, &spec.labels).expect("valid");
                let total: HashMap<ResourceId, i64> =
                    spec.total.iter().map(|(r, q)| (r, q.units())).collect();
                let gpus =
                    vec![ONE; (total.get(&ResourceId::GPU).copied().unwrap_or(0) / ONE) as usize];
                NaiveNode {
                    labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                    taints: spec.taints.clone(),
                    free: total.clone(),
                    total,
                    gpus,
                }
            })
            .collect();
        Naive { nodes, actors: Vec::new() }
    }

    fn fits(node: &NaiveNode, request: &ResourceSet) -> bool {
        for (resource, amount) in request.iter() {
            if node.free.get(&resource).copied().unwrap_or(0) < amount.units() {
                return false;
            }
            if resource == ResourceId::GPU {
                let amount = amount.units();
                let ok = if amount < ONE {
                    node.gpus.iter().any(|&free| free >= amount)
                } else {
                    node.gpus.iter().filter(|&&free| free == ONE).count() as i64 >= amount / ONE
                };
                if !ok {
                    return false;
                }
            }
        }
        true
    }

    fn score(node: &NaiveNode, request: &ResourceSet) -> i64 {
        let mut worst = 0;
        for resource in [ResourceId::CPU, ResourceId::MEMORY, ResourceId::GPU] {
            let total = node.total.get(&resource).copied().unwrap_or(0);
            if total == 0 {
                continue;
            }
            let used = total - node.free[&resource] + request.get(resource).units();
            worst = worst.max((used as i128 * 100 / total as i128) as i64);
        }
        let utilisation = if worst < 50 { 0 } else { worst };
        100 - utilisation.min(100)
    }

    /// The best node by a full scan, skipping `skip`; nodes in `preferred` score 1000 more.
    fn decide(
        &self,
        request: &ResourceSet,
        selector: &LabelSelector,
        tolerations: &Tolerations,
        excluded_zones: &HashSet<String>,
        skip: &[usize],
        preferred: &HashSet<usize>,
    ) -> Option<usize> {
        let mut best: Option<(i64, usize)> = None;
        for (i, node) in self.nodes.iter().enumerate() {
            if skip.contains(&i) || !selector.matches(|k| node.labels.get(k).map(String::as_str)) {
                continue;
            }
            if !node.taints.iter().all(|(k, v)| tolerations.tolerates(k, v)) {
                continue;
            }
            if node.labels.get(ZONE).is_some_and(|z| excluded_zones.contains(z))
                || !Naive::fits(node, request)
            {
                continue;
            }
            let score = Naive::score(node, request) + if preferred.contains(&i) { 1000 } else { 0 };
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, i));
            }
        }
        best.map(|(_, i)| i)
    }

    fn take(&mut self, i: usize, request: &ResourceSet) -> Taken {
        let node = &mut self.nodes[i];
        let mut taken = Taken { node: i, resources: Vec::new(), gpus: Vec::new() };
        for (resource, amount) in request.iter() {
            *node.free.get_mut(&resource).expect("fits") -= amount.units();
            taken.resources.push((resource, amount.units()));
            if resource == ResourceId::GPU {
                let amount = amount.units();
                if amount < ONE {
                    let g = (0..node.gpus.len())
                        .filter(|&g| node.gpus[g] >= amount)
                        .min_by_key(|&g| node.gpus[g]);
                    let g = g.expect("fits");
                    node.gpus[g] -= amount;
                    taken.gpus.push((g, amount));
                } else {
                    let whole: Vec<usize> = (0..node.gpus.len())
                        .filter(|&g| node.gpus[g] == ONE)
                        .take((amount / ONE) as usize)
                        .collect();
                    for g in whole {
                        node.gpus[g] = 0;
                        taken.gpus.push((g, ONE));
                    }
                }
            }
        }
        taken
    }

    fn give_back(&mut self, taken: Taken) {
        let node = &mut self.nodes[taken.node];
        for (resource, amount) in taken.resources {
            *node.free.get_mut(&resource).expect("taken before") += amount;
        }
        for (g, amount) in taken.gpus {
            node.gpus[g] += amount;
        }
    }

    /// Nodes hosting a replica of `service`: a scan of every placed actor.
    fn nodes_of(&self, service: &str) -> HashSet<usize> {
        self.actors
            .iter()
            .filter(|a| a.labels.get("app").is_some_and(|v| v == service))
            .map(|a| a.node)
            .collect()
    }

    /// Zones hosting a replica of `service`: a scan of every placed actor.
    fn zones_of(&self, service: &str) -> HashSet<String> {
        self.actors
            .iter()
            .filter(|a| a.labels.get("app").is_some_and(|v| v == service))
            .filter_map(|a| self.nodes[a.node].labels.get(ZONE).cloned())
            .collect()
    }
}

/// Runs the naive baseline of `workload`, as [`super::workloads::run`] runs Berth.
pub fn run(workload: Workload, nodes: usize, warmup: usize, decisions: usize) -> Timings {
    let mut naive = Naive::new(nodes);
    if workload.places_actors() {
        let per_zone = (nodes / ZONES).max(1);
        for k in 0..SERVICES {
            for (j, zone) in replica_zones(k).enumerate() {
                let node = zone + ZONES * ((k + j) % per_zone);
                let labels = HashMap::from([("app".to_string(), format!("svc-{k}"))]);
                naive.actors.push(NaiveActor { node, labels });
            }
        }
    }
    let none = LabelSelector::default();
    let no_tolerations = Tolerations::default();
    let (no_zones, nowhere) = (HashSet::new(), HashSet::new());
    let mut live = VecDeque::new();
    let mut timings = Timings::default();
    for d in 0..warmup + decisions {
        let started = Instant::now();
        let mut taken = Vec::new();
        match workload {
            // The baseline has no fragmentation measure: the fragmentation workload's requests
            // are scanned with the plain score.
            Workload::Default | Workload::Selector | Workload::Fragmentation => {
                let request = match workload {
                    Workload::Fragmentation => gpu_mix_for(d),
                    _ => resources_for(d),
                };
                let (selector, tolerations) = match workload {
                    Workload::Selector => selector_for(d),
                    _ => (none.clone(), no_tolerations.clone()),
                };
                let found =
                    naive.decide(&request, &selector, &tolerations, &no_zones, &[], &nowhere);
                if let Some(i) = found {
                    taken.push(naive.take(i, &request));
                }
            }
            Workload::AntiAffinity | Workload::SoftAffinity => {
                let (excluded, preferred) = match workload {
                    Workload::SoftAffinity => (HashSet::new(), naive.nodes_of(&service_for(d))),
                    _ => (naive.zones_of(&service_for(d)), HashSet::new()),
                };
                let request: ResourceSet =
                    [(ResourceId::CPU, berth_core::Quantity::from_units(1000))]
                        .into_iter()
                        .collect();
                let found =
                    naive.decide(&request, &none, &no_tolerations, &excluded, &[], &preferred);
                if let Some(i) = found {
                    taken.push(naive.take(i, &request));
                }
            }
            Workload::Groups => {
                let bundle: ResourceSet =
                    [(ResourceId::CPU, berth_core::Quantity::ONE)].into_iter().collect();
                let mut used = Vec::new();
                for _ in 0..4 {
                    match naive.decide(&bundle, &none, &no_tolerations, &no_zones, &used, &nowhere)
                    {
                        Some(i) => {
                            used.push(i);
                            taken.push(naive.take(i, &bundle));
                        }
                        None => break,
                    }
                }
                if used.len() < 4 {
                    for t in taken.drain(..) {
                        naive.give_back(t);
                    }
                }
            }
        }
        let elapsed = started.elapsed().as_nanos() as u64;
        let placed = !taken.is_empty();
        if d >= warmup {
            timings.latencies_ns.push(elapsed);
            timings.placed += usize::from(placed);
        }
        match workload {
            // The newcomer leaves again, as in Berth's run.
            Workload::AntiAffinity | Workload::SoftAffinity => {
                taken.into_iter().for_each(|t| naive.give_back(t))
            }
            _ => {
                if placed {
                    live.push_back(taken);
                }
                let keep = if workload == Workload::Groups { nodes / 4 } else { nodes };
                if live.len() > keep {
                    for t in live.pop_front().expect("not empty") {
                        naive.give_back(t);
                    }
                }
            }
        }
    }
    timings
}
