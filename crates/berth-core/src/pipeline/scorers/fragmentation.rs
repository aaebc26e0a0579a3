//! Fragmentation: place where the expected GPU fragmentation grows least, after
//! Fragmentation Gradient Descent (FGD, Weng et al., "Beware of Fragmentation", USENIX ATC '23).
//!
//! ## The measure
//!
//! Assumptions: a GPU that is free is wasted if the work that comes cannot use it. What comes is
//! described by the workload's *typical shapes*: CPUs, GPUs (a share of one GPU, or whole GPUs)
//! and the accelerator types it accepts, each with how often it comes (its weight).
//!
//! Rules: the *fragment* of a node for a shape `m` is
//! - all of the node's idle GPU capacity when `m` cannot be placed there: it asks for no GPU,
//!   it does not accept the node's accelerator type (`berth.io/accelerator-type`), the node
//!   has less free CPU than it asks, or fewer GPUs with enough free than it needs (one GPU with
//!   the share free, or that many wholly free GPUs);
//! - otherwise, the idle capacity of the GPUs that have less free than `m` needs per GPU (its
//!   share, or a whole GPU).
//!
//! A node's fragment is `Σₘ weightₘ × fragmentₘ / Σₘ weightₘ`, in GPUs; the cluster's is the sum
//! over nodes ([`ShapeTable::node_fragment`] gives it exactly, as an integer scaled by the weight
//! sum and the 0.0001 resolution). Memory does not count, as in the paper.
//!
//! ## Weighed by supply (the scorers only)
//!
//! The paper weighs each shape by how often it comes. The scorers weigh a shape `C / S` times
//! more, where `C` is the GPUs of the cluster's alive nodes and `S` the GPUs of the nodes that
//! could ever take it: of a type it accepts, with at least as many GPUs and as much CPU in all
//! as it asks (a shape no node could take is left out). Why: by frequency alone, work goes
//! where the fewest shapes are counted, which are the nodes only rare shapes can use (rare
//! accelerator types, the few nodes that alone can take the largest requests); measured
//! against what can take them, those shapes weigh what they stand to lose
//! (measurements: `docs/placement-log.md`).
//! Shapes that every GPU node could take score exactly as before. Learned shapes are cut to
//! those covering 95% of the weight after this weighing, not before ([`learn`]), so that such
//! a shape stays although it is rare. The fragmentation *metric* (`berth sim`) keeps the
//! paper's weights.
//!
//! ## The lost-capacity measure
//!
//! The FGD measure asks whether one more of a shape fits. The *lost capacity* of a node for a
//! shape is its idle GPU capacity minus what that shape would take if only it came, placed
//! again and again until the GPUs (shares: as many as fit in each GPU; whole GPUs: as many sets
//! as there are wholly free GPUs) or the free CPU run out; weighted over shapes as above. It
//! sees GPUs stranded behind CPU that other work took, which the FGD measure counts only once
//! the last placement is gone. Placing a request lowers it by at most the GPUs asked too.
//!
//! ## The balance measure
//!
//! The *stranded* GPU of a node is its idle GPU capacity beyond what its free CPU could serve
//! at the shapes' mix: `max(0, idle − cpu_free × G / C)`, where `G` and `C` are the GPU and CPU
//! the shapes with GPUs ask for, each times its weight as counted (not weighed by supply). It
//! is one number for the whole mix where lost capacity asks shape by shape, so it sees a node
//! drifting towards CPU used up long before any one shape stops fitting, and it rewards work
//! that asks little CPU for its GPUs on nodes whose CPU others took. Why: where multi-GPU
//! requests are many, most idle GPUs that are not slivers of shares sat on nodes whose CPU had
//! run out; it lifted those workloads above FGD (measurements: `docs/placement-log.md`). It ranks
//! requests that ask for GPUs only (see `applies` below). Placing `g` GPUs lowers it by at most
//! `g`, as for the other two measures.
//!
//! ## The CPU-fragment measure
//!
//! The *CPU fragment* of a node is, per shape, all of its free CPU when the shape cannot be
//! placed there (too little CPU free, or not the GPUs it needs, as for the fragment), weighted
//! over the shapes as above, CPU-only shapes included with the CPU they ask: the FGD fragment
//! with the roles of CPU and GPU swapped, in CPU units. Placing `c` CPU lowers it by at most
//! `c`. Why: where the CPU runs out before the GPUs, what fails is GPU work that finds its GPUs
//! beside too little CPU; the GPU measures see a node's CPU only through the GPU it strands,
//! and GPU work scattered the CPU holes that the CPU-heavy shapes and the CPU-only ones need.
//! The default profile ranks GPU work by it while the CPU runs short (see
//! `Clusters::CpuShort`; measurements: `docs/placement-log.md`).
//!
//! ## The scorer
//!
//! Rules: for a node that passed the filters, `before` is its measure (fragment for
//! `fragmentation`, lost capacity for `capacity`, stranded GPU for `balance`, CPU fragment for
//! `cpu-fragmentation`) now and `after` its measure once the request is placed as the ledger
//! would place it (a share on the GPU with the least free that fits it, lowest ID on ties;
//! whole GPUs on wholly free ones). Placing `g` GPUs can lower the fragment by at most `g`, so
//! the *excess* `e = after − before + g` is never negative, and it is 0 exactly when every GPU
//! the request takes was fragment for every shape.
//! The raw score is `⌊100 / (1 + e)⌋` (exact: `⌊100 × D / (D + e × D)⌋` with `D` the weight sum
//! times 10000): 100 for no excess, 50 for one GPU's worth, 1 point per 0.01 GPU near the top,
//! where the choice is made. Ranking by `e` is ranking by `after − before` (FGD's gradient),
//! since `g` is the same for every node of a decision. For the CPU fragment, `g` is the CPU
//! asked and the excess is in CPUs, `CPUS_PER_GPU` of which score as one GPU's. Without
//! shapes the scorer does not apply (it is skipped and not listed).
//!
//! Behaviour: shares go to GPUs already split, where the rest is fragment anyway; whole-GPU
//! work goes where it does not break a node that larger shapes could still use; CPU-only work
//! goes to nodes whose GPUs are used up, or whose free CPU is not what GPU shapes need; and
//! work that accepts any accelerator type keeps off the types that constrained shapes need,
//! because on a type a constrained shape cannot use, every idle GPU is fragment for it already,
//! and taking one lowers its fragment by exactly what is taken.
//!
//! Cost: a score not computed before is two evaluations of the measure, each one sort of the
//! node's GPUs (a handful) and, per group of shapes with the same GPU need and accelerator
//! types, a search in the sorted free quantities and one in the group's CPU steps; no allocation
//! for nodes of up to 16 GPUs. Scores are kept by node state, a node's state by its version
//! (see `memo`), so most scores are a version check and a lookup.

