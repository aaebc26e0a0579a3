//! The fragmentation scorers' memo: each node's state by its version, and scores by state.
//!
//! Assumptions: a decision changes one node, so nearly every node a decision visits is
//! unchanged since its last visit; a cluster's nodes come in a few types and many are in the
//! same state at once (idle ones especially); requests come in a few shapes, though more than a
//! handful (a production trace asks for dozens of CPU quantities); the learned shapes, so the
//! table, change every few hundred requests.
//!
//! Rules:
//! - a node's state (free CPU, accelerator type, the multiset of its GPUs' free quantities) is
//!   interned: equal states get one ID, found by hash and compared in full;
//! - per node slot, 16 bytes: the node's version when its state was last read, and the
//!   state's ID. While the version holds, so does the ID: a state does not depend on the
//!   table, but for its type's index among the table's types, and a change of the types
//!   forgets every ID (as does forgetting the interned states, below);
//! - per state, its measure under the current table, once a score needed it;
//! - scores by request shape, then state, under the current table: per shape a vector indexed
//!   by state ID, for the shapes scored last (as many as [`SCORES_BYTES`] allow, at least
//!   [`SHAPES_MIN`]; the least recently used goes); a new table forgets them. Each score
//!   carries the memo's generation, which forgetting bumps, so that forgetting writes nothing
//!   (a pass over the vectors once in [`GENERATIONS`]): at 100,000 nodes a vector is 800 KB,
//!   and emptying them at every new table (every 256 requests) cost 6% of the decisions per
//!   second;
//! - interned states are forgotten, and every ID with them, once there are more than twice as
//!   many as node slots (plus [`STATES_SLACK`]): nodes leave states behind as they change, and
//!   forgetting costs each node one more reading of its state.
//!
//! Behaviour: exactly the scores computed without the memo. A visit of an unchanged node reads
//! its 16-byte entry (decisions visit nodes in slot order, four to a cache line) and one entry
//! of its decision's vector; a score is computed once per state, request shape and table
//! (again only after its shape lost its vector to another), whichever node is in that state.
//!
//! Why a vector per shape, not one map by (state, shape): a decision asks for one shape, so
//! its vector (4 bytes per state: 14 KB on a cluster of 1,213 nodes) stays in the first-level
//! cache through the decision, where the map (up to 65,536 scores, 1 MB) missed it on most visits:
//! a tenth of a replay's time went to that one load (`perf annotate`).
//!
//! Why this layout: the memo it replaces kept, per node and scorer, the state, its measure and
//! the last four scores (320 bytes). At 100,000 nodes a decision's nodes were last visited
//! hundreds of decisions before, out of every cache: callgrind counted the same instructions
//! per decision as at 1,000 nodes, and 5 first-level cache misses per score, which made a
//! decision three times slower there.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};
use smallvec::SmallVec;

use crate::node::{Node, Version};
use crate::pipeline::stage::Score;

/// What a node's measure depends on, besides the table: its free CPU, its type's index among
/// the table's types, and its GPUs' free units, ascending (which GPU has which quantity does not
/// change a measure or a score).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct NodeState {
    pub cpu_free: i64,
    pub model: Option<u16>,
    pub free: SmallVec<[i64; 8]>,
}

/// A request as the scorers read it: CPU and GPU units asked.
pub(super) type Asked = (i64, i64);

/// What the shapes' vectors may take together, in bytes (4 per state and shape).
const SCORES_BYTES: usize = 4 << 20;
/// Shapes whose vectors are kept, whatever their size.
const SHAPES_MIN: usize = 4;
/// Request shapes numbered at most; then the numbering starts again, and the scores go.
const ASKED_MAX: usize = 4_096;
/// Interned states allowed beyond twice the node slots before all are forgotten.
const STATES_SLACK: usize = 1_024;

/// A node slot's entry: the node's version when its state was read, and the state's ID.
#[derive(Clone, Copy, Debug)]
struct Seen {
    version: Version,
    state: u32,
    /// The [`Memos::epoch`] the ID belongs to; 0 (never an epoch) for a slot not seen.
    epoch: u32,
}

const UNSEEN: Seen = Seen { version: Version::NONE, state: 0, epoch: 0 };

/// The scores of one request shape, by state ID; `used` orders the shapes by last use.
#[derive(Debug)]
struct ShapeScores {
    asked: u32,
    used: u64,
    /// Entries as [`GENERATION_SHIFT`] describes.
    by_state: Vec<u32>,
}

/// A score's entry: its micros (at most [`Score::MAX`], 10⁸, under 2²⁷) in the low bits, the
/// generation it was computed in above them. Generation 0 is never current: a new entry.
const GENERATION_SHIFT: u32 = 27;
const MICROS_MASK: u32 = (1 << GENERATION_SHIFT) - 1;
/// Generations before they start again (and the vectors are emptied).
const GENERATIONS: u32 = 1 << (32 - GENERATION_SHIFT);
const _: () = assert!(Score::MAX.micros() <= MICROS_MASK);

