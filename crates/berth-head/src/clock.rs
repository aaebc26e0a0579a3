//! The head's clocks: the wall clock for what it shows and writes, a monotonic one for what
//! it judges by elapsed time (heartbeats, job leases).

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Milliseconds on a clock that never jumps (from a point early in the process; never 0).
///
/// Nodes and jobs are declared dead by how long they were silent, and a node stops its work
/// when its lease runs out by its own clock: a step of the wall clock (an NTP correction, an
/// operator's `date`) must not make the head declare a node dead before its lease ran out.
pub(crate) fn monotonic_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}
