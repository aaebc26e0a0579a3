//! Keeping whole the nodes the largest requests need: while few nodes are left that could take
//! the largest shapes seen, other requests go elsewhere (the default profile's preference on
//! clusters with GPUs, `keep_large_hosts`).
//!
//! Assumptions: the requests seen so far are a fair sample of those to come (as for the learned
//! shapes, [`learn`](super::fragmentation::learn)); the largest requests (the most whole GPUs)
//! are rare by count but fit only nodes with that many GPUs wholly free and enough CPU, and
//! once small requests have broken those nodes the large ones fail although the cluster has
//! room. Weights by frequency in the fragmentation measures let a rare shape lose such nodes.
//!
//! Rules: the *large shapes* are the learned shapes asking the most whole GPUs (`g`, at least
//! 2), one per CPU quantity `c` they ask. For each, its *hosts* are the alive nodes with `g` GPUs
//! wholly free and `c` CPU free now, and the requests *expected* are those counted (`pods`) of
//! that shape or of `g` GPUs and more CPU, times the cluster's idle GPU, divided by
//! the GPU all requests counted asked for: the share of what is still to come that those
//! requests are, if the cluster fills at the pace seen. A shape is *kept* while its hosts are
//! no more than [`MARGIN`] times the requests expected ([`MARGIN_CPU_SHORT`] while the
//! cluster's CPU runs out before its GPUs). A request that is not itself of a kept shape (`g`
//! GPUs and at least `c` CPU) prefers the nodes that can take no kept shape: a tier, so it goes
//! to such a node only when no other node can take it.
//!
//! Behaviour: early on, such nodes are many and nothing is kept; as the cluster fills, the
//! nodes the large requests need stop taking small ones once they are about as few as those
//! requests. Accelerator types are not looked at (the largest requests measured accept any).
//! Measurements: `docs/placement-log.md`.
//!
//! Cost: the nodes are counted once and then kept up to date from the cluster's change feed
//! ([`crate::feed`]): per decision, the nodes changed since the last one (usually one); per
//! node ranked, one comparison of the node's idle GPU, and a pass over its GPUs when that is
//! enough for a kept shape. Counted again in full when the large shapes change (a learned
//! rebuild, at most every
//! [`REBUILD_EVERY`](super::fragmentation::learn::REBUILD_EVERY) requests) or the feed cannot say what
//! changed.

use std::cell::RefCell;

use super::super::stage::{DecisionContext, Preference};
use super::cpu_short::CpuShort;
use super::fragmentation::learn::Learner;
use super::has_gpu_nodes;
use super::per_node::PerNode;
use crate::cluster::Cluster;
use crate::node::{Node, NodeState};
use crate::quantity::UNITS_PER_WHOLE;
use crate::resource::ResourceId;

/// A shape is kept while the nodes that can take it are no more than this many times the
/// requests expected: at 1 some dips below best fit stayed, above 2 others grew
/// (`docs/placement-log.md`).
pub const MARGIN: u64 = 2;

/// [`MARGIN`] while the cluster's CPU runs out before its GPUs
/// ([`Clusters::CpuShort`](crate::pipeline::profile::Clusters::CpuShort)): CPU-only and CPU-heavy requests then
/// take the CPU those nodes need, so one placement can cost a node; wider only then, since on
/// every cluster it cost placement quality (`docs/placement-log.md`).
pub const MARGIN_CPU_SHORT: u64 = 3;

/// The preference. See the module documentation.
#[derive(Debug, Default)]
pub struct LargeHosts {
    state: RefCell<State>,
    /// Whether the cluster's CPU runs out before its GPUs: the margin is then
    /// [`MARGIN_CPU_SHORT`].
    short: CpuShort,
}

impl Clone for LargeHosts {
    /// A preference that learns and counts again from nothing.
    fn clone(&self) -> Self {
        LargeHosts::default()
    }
}

#[derive(Debug, Default)]
struct State {
    learner: Learner,
    /// The learner's generation the shapes were taken from.
    generation: Option<u64>,
    /// The large shapes, by CPU ascending.
    shapes: Vec<LargeShape>,
    /// GPU units asked by every request counted, each times its count.
    asked: u128,
    /// Per node slot, what it counted.
    nodes: PerNode<Counted>,
    /// Idle GPU units of the alive nodes.
    idle: i64,
    /// The kept shapes this decision's request is not one of: `(GPUs, CPU units)`.
    kept: Vec<(u32, i64)>,
}

#[derive(Clone, Copy, Debug)]
struct LargeShape {
    gpus: u32,
    cpu: i64,
    /// Requests counted of `gpus` GPUs and at least `cpu`.
    pods: u64,
    /// Alive nodes with `gpus` GPUs wholly free and `cpu` free.
    hosts: u64,
}

/// What one node slot counts for: GPUs wholly free, CPU free, idle GPU.
#[derive(Clone, Copy, Debug, Default)]
struct Counted {
    whole: u32,
    cpu: i64,
    idle: i64,
}