use std::cell::RefCell;
use std::sync::Arc;

use smallvec::SmallVec;

use super::super::stage::{DecisionContext, Score, Scorer};
use crate::cluster::Cluster;
use crate::labels::ACCELERATOR_TYPE;
use crate::node::Node;
use crate::quantity::{Quantity, UNITS_PER_WHOLE};
use crate::resource::ResourceId;
use memo::{Memos, NodeState};

/// A typical request shape of the workload, and how often it comes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// CPUs asked.
    pub cpu: Quantity,
    /// GPUs asked: 0, a share of one GPU (below 1), or a whole number of GPUs.
    pub gpu: Quantity,
    /// The accelerator types it accepts, sorted and unique; empty: any.
    pub accelerators: Vec<String>,
    /// How often it comes, relative to the other shapes (a count, or a share in any unit).
    pub weight: u32,
}

/// The shapes, grouped for evaluation. Built once per scheduler (or per replay), read-only.
#[derive(Clone, Debug, Default)]
pub struct ShapeTable {
    /// Every accelerator type some shape names, in order of first appearance.
    models: Vec<Box<str>>,
    groups: Vec<Group>,
    /// Weight of the shapes without GPUs: every idle GPU is fragment for them.
    no_gpu_weight: u64,
    /// `(cpu units, weight of the shapes without GPUs asking at most that)`, ascending.
    no_gpu_steps: Vec<(i64, u64)>,
    /// Weight of every shape.
    total_weight: u64,
    /// `(GPU units, CPU units)` the shapes with GPUs ask for, each times its weight: the mix's
    /// GPU per CPU, for the balance measure.
    gpu_per_cpu: (u128, u128),
}

/// Shapes with the same GPU need and accelerator types.
#[derive(Clone, Debug)]
struct Group {
    /// Free units a GPU needs to serve the shape: its share, or a whole GPU.
    need: i64,
    /// GPUs needed with that much free.
    count: usize,
    /// Indices into `ShapeTable::models`; empty: any type.
    models: SmallVec<[u16; 4]>,
    /// `(cpu units, weight of the group's shapes asking at most that)`, ascending.
    cpu_steps: Vec<(i64, u64)>,
    /// `(cpu units, weight of the group's shapes asking exactly that)`, ascending.
    cpu_weights: Vec<(i64, u64)>,
    /// Weight of the group.
    weight: u64,
}

/// A node's GPUs by free units, ascending, with running sums: `sums[i]` is the free of the
/// first `i` GPUs.
struct SortedFree {
    free: SmallVec<[i64; 16]>,
    sums: SmallVec<[i64; 17]>,
}

impl SortedFree {
    fn new(free: &[i64]) -> SortedFree {
        let mut free: SmallVec<[i64; 16]> = SmallVec::from_slice(free);
        free.sort_unstable();
        let mut sums = SmallVec::with_capacity(free.len() + 1);
        let mut sum = 0;
        sums.push(0);
        for &f in &free {
            sum += f;
            sums.push(sum);
        }
        SortedFree { free, sums }
    }

    fn idle(&self) -> i64 {
        self.sums[self.free.len()]
    }
}

