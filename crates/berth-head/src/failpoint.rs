//! Named places where a test may crash or stall the head process: the crash tests
//! (`berth-cli/tests/crash.rs`) kill a real head at each and check what survives.
//!
//! Compiled in only with the `failpoints` feature (the CLI's tests turn it on; a user's build
//! has none, and [`reach`] is then an empty inline function). With it, the head reads
//! `BERTH_FAILPOINTS="NAME=ACTIONS;…"` at start, ACTIONS in fail-rs's syntax (`20*off->return(kill)`:
//! pass 20 times, then act). The actions a place understands are `return(kill:MS)`, a SIGKILL of
//! the whole process there (no destructor, no flush, no lease release: a crash) after MS
//! milliseconds in which the rest of the process runs on (so that whatever it would wrongly
//! send before that place, an answer before its commit, reaches the client first), and
//! `return(stall:MS)`, a wait of MS milliseconds there, logged first, so a test can break
//! something (the store) while the head stands at that place.

use std::time::Duration;

/// In the committer, before a cycle's writes go to the store: nothing of the cycle is durable
/// and nothing of it was answered.
pub(crate) const COMMIT_BEFORE: &str = "commit-before";
/// In the committer, after the store acknowledged a cycle's writes and before its answers and
/// assignments go out: durable, unanswered.
pub(crate) const COMMIT_AFTER: &str = "commit-after";
/// In the owner, halfway through the items of a batch creation: the batch half applied in
/// memory, nothing of it committed.
pub(crate) const BATCH_MID: &str = "batch-mid";

/// Reads `BERTH_FAILPOINTS` (with the `failpoints` feature; nothing without it). A malformed
/// entry is logged and ignored.
pub(crate) fn configure() {
    #[cfg(feature = "failpoints")]
    if let Ok(spec) = std::env::var("BERTH_FAILPOINTS") {
        for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let configured = entry
                .split_once('=')
                .ok_or_else(|| "expected NAME=ACTIONS".to_string())
                .and_then(|(name, actions)| fail::cfg(name.trim(), actions.trim()));
            match configured {
                Ok(()) => tracing::warn!(failpoint = entry, "BERTH_FAILPOINTS: armed"),
                Err(err) => {
                    tracing::error!(failpoint = entry, error = %err, "BERTH_FAILPOINTS: ignored")
                }
            }
        }
    }
}

/// Passes the place `name`: kills the process there when a test armed it so, or returns how
/// long the caller is to stall there. `None` when nothing is armed (always, without the
/// feature).
#[inline]
pub(crate) fn reach(name: &'static str) -> Option<Duration> {
    #[cfg(feature = "failpoints")]
    if let Some(action) = fail::eval(name, |arg| arg.unwrap_or_default()) {
        if let Some(ms) = action.strip_prefix("stall:").and_then(|ms| ms.parse().ok()) {
            tracing::warn!(failpoint = name, ms, "failpoint: stalling here");
            return Some(Duration::from_millis(ms));
        }
        if let Some(delay) = action.strip_prefix("kill").map(|ms| ms.trim_start_matches(':')) {
            // The rest of the process runs meanwhile: what it would send early goes out.
            let delay = Duration::from_millis(delay.parse().unwrap_or(0));
            tracing::warn!(failpoint = name, ?delay, "failpoint: killing the head (SIGKILL)");
            std::thread::sleep(delay);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        tracing::error!(failpoint = name, action, "failpoint: unknown action (kill:MS, stall:MS)");
    }
    let _ = name;
    None
}