impl Counted {
    /// An alive node as it is now; any other slot counts for nothing.
    fn of(node: Option<&Node>) -> Counted {
        let Some(node) = node.filter(|n| n.state() == NodeState::Alive) else {
            return Counted::default();
        };
        let available = node.available();
        Counted {
            whole: whole_free(node),
            cpu: available.get(ResourceId::CPU).units(),
            idle: available.get(ResourceId::GPU).units(),
        }
    }

    fn hosts(&self, shape: &LargeShape) -> bool {
        self.whole >= shape.gpus && self.cpu >= shape.cpu
    }
}

/// The node's GPUs wholly free.
fn whole_free(node: &Node) -> u32 {
    node.pool(ResourceId::GPU).map_or(0, |pool| {
        pool.free_per_instance().filter(|f| f.units() >= UNITS_PER_WHOLE).count() as u32
    })
}

impl State {
    /// The large shapes from the learner's last rebuild; the nodes counted again when they
    /// are other shapes than before.
    fn take_shapes(&mut self) {
        let built = self.learner.built();
        self.asked =
            built.iter().map(|s| s.gpu.units().max(0) as u128 * u128::from(s.weight)).sum();
        let largest = built
            .iter()
            .map(|s| s.gpu.units())
            .filter(|&g| g >= 2 * UNITS_PER_WHOLE)
            .max()
            .map_or(0, |g| (g / UNITS_PER_WHOLE) as u32);
        let mut shapes: Vec<LargeShape> = Vec::new();
        for shape in built.iter().filter(|s| largest > 0 && s.gpu.units() >= 2 * UNITS_PER_WHOLE) {
            if (shape.gpu.units() / UNITS_PER_WHOLE) as u32 != largest {
                continue;
            }
            let cpu = shape.cpu.units();
            match shapes.iter_mut().find(|s| s.cpu == cpu) {
                Some(s) => s.pods += u64::from(shape.weight),
                None => shapes.push(LargeShape {
                    gpus: largest,
                    cpu,
                    pods: u64::from(shape.weight),
                    hosts: 0,
                }),
            }
        }
        shapes.sort_unstable_by_key(|s| s.cpu);
        // Each counts the requests of more CPU too: a node kept for them is kept for it.
        let mut more = 0;
        for shape in shapes.iter_mut().rev() {
            more += shape.pods;
            shape.pods = more;
        }
        let same = shapes.len() == self.shapes.len()
            && shapes.iter().zip(&self.shapes).all(|(a, b)| (a.gpus, a.cpu) == (b.gpus, b.cpu));
        if same {
            for (shape, before) in shapes.iter_mut().zip(&self.shapes) {
                shape.hosts = before.hosts;
            }
        } else {
            for shape in &mut shapes {
                shape.hosts = self.nodes.values().filter(|n| n.hosts(shape)).count() as u64;
            }
        }
        self.shapes = shapes;
    }

    /// Brings the counts up to date with the cluster.
    fn follow(&mut self, cluster: &Cluster) {
        let (idle, shapes) = (&mut self.idle, &mut self.shapes);
        self.nodes.follow(cluster, Counted::of, |before, now| {
            *idle += now.idle - before.idle;
            for shape in shapes.iter_mut() {
                shape.hosts =
                    shape.hosts + u64::from(now.hosts(shape)) - u64::from(before.hosts(shape));
            }
        });
    }
}

impl Preference for LargeHosts {
    fn name(&self) -> &'static str {
        "keep_large_hosts"
    }

    fn applies(&self, cx: &DecisionContext<'_>) -> bool {
        if !has_gpu_nodes(cx.cluster) {
            return false;
        }
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        state.learner.observe(cx.request);
        if state.generation != Some(state.learner.generation()) {
            state.generation = Some(state.learner.generation());
            state.take_shapes();
        }
        state.kept.clear();
        if state.shapes.is_empty() || state.asked == 0 {
            return false;
        }
        state.follow(cx.cluster);
        let asked = cx.request.resources();
        let (gpu, cpu) = (asked.get(ResourceId::GPU).units(), asked.get(ResourceId::CPU).units());
        let idle = state.idle.max(0) as u128;
        let margin = if self.short.holds(cx.cluster) { MARGIN_CPU_SHORT } else { MARGIN };
        for shape in &state.shapes {
            let member = gpu >= i64::from(shape.gpus) * UNITS_PER_WHOLE && cpu >= shape.cpu;
            // hosts ≤ MARGIN × pods × idle / asked, in integers.
            let scarce = u128::from(shape.hosts) * state.asked
                <= u128::from(margin) * u128::from(shape.pods) * idle;
            if scarce && !member {
                state.kept.push((shape.gpus, shape.cpu));
            }
        }
        !state.kept.is_empty()
    }

    fn prefers(&self, _cx: &DecisionContext<'_>, node: &Node) -> bool {
        let state = self.state.borrow();
        let available = node.available();
        let (idle, cpu) =
            (available.get(ResourceId::GPU).units(), available.get(ResourceId::CPU).units());
        let mut whole = None;
        for &(gpus, wanted) in &state.kept {
            if idle < i64::from(gpus) * UNITS_PER_WHOLE || cpu < wanted {
                continue;
            }
            if *whole.get_or_insert_with(|| whole_free(node)) >= gpus {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests;