impl ShapeTable {
    /// The table of `shapes`; shapes of weight 0 are left out.
    pub fn new(shapes: &[Shape]) -> ShapeTable {
        let mut table = ShapeTable::default();
        for shape in shapes.iter().filter(|s| s.weight > 0) {
            let weight = u64::from(shape.weight);
            table.total_weight += weight;
            if shape.gpu.is_zero() {
                table.no_gpu_weight += weight;
                // Per CPU quantity for now; made cumulative below.
                table.no_gpu_steps.push((shape.cpu.units(), weight));
                continue;
            }
            let (need, count) = if shape.gpu < Quantity::ONE {
                (shape.gpu.units(), 1)
            } else {
                (UNITS_PER_WHOLE, shape.gpu.whole().max(1) as usize)
            };
            let mut models: SmallVec<[u16; 4]> =
                shape.accelerators.iter().map(|m| table.model_index_or_insert(m)).collect();
            models.sort_unstable();
            models.dedup();
            let group = match table
                .groups
                .iter_mut()
                .find(|g| g.need == need && g.count == count && g.models == models)
            {
                Some(group) => group,
                None => {
                    table.groups.push(Group {
                        need,
                        count,
                        models,
                        cpu_steps: Vec::new(),
                        cpu_weights: Vec::new(),
                        weight: 0,
                    });
                    table.groups.last_mut().expect("just pushed")
                }
            };
            group.weight += weight;
            // Weights per CPU quantity for now; made cumulative below.
            group.cpu_steps.push((shape.cpu.units(), weight));
        }
        for group in &mut table.groups {
            let merged = cumulative(std::mem::take(&mut group.cpu_steps));
            group.cpu_weights = merged
                .iter()
                .scan(0, |below, &(cpu, up_to)| {
                    let weight = up_to - *below;
                    *below = up_to;
                    Some((cpu, weight))
                })
                .collect();
            group.cpu_steps = merged;
        }
        table.no_gpu_steps = cumulative(std::mem::take(&mut table.no_gpu_steps));
        table.gpu_per_cpu = table.mix();
        table
    }

    /// The GPU and CPU units the shapes with GPUs ask for, each times its weight.
    fn mix(&self) -> (u128, u128) {
        let (mut gpu, mut cpu) = (0u128, 0u128);
        for group in &self.groups {
            let units = group.need.max(0) as u128 * group.count as u128;
            for &(asked, weight) in &group.cpu_weights {
                gpu += units * u128::from(weight);
                cpu += asked.max(0) as u128 * u128::from(weight);
            }
        }
        (gpu, cpu)
    }

    /// The same shapes, reweighed: the shapes without GPUs by `no_gpu` times their weight, and
    /// those of the `g`-th group asking `cpu` by `scale(g, group, cpu)` times theirs (`None`
    /// or 0 leaves them out).
    fn rescaled(
        &self,
        no_gpu: u64,
        scale: impl Fn(usize, &Group, i64) -> Option<u64>,
    ) -> ShapeTable {
        let mut table = ShapeTable {
            models: self.models.clone(),
            groups: Vec::with_capacity(self.groups.len()),
            no_gpu_weight: self.no_gpu_weight * no_gpu,
            no_gpu_steps: if no_gpu == 0 {
                Vec::new()
            } else {
                self.no_gpu_steps.iter().map(|&(cpu, w)| (cpu, w * no_gpu)).collect()
            },
            total_weight: self.no_gpu_weight * no_gpu,
            // The mix as the shapes come, not as weighed: weighing by supply multiplies the
            // rare shapes, and a mix of that much CPU per GPU counted most nodes as stranded.
            gpu_per_cpu: self.gpu_per_cpu,
        };
        for (g, group) in self.groups.iter().enumerate() {
            let cpu_weights: Vec<(i64, u64)> = group
                .cpu_weights
                .iter()
                .filter_map(|&(cpu, weight)| {
                    let factor = scale(g, group, cpu).filter(|&f| f > 0)?;
                    Some((cpu, weight * factor))
                })
                .collect();
            if cpu_weights.is_empty() {
                continue;
            }
            let mut cumulative = 0;
            let cpu_steps = cpu_weights
                .iter()
                .map(|&(cpu, weight)| {
                    cumulative += weight;
                    (cpu, cumulative)
                })
                .collect();
            table.total_weight += cumulative;
            table.groups.push(Group {
                cpu_steps,
                cpu_weights,
                weight: cumulative,
                models: group.models.clone(),
                ..*group
            });
        }
        table
    }

    /// The table for `cluster`: each shape weighs `C / S` times as much, where `C` is the GPUs
    /// of the cluster's alive nodes and `S` the GPUs of the nodes that could ever take it
    /// (enough GPUs and CPU in all, and a type it accepts); a shape no node could take is left
    /// out. See [`Fragmentation`] for why.
    pub fn weighed_by_supply(&self, cluster: &Cluster) -> ShapeTable {
        self.weighed(&Supply::of(cluster))
    }

