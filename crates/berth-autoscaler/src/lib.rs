//! # berth-autoscaler: which machines to add, which to remove
//!
//! The planning half of Berth's autoscaler, with no I/O and no clocks: the head feeds it the
//! cluster, what waits and the nodes it is launching, and acts on the answer through a
//! provider.
//!
//! - [`plan`](mod@plan): scale-up. Every waiting request and placement group is placed, in order, on a
//!   copy of the cluster by the scheduler itself (the same [`Scheduler`](berth_core::Scheduler)
//!   and profile the head decides with); what does not fit is tried on a new node of each
//!   type, and the best type that takes it is added to the copy. So planning and placing can
//!   never disagree: a type is launched for a request only if the scheduler would put the
//!   request on it, and every reason a type is refused is the reason `berth explain` gives
//!   for a node of that type.
//! - [`scale_down`](mod@scale_down): which idle autoscaled nodes to remove (past `idle_timeout_s`, never below a
//!   type's `min_nodes`).
//!
//! Node types and limits come from the autoscaler file
//! ([`berth_api::spec::node_types`]).

#![warn(missing_docs)]

pub mod plan;
pub mod scale_down;

pub use plan::{answer, plan, Fleet, Launch, Plan, Verdict, Want};
pub use scale_down::{scale_down, IdleNode};