/// An interned state, and its measure under the table of `before.0`.
#[derive(Debug)]
struct Interned {
    state: NodeState,
    hash: u64,
    before: Option<(u64, u128)>,
}

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Memos {
    nodes: Vec<Seen>,
    states: Vec<Interned>,
    /// IDs into `states`, by the state's hash.
    by_state: HashTable<u32>,
    /// Numbers of the request shapes seen; the last one looked up, as a decision asks for one
    /// shape on every node it scores.
    asked: FxHashMap<Asked, u32>,
    last_asked: Option<(Asked, u32)>,
    /// By request shape, under the table of `stamp`; the last one used first.
    scores: Vec<ShapeScores>,
    /// Counts lookups, to order `scores` by last use.
    uses: u64,
    /// The generation of the scores in force, 1 to [`GENERATIONS`] − 1.
    generation: u32,
    /// The table's stamp (see `Ready::stamp`).
    stamp: u64,
    /// The stamp since which the table's types are the same, in the same order.
    models_since: u64,
    /// Bumped whenever the state IDs are forgotten; starts at 1.
    epoch: u32,
    /// States allowed beyond twice the node slots.
    slack: usize,
    /// Request shapes numbered at most.
    asked_max: usize,
    /// Request shapes whose scores are kept at most; `None`: as [`SCORES_BYTES`] allow.
    shapes_kept: Option<usize>,
}

impl Default for Memos {
    fn default() -> Self {
        Memos::with_limits(STATES_SLACK, ASKED_MAX, None)
    }
}

impl Memos {
    /// A memo that forgets its states beyond twice the node slots plus `slack`, numbers
    /// `asked_max` request shapes at most, and keeps the scores of `shapes_kept` of them (of as
    /// many as [`SCORES_BYTES`] allow when `None`); tests set them low, to see forgetting at
    /// work.
    pub fn with_limits(slack: usize, asked_max: usize, shapes_kept: Option<usize>) -> Memos {
        Memos {
            nodes: Vec::new(),
            states: Vec::new(),
            by_state: HashTable::new(),
            asked: FxHashMap::default(),
            last_asked: None,
            scores: Vec::new(),
            uses: 0,
            generation: 1,
            stamp: 0,
            models_since: 0,
            epoch: 1,
            slack,
            asked_max,
            shapes_kept,
        }
    }

    /// Sizes the memo for `slots` node slots (once per attempt, not node by node).
    pub fn reserve_slots(&mut self, slots: usize) {
        if self.nodes.len() < slots {
            self.nodes.resize(slots, UNSEEN);
        }
    }

    /// The score of `asked` on `node` under the table of `stamp` (whose types are those of
    /// `models_since`'s table): from the memo, or `compute(state, measure of the state)`.
    /// `state_of` reads a node's state; `measure` measures one.
    pub fn score(
        &mut self,
        (stamp, models_since): (u64, u64),
        node: &Node,
        asked: Asked,
        state_of: impl FnOnce(&Node) -> NodeState,
        measure: impl FnOnce(&NodeState) -> u128,
        compute: impl FnOnce(&NodeState, u128) -> Score,
    ) -> Score {
        if self.models_since != models_since {
            // The types' indices changed: every state holds an index of the old table.
            self.forget_states();
            self.models_since = models_since;
        }
        if self.stamp != stamp {
            self.forget_scores();
            self.stamp = stamp;
        }
        let asked_number = self.number(asked);
        let state = self.state_id(node, state_of);
        let generation = self.generation;
        let shape = self.shape_scores(asked_number);
        if let Some(&entry) = shape.by_state.get(state as usize) {
            if entry >> GENERATION_SHIFT == generation {
                return Score::from_micros(entry & MICROS_MASK);
            }
        }
        let interned = &mut self.states[state as usize];
        let before = match interned.before {
            Some((at, before)) if at == stamp => before,
            _ => {
                let before = measure(&interned.state);
                interned.before = Some((stamp, before));
                before
            }
        };
        let score = compute(&interned.state, before);
        let by_state = &mut self.scores[0].by_state;
        if by_state.len() <= state as usize {
            by_state.resize(state as usize + 1, 0);
        }
        by_state[state as usize] = score.micros() | generation << GENERATION_SHIFT;
        score
    }

    /// Forgets every score: they belong to a generation no longer current.
    fn forget_scores(&mut self) {
        self.generation += 1;
        if self.generation == GENERATIONS {
            self.generation = 1;
            for shape in &mut self.scores {
                shape.by_state.fill(0);
            }
        }
    }