    /// [`ShapeTable::weighed_by_supply`] with the cluster's supply counted already.
    fn weighed(&self, supply: &Supply) -> ShapeTable {
        self.rescaled(SCALE_ONE, |_, group, cpu| {
            let models: SmallVec<[&str; 4]> =
                group.models.iter().map(|&m| &*self.models[m as usize]).collect();
            let usable = supply.able(group.count as u64, cpu, &models);
            (usable > 0).then(|| {
                (u128::from(supply.total) * u128::from(SCALE_ONE) / u128::from(usable)) as u64
            })
        })
    }

    /// The shapes of most weight that together cover `percent` of the table's weight, heaviest
    /// first (equal weights: in the table's order; the shapes without GPUs count as one).
    /// Applied to a table weighed by supply, a rare shape stays when few nodes could take it.
    pub fn covering(&self, percent: u64) -> ShapeTable {
        // (weight, group and CPU step; `None`: the shapes without GPUs).
        let mut entries: Vec<(u64, Option<(usize, usize)>)> = Vec::new();
        if self.no_gpu_weight > 0 {
            entries.push((self.no_gpu_weight, None));
        }
        for (g, group) in self.groups.iter().enumerate() {
            let steps = group.cpu_weights.iter().enumerate();
            entries.extend(steps.map(|(step, &(_, weight))| (weight, Some((g, step)))));
        }
        // Stable: equal weights keep the table's order.
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        let mut kept: Vec<Vec<bool>> =
            self.groups.iter().map(|g| vec![false; g.cpu_weights.len()]).collect();
        let (mut covered, mut no_gpu) = (0u64, 0);
        for (weight, entry) in entries {
            if u128::from(covered) * 100 >= u128::from(percent) * u128::from(self.total_weight) {
                break;
            }
            covered += weight;
            match entry {
                Some((g, step)) => kept[g][step] = true,
                None => no_gpu = 1,
            }
        }
        self.rescaled(no_gpu, |g, group, cpu| {
            // CPU quantities are unique within a group.
            let step = group.cpu_weights.binary_search_by_key(&cpu, |&(c, _)| c).ok()?;
            kept[g][step].then_some(1)
        })
    }

    fn model_index_or_insert(&mut self, model: &str) -> u16 {
        match self.models.iter().position(|m| &**m == model) {
            Some(i) => i as u16,
            None => {
                self.models.push(model.into());
                (self.models.len() - 1) as u16
            }
        }
    }

    /// True when there is no shape of positive weight.
    pub fn is_empty(&self) -> bool {
        self.total_weight == 0
    }

    /// The sum of the shapes' weights: [`ShapeTable::node_fragment`] is in GPUs × 10000 × this.
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The node's fragment (see the module documentation) in units of 0.0001 GPU, times
    /// [`ShapeTable::total_weight`]: exact, so that sums over nodes are exact too.
    pub fn node_fragment(&self, node: &Node) -> u128 {
        let free = SortedFree::new(&gpu_free(node));
        let cpu_free = node.available().get(ResourceId::CPU).units();
        self.fragment(cpu_free, self.model_of(node), &free)
    }

