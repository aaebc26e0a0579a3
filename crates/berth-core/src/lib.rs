//! # berth-core: where things go
//!
//! The resource model and every scheduling decision of Berth, with no I/O, no async, no clocks
//! and no global state; randomness comes in as a seeded RNG. Everything here can be tested
//! exhaustively and benchmarked alone.
//!
//! ## Layout
//!
//! - [`quantity`]: [`Quantity`], fixed point in steps of 0.0001, exact, strict parsing.
//! - [`resource`]: resource names interned to [`ResourceId`]s by a per-cluster
//!   [`ResourceRegistry`]; [`ResourceSet`], a sparse sorted set of quantities.
//! - [`instances`]: per-instance accounting of unit-instance resources (GPUs): whole
//!   instances or a fraction inside one, with instance IDs for `CUDA_VISIBLE_DEVICES`.
//! - [`node`]: a node and its ledger (`total`, `available`, instance pools).
//! - [`cluster`]: nodes by dense [`NodeIndex`], state sets as [`NodeSet`] bitmaps, and the
//!   ledger operations (reserve, release, capacity updates) returning [`Allocation`]s.
//! - [`request`]: a [`Request`] (resources + [`Strategy`]).
//! - [`pipeline`]: the [`Scheduler`]: candidates → filters → preferences/scorers → select →
//!   reserve, written once; a [`Decision`] is placed, pending or infeasible. Every scorer and
//!   preference is in [`pipeline::scorers`], every filter in [`pipeline::filters`]. A
//!   [`Profile`] (default: hybrid ×1; `berth-api` reads seed 001's profile files and the
//!   placement quality scorers, best fit and fragmentation) chooses the scorers, the extra
//!   filters and how the best nodes are picked.
//! - [`diagnosis`]: the reasons filters give and the per-reason counts users read.
//! - [`pending`]: the [`PendingQueue`] the head drives when the cluster changes.
//!
//! ## Key decisions
//!
//! - Quantities are integers of 1/10000: sums are exact and "release restores what reserve
//!   took" holds to the bit. Input with more precision is rejected, not rounded.
//! - Node sets are bitmaps over dense indices, so narrowing candidates is set algebra.
//! - Filters run static (totals) before dynamic (free now): a node's first failure then says
//!   whether it could ever take the request, which is exactly pending vs infeasible.
//! - Every reason a user sees is recorded by the stage that decided it; `berth explain` and
//!   "pending because" read the same records.

//! ## Example
//!
//! ```
//! use berth_core::{
//!     Cluster, Decision, NodeId, Quantity, Request, ResourceId, ResourceRegistry, ResourceSet,
//!     Scheduler, SchedulerConfig, Strategy,
//! };
//! use rand::SeedableRng;
//!
//! let mut cluster = Cluster::new(ResourceRegistry::default());
//! let total: ResourceSet = [
//!     (ResourceId::CPU, Quantity::from_whole(8)),
//!     (ResourceId::GPU, Quantity::from_whole(2)),
//! ]
//! .into_iter()
//! .collect();
//! cluster.add_node(NodeId::new("gpu-1").unwrap(), total).unwrap();
//!
//! let half_gpu: ResourceSet = [(ResourceId::GPU, Quantity::parse("0.5").unwrap())].into_iter().collect();
//! let request = Request::new(half_gpu, Strategy::Default, cluster.registry()).unwrap();
//! let mut scheduler = Scheduler::new(SchedulerConfig::default());
//! let mut rng = rand::rngs::StdRng::seed_from_u64(42);
//! match scheduler.place(&mut cluster, &request, &mut rng) {
//!     Decision::Placed(allocation) => {
//!         assert_eq!(allocation.instance_ids(ResourceId::GPU), [0]);
//!         cluster.release(&allocation);
//!     }
//!     other => panic!("expected a placement, got {other:?}"),
//! }
//! ```

#![warn(missing_docs)]

pub mod actor_index;
pub mod actors;
pub mod cluster;
pub mod diagnosis;
pub mod feed;
pub mod hints;
pub mod instances;
pub mod label_index;
pub mod labels;
pub mod node;
pub mod nodeset;
pub mod pending;
pub mod pipeline;
pub mod placement_group;
pub mod quantity;
pub mod request;
pub mod resource;
pub mod selector;
pub mod taints;
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;

pub use cluster::{Allocation, Cluster, ClusterError};
pub use diagnosis::{AttemptDiagnosis, AttemptKind, Diagnosis, Reason, ReasonKind};
pub use instances::InstanceId;
pub use node::{Node, NodeError, NodeId, NodeIndex, NodeState};
pub use nodeset::NodeSet;
pub use pending::{group_may_help, PendingQueue, Trigger, Waiting};
pub use pipeline::profile::Profile;
pub use pipeline::{ConfigError, Decision, Scheduler, SchedulerConfig};
pub use quantity::{Quantity, QuantityError};
pub use request::{NodeAffinity, Request, RequestError, Strategy};
pub use resource::{
    ResourceId, ResourceNameError, ResourceRegistry, ResourceSet, UnknownResources,
};