    /// The scores of request shape `asked`, moved to the front of `scores` (a decision asks
    /// for one shape throughout, so this is nearly always the front already).
    #[inline]
    fn shape_scores(&mut self, asked: u32) -> &ShapeScores {
        if self.scores.first().is_none_or(|first| first.asked != asked) {
            self.uses += 1;
            let at = match self.scores.iter().position(|s| s.asked == asked) {
                Some(at) => at,
                None => {
                    let kept = self.shapes_kept.unwrap_or_else(|| {
                        let states = 2 * self.nodes.len() + self.slack;
                        (SCORES_BYTES / (4 * states).max(1)).max(SHAPES_MIN)
                    });
                    if self.scores.len() >= kept.max(1) {
                        // The least recently used shape's vector, emptied, serves this one.
                        let oldest = (0..self.scores.len())
                            .min_by_key(|&i| self.scores[i].used)
                            .expect("a shape is kept at least");
                        self.scores[oldest].asked = asked;
                        self.scores[oldest].by_state.fill(0);
                        oldest
                    } else {
                        self.scores.push(ShapeScores { asked, used: 0, by_state: Vec::new() });
                        self.scores.len() - 1
                    }
                }
            };
            self.scores[at].used = self.uses;
            self.scores.swap(0, at);
        }
        &self.scores[0]
    }

    /// The number of the request shape `asked`.
    fn number(&mut self, asked: Asked) -> u32 {
        if let Some((last, number)) = self.last_asked {
            if last == asked {
                return number;
            }
        }
        if self.asked.len() >= self.asked_max && !self.asked.contains_key(&asked) {
            self.asked.clear();
            self.forget_scores();
        }
        let next = self.asked.len() as u32;
        let number = *self.asked.entry(asked).or_insert(next);
        self.last_asked = Some((asked, number));
        number
    }

    /// The ID of `node`'s state: from its slot while its version holds, else read and interned.
    fn state_id(&mut self, node: &Node, state_of: impl FnOnce(&Node) -> NodeState) -> u32 {
        let slot = node.index().0 as usize;
        if self.nodes.len() <= slot {
            self.nodes.resize(slot + 1, UNSEEN);
        }
        let seen = self.nodes[slot];
        let version = node.version();
        if seen.epoch == self.epoch && seen.version == version {
            return seen.state;
        }
        if self.states.len() >= 2 * self.nodes.len() + self.slack {
            self.forget_states();
        }
        let state = self.intern(state_of(node));
        self.nodes[slot] = Seen { version, state, epoch: self.epoch };
        state
    }

    fn intern(&mut self, state: NodeState) -> u32 {
        let hash = FxBuildHasher.hash_one(&state);
        let states = &self.states;
        if let Some(&id) = self.by_state.find(hash, |&id| states[id as usize].state == state) {
            return id;
        }
        let id = self.states.len() as u32;
        self.states.push(Interned { state, hash, before: None });
        let states = &self.states;
        self.by_state.insert_unique(hash, id, |&id| states[id as usize].hash);
        id
    }

    /// Forgets every interned state, and so every slot's ID and every score.
    fn forget_states(&mut self) {
        self.states.clear();
        self.by_state.clear();
        self.forget_scores();
        // A bump follows over a thousand states interned (the slack), or a change of the
        // table's types: u32 does not wrap in practice.
        self.epoch += 1;
    }

    /// States interned now.
    #[cfg(test)]
    pub fn states(&self) -> usize {
        self.states.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, index};

    /// A score is never taken from an earlier generation, also once the generations start
    /// again: node `a` is scored in the first generation only, `b` in every one, until the
    /// first generation is current again.
    #[test]
    fn scores_of_an_earlier_generation_never_come_back() {
        let c = cluster(&[("a", "CPU=8,GPU=2"), ("b", "CPU=4,GPU=1")]);
        let (a, b) = (c.node(index(&c, "a")).unwrap(), c.node(index(&c, "b")).unwrap());
        let mut memo = Memos::default();
        let score = |memo: &mut Memos, node: &Node, points: u32| {
            let state = |node: &Node| NodeState {
                cpu_free: node.available().get(crate::resource::ResourceId::CPU).units(),
                model: None,
                free: SmallVec::new(),
            };
            memo.score((1, 0), node, (1, 0), state, |_| 0, |_, _| Score::new(points))
        };
        assert_eq!(score(&mut memo, a, 10), Score::new(10));
        assert_eq!(score(&mut memo, a, 11), Score::new(10), "kept within the generation");
        let first = memo.generation;
        for round in 0.. {
            memo.forget_scores();
            let points = 20 + round % 50;
            assert_eq!(score(&mut memo, b, points), Score::new(points), "round {round}");
            assert_eq!(score(&mut memo, b, 99), Score::new(points), "round {round}");
            if memo.generation == first {
                assert_eq!(round + 1, GENERATIONS - 1, "every generation but 0 in turn");
                break;
            }
        }
        assert_eq!(score(&mut memo, a, 12), Score::new(12), "a's first score is forgotten");
    }
}