    /// [`ShapeTable::node_fragment`] in GPUs (0 without shapes).
    pub fn node_fragment_gpus(&self, node: &Node) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        self.node_fragment(node) as f64 / (self.total_weight as f64 * UNITS_PER_WHOLE as f64)
    }

    /// The index of the node's accelerator type among the shapes' types, if any names it.
    fn model_of(&self, node: &Node) -> Option<u16> {
        let model = node.labels().get(ACCELERATOR_TYPE)?;
        self.models.iter().position(|m| &**m == model).map(|i| i as u16)
    }

    /// The measure of `measure` on a node's state.
    fn measure(
        &self,
        measure: Measure,
        cpu_free: i64,
        model: Option<u16>,
        free: &SortedFree,
    ) -> u128 {
        match measure {
            Measure::Fragment => self.fragment(cpu_free, model, free),
            Measure::LostCapacity => self.lost_capacity(cpu_free, model, free),
            Measure::Balance => self.stranded(cpu_free, free.idle()),
            Measure::CpuFragment => self.cpu_fragment(cpu_free, model, free),
        }
    }

    /// The CPU-fragment measure: per shape, all of the node's free CPU when the shape cannot
    /// be placed there (too little CPU left, or not the GPUs it needs), in CPU units times
    /// the shape's weight.
    fn cpu_fragment(&self, cpu_free: i64, model: Option<u16>, free: &SortedFree) -> u128 {
        let cpu = cpu_free.max(0) as u128;
        let above = |steps: &[(i64, u64)], weight: u64| {
            let fitting = steps.partition_point(|&(asked, _)| asked <= cpu_free);
            weight - if fitting == 0 { 0 } else { steps[fitting - 1].1 }
        };
        let mut unserved = u128::from(above(&self.no_gpu_steps, self.no_gpu_weight));
        for group in &self.groups {
            let accessible =
                group.models.is_empty() || model.is_some_and(|m| group.models.contains(&m));
            let short = free.free.partition_point(|&f| f < group.need);
            if !accessible || free.free.len() - short < group.count {
                unserved += u128::from(group.weight);
            } else {
                unserved += u128::from(above(&group.cpu_steps, group.weight));
            }
        }
        cpu * unserved
    }

    /// The lost-capacity measure: for each shape, the idle GPU that shape could not use if
    /// only it came, placed again and again until the GPUs or the CPU run out.
    fn lost_capacity(&self, cpu_free: i64, model: Option<u16>, free: &SortedFree) -> u128 {
        let idle = free.idle().max(0);
        let mut sum = idle as u128 * u128::from(self.no_gpu_weight);
        for group in &self.groups {
            let accessible =
                group.models.is_empty() || model.is_some_and(|m| group.models.contains(&m));
            if !accessible {
                sum += idle as u128 * u128::from(group.weight);
                continue;
            }
            // Placements the GPUs allow, and the GPU units each takes.
            let (by_gpu, size) = if group.count == 1 && group.need < UNITS_PER_WHOLE {
                (free.free.iter().map(|&f| f.max(0) / group.need).sum::<i64>(), group.need)
            } else {
                let whole = free.free.iter().filter(|&&f| f >= UNITS_PER_WHOLE).count();
                ((whole / group.count) as i64, UNITS_PER_WHOLE * group.count as i64)
            };
            for &(cpu, weight) in &group.cpu_weights {
                let by_cpu = if cpu <= 0 { i64::MAX } else { cpu_free.max(0) / cpu };
                let lost = idle - by_gpu.min(by_cpu) * size;
                sum += lost.max(0) as u128 * u128::from(weight);
            }
        }
        sum
    }

    /// The balance measure: the node's idle GPU beyond what its free CPU could serve at the
    /// shapes' mix of CPU per GPU (`gpu_per_cpu`).
    fn stranded(&self, cpu_free: i64, idle: i64) -> u128 {
        let idle = idle.max(0) as u128;
        let (gpu, cpu) = self.gpu_per_cpu;
        if cpu == 0 {
            return 0;
        }
        let servable = cpu_free.max(0) as u128 * gpu / cpu;
        idle.saturating_sub(servable) * u128::from(self.total_weight)
    }

    fn fragment(&self, cpu_free: i64, model: Option<u16>, free: &SortedFree) -> u128 {
        let idle = free.idle().max(0) as u128;
        let mut sum = idle * u128::from(self.no_gpu_weight);
        for group in &self.groups {
            let weight = u128::from(group.weight);
            let accessible =
                group.models.is_empty() || model.is_some_and(|m| group.models.contains(&m));
            // GPUs with less free than the shape needs come first in the sorted list.
            let short = free.free.partition_point(|&f| f < group.need);
            if !accessible || free.free.len() - short < group.count {
                sum += idle * weight;
                continue;
            }
            let steps = &group.cpu_steps;
            let fitting = steps.partition_point(|&(cpu, _)| cpu <= cpu_free);
            let served = if fitting == 0 { 0 } else { u128::from(steps[fitting - 1].1) };
            let partial = free.sums[short].max(0) as u128;
            sum += partial * served + idle * (weight - served);
        }
        sum
    }
}

/// The factor of a shape that can use every GPU of the cluster, in [`ShapeTable::weighed_by_supply`]:
/// factors are exact to a thousandth.
const SCALE_ONE: u64 = 1000;

/// Free units of each of the node's GPUs.
fn gpu_free(node: &Node) -> SmallVec<[i64; 16]> {
    node.pool(ResourceId::GPU)
        .map(|pool| pool.free_per_instance().map(Quantity::units).collect())
        .unwrap_or_default()
}

/// Takes `asked` units of GPU from `free` as the ledger would (see [`crate::instances`]);
/// false when it does not fit.
fn take(free: &mut [i64], asked: i64) -> bool {
    if asked <= 0 {
        return true;
    }
    if asked < UNITS_PER_WHOLE {
        let tightest =
            free.iter().enumerate().filter(|(_, &f)| f >= asked).min_by_key(|(i, &f)| (f, *i));
        return match tightest {
            Some((i, _)) => {
                free[i] -= asked;
                true
            }
            None => false,
        };
    }
    let mut wanted = asked / UNITS_PER_WHOLE;
    if free.iter().filter(|&&f| f == UNITS_PER_WHOLE).count() < wanted as usize {
        return false;
    }
    for f in free.iter_mut().filter(|f| **f == UNITS_PER_WHOLE) {
        if wanted == 0 {
            break;
        }
        *f = 0;
        wanted -= 1;
    }
    true
}

/// The GPUs of a cluster's alive nodes, in all and per kind of node (GPUs, CPU, type): what
/// [`ShapeTable::weighed_by_supply`] weighs shapes by. Counted in one pass over the GPU nodes,
/// so a scorer counts it again only when the cluster's nodes change, not when its shapes do.
#[derive(Debug, Default)]
struct Supply {
    /// GPU units of every alive GPU node.
    total: u64,
    /// The kinds of alive GPU nodes, and the GPU units of the nodes of each kind.
    kinds: Vec<(NodeKind, u64)>,
}

/// What a node has in all, as far as which shapes it could take: GPUs, CPU units, type.
type NodeKind = (u64, i64, Option<Box<str>>);

impl Supply {
    fn of(cluster: &Cluster) -> Supply {
        let mut supply = Supply::default();
        let Some(gpu_nodes) = cluster.nodes_having(ResourceId::GPU) else { return supply };
        // Nodes come in a few kinds, but a cluster of machines that all differ must not cost a
        // pass over the kinds per node.
        let mut kinds: rustc_hash::FxHashMap<NodeKind, u64> = Default::default();
        for index in gpu_nodes.intersection(cluster.alive()).iter() {
            let Some(node) = cluster.node(index) else { continue };
            let units = node.total().get(ResourceId::GPU).units().max(0) as u64;
            supply.total += units;
            let kind = (
                units / UNITS_PER_WHOLE as u64,
                node.total().get(ResourceId::CPU).units(),
                node.labels().get(ACCELERATOR_TYPE).map(Box::from),
            );
            *kinds.entry(kind).or_default() += units;
        }
        supply.kinds = kinds.into_iter().collect();
        supply
    }

    /// The GPU units of the nodes that could take `count` GPUs and `cpu` CPU units in all, of
    /// one of `models` (any when empty).
    fn able(&self, count: u64, cpu: i64, models: &[&str]) -> u64 {
        self.kinds
            .iter()
            .filter(|((gpus, cpus, model), _)| {
                *gpus >= count
                    && *cpus >= cpu
                    && (models.is_empty() || model.as_deref().is_some_and(|m| models.contains(&m)))
            })
            .map(|(_, units)| units)
            .sum()
    }
}

/// What the scorer measures the growth of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// The FGD paper's fragment (see the module documentation): scorer `fragmentation`.
    Fragment,
    /// Lost capacity: per shape, the idle GPU the shape could not use if only it came, placed
    /// again and again until the node's GPUs or CPU run out: scorer `capacity`.
    LostCapacity,
    /// Stranded GPU: the idle GPU beyond what the node's free CPU could serve at the shapes'
    /// mix of CPU per GPU: scorer `balance`.
    Balance,
    /// Stranded CPU: per shape, the free CPU that shape could not use: scorer
    /// `cpu-fragmentation`.
    CpuFragment,
}

/// The fragmentation, capacity, balance and CPU-fragment scorers. See the module documentation.
#[derive(Debug)]
pub struct Fragmentation {
    /// Where the typical shapes come from.
    source: Source,
    /// What it measures.
    pub measure: Measure,
    /// The share of the weight the shapes are cut to once weighed by supply, in percent:
    /// learned shapes are all the shapes seen, given ones are what the profile or the simulator chose.
    cover: Option<u64>,
    /// The table the scores read. Recomputed once per attempt at most, when the cluster's
    /// nodes or the shapes change, so the per-node work reads a ready table.
    ready: RefCell<Option<Ready>>,
    /// Each node's state, and scores by state. See [`memo`].
    memo: RefCell<Memos>,
}

/// The shapes weighed by the cluster's supply ([`ShapeTable::weighed_by_supply`]), with what
/// they were computed from.
#[derive(Debug)]
struct Ready {
    fingerprint: Fingerprint,
    table: Arc<ShapeTable>,
    /// The supply counted for `fingerprint`'s cluster part: learned shapes change every few
    /// hundred requests, and counting the supply again then was a pass over every GPU node
    /// (at 100,000 nodes, milliseconds: the decision's p99).
    supply: Arc<Supply>,
    /// Tells memo entries of earlier tables from this one's; bumped with every new table, so
    /// that a new table costs no pass over the memo.
    stamp: u64,
    /// The stamp of the first table with this table's accelerator types in this order: node
    /// states read since then have their type's index right.
    models_since: u64,
}

/// Where a [`Fragmentation`] scorer's shapes come from.
#[derive(Debug)]
enum Source {
    /// Given once.
    Given(Arc<ShapeTable>),
    /// Learned from the requests ranked (see [`learn`]).
    Learned(RefCell<learn::Learner>),
}

/// What a ready table was computed for: the cluster's node counts (slots, alive, with GPUs)
/// and the generation of the shapes.
type Fingerprint = (usize, u64, u64, u64);

impl Clone for Fragmentation {
    /// A scorer with the same shapes (a learning one starts again from nothing).
    fn clone(&self) -> Self {
        match &self.source {
            Source::Given(shapes) => Fragmentation::new(shapes.clone(), self.measure),
            Source::Learned(_) => Fragmentation::learning(self.measure),
        }
    }
}

impl Fragmentation {
    /// The scorer of `shapes` measuring `measure`.
    pub fn new(shapes: Arc<ShapeTable>, measure: Measure) -> Fragmentation {
        Fragmentation::with_source(Source::Given(shapes), measure)
    }

    /// A scorer that learns its shapes from the requests it ranks nodes for.
    pub fn learning(measure: Measure) -> Fragmentation {
        Fragmentation::with_source(Source::Learned(RefCell::default()), measure)
    }

    fn with_source(source: Source, measure: Measure) -> Fragmentation {
        let cover = match source {
            Source::Given(_) => None,
            Source::Learned(_) => Some(learn::COVERAGE_PERCENT),
        };
        Fragmentation {
            source,
            measure,
            cover,
            ready: RefCell::new(None),
            memo: RefCell::default(),
        }
    }

    /// The generation of the shapes: 0 for given ones, the learner's rebuilds for learned.
    fn generation(&self) -> u64 {
        match &self.source {
            Source::Given(_) => 0,
            Source::Learned(learner) => learner.borrow().generation(),
        }
    }

    /// The shapes as given, or as learned (with the whole nodes expected) for this supply.
    fn shapes(&self, supply: &Supply) -> Arc<ShapeTable> {
        match &self.source {
            Source::Given(shapes) => shapes.clone(),
            Source::Learned(learner) => Arc::new(learned_table(&learner.borrow(), supply)),
        }
    }

    /// Counts the request when learning, then makes the ready table current.
    fn prepare(&self, cx: &DecisionContext<'_>) {
        if let Source::Learned(learner) = &self.source {
            learner.borrow_mut().observe(cx.request);
        }
        let generation = self.generation();
        let cluster = cx.cluster;
        let fingerprint = (
            cluster.index_bound(),
            cluster.alive().len(),
            cluster.nodes_having(ResourceId::GPU).map_or(0, |s| s.len()),
            generation,
        );
        let same_nodes =
            |f: &Fingerprint| f.0 == fingerprint.0 && f.1 == fingerprint.1 && f.2 == fingerprint.2;
        let (supply, stamp, before) = match self.ready.borrow().as_ref() {
            Some(ready) if ready.fingerprint == fingerprint => return,
            Some(ready) if same_nodes(&ready.fingerprint) => {
                let before = (ready.table.clone(), ready.models_since);
                (ready.supply.clone(), ready.stamp + 1, Some(before))
            }
            Some(ready) => {
                let before = (ready.table.clone(), ready.models_since);
                (Arc::new(Supply::of(cluster)), ready.stamp + 1, Some(before))
            }
            None => (Arc::new(Supply::of(cluster)), 0, None),
        };
        let mut table = self.shapes(&supply).weighed(&supply);
        if let Some(percent) = self.cover {
            table = table.covering(percent);
        }
        let table = Arc::new(table);
        let models_since = match before {
            Some((old, since)) if old.models == table.models => since,
            _ => stamp,
        };
        *self.ready.borrow_mut() = Some(Ready { fingerprint, table, supply, stamp, models_since });
        // Sized once here, not grown node by node while scoring.
        self.memo.borrow_mut().reserve_slots(cluster.index_bound());
    }
}

/// The learned shapes, and two expected from the start, each weighing one in
/// [`learn::WHOLE_NODE_SHARE`] of the requests seen (at least 1): a whole node of each of the
/// largest kinds (the most GPUs), and one whole GPU. The largest requests fit only the largest
/// nodes, and a learner cannot keep those whole for a shape it has not seen yet; likewise a
/// share of a GPU goes to a GPU already split rather than to a whole one while nothing asked
/// for whole GPUs yet. Small, so that what the requests show soon outweighs them
/// (measurements: `docs/placement-log.md`).
fn learned_table(learner: &learn::Learner, supply: &Supply) -> ShapeTable {
    let mut shapes = learner.built().to_vec();
    let seen: u64 = shapes.iter().map(|shape| u64::from(shape.weight)).sum();
    let weight = u32::try_from(seen / learn::WHOLE_NODE_SHARE).unwrap_or(u32::MAX).max(1);
    let largest = supply.kinds.iter().map(|(kind, _)| kind.0).max().unwrap_or(0);
    let mut whole: Vec<(u64, i64)> = supply
        .kinds
        .iter()
        .filter(|(kind, _)| largest > 0 && kind.0 == largest)
        .map(|(kind, _)| (kind.0, kind.1))
        .collect();
    whole.sort_unstable();
    whole.dedup();
    shapes.extend(whole.into_iter().map(|(gpus, cpu)| Shape {
        cpu: Quantity::from_units(cpu),
        gpu: Quantity::from_units(gpus as i64 * UNITS_PER_WHOLE),
        accelerators: Vec::new(),
        weight,
    }));
    if largest > 0 {
        shapes.push(Shape {
            cpu: Quantity::ZERO,
            gpu: Quantity::ONE,
            accelerators: Vec::new(),
            weight,
        });
    }
    ShapeTable::new(&shapes)
}

impl Scorer for Fragmentation {
    fn name(&self) -> &'static str {
        match self.measure {
            Measure::Fragment => "fragmentation",
            Measure::LostCapacity => "capacity",
            Measure::Balance => "balance",
            Measure::CpuFragment => "cpu-fragmentation",
        }
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        self.prepare(cx);
        // Balance ranks GPU work only. For work without GPUs it scores alike every node whose
        // CPU stays enough for its GPUs, and lower the partly used ones near that line: it
        // pushed such work onto whole nodes, which the largest GPU shapes then could not use;
        // fragmentation and capacity, shape by shape, keep those whole.
        if self.measure == Measure::Balance && cx.request.resources().get(ResourceId::GPU).is_zero()
        {
            return false;
        }
        self.ready.borrow().as_ref().is_some_and(|ready| !ready.table.is_empty())
    }

    fn score(&self, cx: &DecisionContext<'_>, node: &Node) -> Score {
        let ready = self.ready.borrow();
        let Some(Ready { table, stamp, models_since, .. }) = ready.as_ref() else {
            return Score::MIN;
        };
        let asked = cx.request.resources();
        let request = (asked.get(ResourceId::CPU).units(), asked.get(ResourceId::GPU).units());
        if self.measure == Measure::Balance {
            // Two numbers per node, read directly: cheaper than the memo's lookup.
            return Self::balance_score(table, node, request);
        }
        let state_of = |node: &Node| {
            let mut free: SmallVec<[i64; 8]> = gpu_free(node).into_iter().collect();
            free.sort_unstable();
            NodeState {
                cpu_free: node.available().get(ResourceId::CPU).units(),
                model: table.model_of(node),
                free,
            }
        };
        let measure = |state: &NodeState| {
            table.measure(self.measure, state.cpu_free, state.model, &SortedFree::new(&state.free))
        };
        let compute = |state: &NodeState, before| self.compute(table, state, before, request);
        let mut memo = self.memo.borrow_mut();
        memo.score((*stamp, *models_since), node, request, state_of, measure, compute)
    }
}

impl Fragmentation {
    /// The balance score of `request` (CPU and GPU units) on `node`: the measure reads only the
    /// node's idle GPU and free CPU, whichever GPUs the request takes.
    fn balance_score(table: &ShapeTable, node: &Node, request: (i64, i64)) -> Score {
        let (cpu_asked, gpu_asked) = request;
        let available = node.available();
        let (idle, cpu_free) =
            (available.get(ResourceId::GPU).units(), available.get(ResourceId::CPU).units());
        if gpu_asked > idle {
            return Score::MIN;
        }
        let before = table.stranded(cpu_free, idle);
        let after = table.stranded(cpu_free - cpu_asked, idle - gpu_asked);
        Self::excess_score(table, before, after, gpu_asked)
    }

    /// The raw score of a placement of `gpu_asked` units that takes a node's measure from
    /// `before` to `after`: `⌊100 / (1 + e)⌋` of the excess (see the module documentation).
    fn excess_score(table: &ShapeTable, before: u128, after: u128, gpu_asked: i64) -> Score {
        let whole = u128::from(table.total_weight) * UNITS_PER_WHOLE as u128;
        let taken = gpu_asked.max(0) as u128 * u128::from(table.total_weight);
        let excess = (after + taken).saturating_sub(before);
        Score::new((100 * whole / (whole + excess)) as u32)
    }

    /// [`Fragmentation::excess_score`] of the CPU-fragment measure: the excess is in CPU units
    /// (placing `cpu_asked` lowers the measure by at most that), and [`CPUS_PER_GPU`] of them
    /// score as one GPU's.
    fn cpu_excess_score(table: &ShapeTable, before: u128, after: u128, cpu_asked: i64) -> Score {
        let weight = u128::from(table.total_weight);
        let whole = weight * UNITS_PER_WHOLE as u128;
        let taken = cpu_asked.max(0) as u128 * weight;
        let excess = (after + taken).saturating_sub(before) / CPUS_PER_GPU;
        Score::new((100 * whole / (whole + excess)) as u32)
    }

    /// The score of `request` (CPU and GPU units) on a node in `state`, whose measure is
    /// `before`.
    fn compute(
        &self,
        table: &ShapeTable,
        state: &NodeState,
        before: u128,
        request: (i64, i64),
    ) -> Score {
        let (cpu_asked, gpu_asked) = request;
        let mut free = state.free.clone();
        if !take(&mut free, gpu_asked) {
            return Score::MIN;
        }
        let cpu_after = state.cpu_free - cpu_asked;
        let after = table.measure(self.measure, cpu_after, state.model, &SortedFree::new(&free));
        if self.measure == Measure::CpuFragment {
            return Self::cpu_excess_score(table, before, after, cpu_asked);
        }
        Self::excess_score(table, before, after, gpu_asked)
    }
}

/// CPUs of excess that score as one GPU's in the CPU-fragment scorer: what a GPU comes with on
/// common 8-GPU servers of 128 CPUs (8 and 16 measured alike: `docs/placement-log.md`).
const CPUS_PER_GPU: u128 = 16;

/// `(cpu units, weight)` pairs as steps: sorted by quantity, equal quantities merged, each with the
/// weight of every pair asking at most its quantity.
fn cumulative(mut steps: Vec<(i64, u64)>) -> Vec<(i64, u64)> {
    steps.sort_unstable();
    let mut merged: Vec<(i64, u64)> = Vec::with_capacity(steps.len());
    for (cpu, weight) in steps {
        match merged.last_mut() {
            Some(last) if last.0 == cpu => last.1 += weight,
            _ => merged.push((cpu, merged.last().map_or(0, |l| l.1) + weight)),
        }
    }
    merged
}

pub mod learn;
mod memo;
#[cfg(test)]
mod tests;
