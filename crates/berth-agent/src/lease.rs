//! The node's lease: how long a node may keep its work running without word from the head, and
//! the keeper that stops the work when the lease runs out, whatever became of the agent.
//!
//! **Why.** The head declares a node dead after `T` (its `--heartbeat-timeout`) without a
//! heartbeat, and restarts the node's actors and retries its tasks elsewhere. If the node's
//! processes still ran then (its agent killed, stopped, or cut off from the head), the cluster
//! would run two attempts of one actor. So a node stops its own work first.
//!
//! **The bound.** Each heartbeat carries the agent's clock when it was made ([`clock_ms`]:
//! `CLOCK_BOOTTIME`, which counts a suspended machine's sleep too), and the head's reply echoes
//! it. A reply for a beat made at `t` proves the head heard the node at `t` or later, so the
//! head cannot declare the node dead before `t + T` on its own clock (it measures silence from
//! the last beat it received, on a clock that never jumps). The node's lease therefore runs to
//! `t + T - margin` on the node's clock, [`margin`] being `T / 5` within 200 ms to 2 s. When it
//! runs out, every process the runner's directory records is killed (SIGKILL, process group
//! and all). The margin covers the keeper's poll ([`POLL`]) and its turn on a busy CPU; clocks
//! that drift apart by less than the margin over `T` keep the promise: the old attempt is gone
//! before the head can have started a new one.
//!
//! **The lease file** (`work_dir/lease`): one line of text, rewritten in place under an
//! exclusive `flock` by the agent at every renewal ([`LeaseFile`]), read under a shared one by
//! the keeper. It says when the last acknowledged beat was made, when the lease runs out, the
//! head's timeout, and which agent wrote it (a random number per runner).
//!
//! **The keeper** (`berth keeper DIR`, [`keep`]): a small process the runner starts beside the
//! agent, in its own process group, so that it outlives an agent killed with SIGKILL and is
//! not stopped with one stopped with SIGSTOP. It polls the lease file every [`POLL`] and
//! kills the recorded processes once the lease ran out (with a line in each one's stderr log
//! saying why). Its stdin is a pipe from its agent: end of file means the agent is gone. A
//! keeper whose agent is gone stays while processes it guards may still run (the adoption
//! window: a new agent on the directory adopts them and renews the lease), and ends when none
//! is left, or when a newer agent wrote the lease (that agent's own keeper, waiting on the
//! keepers' lock, takes over).

use std::time::Duration;

/// How often the keeper looks at the lease.
pub const POLL: Duration = Duration::from_millis(50);
/// The lease file, in the runner's directory.
pub const LEASE_FILE: &str = "lease";
/// The keepers' lock: held by the keeper guarding the directory.
pub const KEEPER_LOCK: &str = "keeper.lock";
/// The keeper's log (its stdout and stderr), in the runner's directory.
pub const KEEPER_LOG: &str = "keeper.log";

/// The node's clock, in milliseconds: `CLOCK_BOOTTIME` on Linux (monotonic, and counting the
/// time the machine was suspended), the monotonic clock elsewhere.
pub fn clock_ms() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let id = Some(nix::time::ClockId::CLOCK_BOOTTIME);
    #[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
    let id = Some(nix::time::ClockId::CLOCK_MONOTONIC);
    #[cfg(not(unix))]
    let id: Option<()> = None;
    #[cfg(unix)]
    if let Some(Ok(t)) = id.map(nix::time::clock_gettime) {
        return (t.tv_sec() as u64) * 1000 + (t.tv_nsec() as u64) / 1_000_000;
    }
    let _ = id;
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
}

/// How long before the head could declare the node dead its lease runs out: `timeout / 5`,
/// at least 200 ms and at most 2 s (and at most half the timeout: a lease for very short
/// timeouts).
pub fn margin(timeout: Duration) -> Duration {
    (timeout / 5).clamp(Duration::from_millis(200), Duration::from_secs(2)).min(timeout / 2)
}

/// What the lease file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When the last beat the head acknowledged was made ([`clock_ms`]).
    pub acked_ms: u64,
    /// When the lease runs out ([`clock_ms`]): the work must be gone by then.
    pub expires_ms: u64,
    /// The head's heartbeat timeout the lease was computed from, in ms.
    pub timeout_ms: u64,
    /// Which agent (runner) wrote it: a random number of its own.
    pub agent: u64,
}

/// The file's fixed length: every write replaces the whole line.
const LINE: usize = 96;
const MAGIC: &str = "berth-lease-1";

impl Lease {
    /// A lease renewed by a beat made at `sent_ms`, with the head's `timeout`.
    pub fn renewed(sent_ms: u64, timeout: Duration, agent: u64) -> Lease {
        let timeout_ms = timeout.as_millis() as u64;
        let expires_ms = sent_ms + timeout_ms.saturating_sub(margin(timeout).as_millis() as u64);
        Lease { acked_ms: sent_ms, expires_ms, timeout_ms, agent }
    }

    /// The file's text: `LINE` bytes, newline last.
    fn encode(&self) -> Vec<u8> {
        let Lease { acked_ms, expires_ms, timeout_ms, agent } = self;
        let mut line = format!("{MAGIC} {acked_ms} {expires_ms} {timeout_ms} {agent:016x}");
        line.truncate(LINE - 1);
        let mut bytes = format!("{line:<width$}\n", width = LINE - 1).into_bytes();
        bytes.truncate(LINE);
        bytes
    }

    /// The lease in `text`; `None` unless it is exactly a lease line.
    fn decode(text: &[u8]) -> Option<Lease> {
        let text = std::str::from_utf8(text).ok()?;
        let mut fields = text.split_whitespace();
        if fields.next()? != MAGIC {
            return None;
        }
        let mut number = || fields.next()?.parse::<u64>().ok();
        let (acked_ms, expires_ms, timeout_ms) = (number()?, number()?, number()?);
        let agent = u64::from_str_radix(fields.next()?, 16).ok()?;
        fields.next().is_none().then_some(Lease { acked_ms, expires_ms, timeout_ms, agent })
    }

    /// Whether the lease ran out at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_ms
    }
}

#[cfg(unix)]
pub use keeper::{keep, read, Kept, LeaseFile};

#[cfg(unix)]
mod keeper {
    use nix::fcntl::{Flock, FlockArg};
    use std::fs::{File, OpenOptions};
    use std::io::{self, Read};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};
    use tracing::{info, warn};

    use super::*;
    use crate::process::{logs, state};

    fn open(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
    }

    /// `f` with `file` locked (`arg`), the lock released after.
    fn locked<T>(file: &File, arg: FlockArg, f: impl FnOnce(&File) -> T) -> io::Result<T> {
        let lock = Flock::lock(file.try_clone()?, arg).map_err(|(_, e)| io::Error::from(e))?;
        let out = f(&lock);
        drop(lock);
        Ok(out)
    }

    fn read_from(file: &File) -> Option<Lease> {
        let mut bytes = [0u8; LINE];
        let n = file.read_at(&mut bytes, 0).ok()?;
        Lease::decode(&bytes[..n])
    }

    /// The lease in the directory `dir`, if its file holds one.
    pub fn read(dir: &Path) -> Option<Lease> {
        let file = File::open(dir.join(LEASE_FILE)).ok()?;
        locked(&file, FlockArg::LockShared, read_from).ok().flatten()
    }

    /// The agent's side of the lease file: renewals, and the check that the lease still holds.
    #[derive(Debug)]
    pub struct LeaseFile {
        file: File,
        lease: Mutex<Lease>,
        /// The agent that held the lease before this one, if any.
        pub previous: Option<u64>,
    }

    impl LeaseFile {
        /// Opens the lease file of `dir` for a new agent (a random number of its own): the
        /// lease a previous agent held holds on (its processes are adopted under it); without
        /// one, the new agent's lease runs for `first` from now.
        pub fn open(dir: &Path, first: Duration) -> io::Result<LeaseFile> {
            let file = open(&dir.join(LEASE_FILE))?;
            let agent = loop {
                let agent = rand::random::<u64>();
                if agent != 0 {
                    break agent;
                }
            };
            let (lease, previous) = locked(&file, FlockArg::LockExclusive, |file| {
                let (lease, previous) = match read_from(file) {
                    Some(old) => (Lease { agent, ..old }, Some(old.agent)),
                    None => (Lease::renewed(clock_ms(), first, agent), None),
                };
                file.write_all_at(&lease.encode(), 0).map(|()| (lease, previous))
            })??;
            Ok(LeaseFile { file, lease: Mutex::new(lease), previous })
        }

        /// The head heard a beat made at `sent_ms` (the node's clock), and declares the node
        /// dead after `timeout` of silence: the lease runs to what that proves. (It may also
        /// end sooner than the last one: a head with a shorter timeout, or the first reply
        /// after a directory's initial guess. Ending sooner is always safe.)
        pub fn renew(&self, sent_ms: u64, timeout: Duration) {
            let mut lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            let renewed = Lease::renewed(sent_ms, timeout, lease.agent);
            if renewed == *lease {
                return;
            }
            // Under the lock: a keeper that found the lease run out kills what it guards
            // before this renewal counts, never after.
            let written = locked(&self.file, FlockArg::LockExclusive, |file| {
                file.write_all_at(&renewed.encode(), 0)
            });
            match written.and_then(|w| w) {
                Ok(()) => *lease = renewed,
                Err(e) => warn!("cannot renew the node's lease in its file: {e}"),
            }
        }

        /// The lease as last written.
        pub fn current(&self) -> Lease {
            *self.lease.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Gives the lease back to the agent `previous` (this agent could not start its keeper:
        /// the earlier keeper must go on guarding what this agent would have adopted).
        pub fn give_back(&self, previous: u64) {
            let lease = Lease { agent: previous, ..self.current() };
            let _ = locked(&self.file, FlockArg::LockExclusive, |file| {
                file.write_all_at(&lease.encode(), 0)
            });
        }
    }

    /// Why [`keep`] returned.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Kept {
        /// The agent is gone and nothing it ran is left.
        NothingLeft,
        /// The agent is gone and a newer agent holds the lease (its keeper takes over).
        Replaced,
    }

    /// Guards the runner directory `dir` (see the module's documentation) until its agent is
    /// gone (end of file on `agent`) and the guard is no longer needed.
    pub fn keep(dir: &Path, agent: impl Read + Send + 'static) -> io::Result<Kept> {
        let gone = Arc::new(AtomicBool::new(false));
        {
            let gone = gone.clone();
            let mut agent = agent;
            std::thread::Builder::new().name("agent-pipe".into()).spawn(move || {
                let mut buf = [0u8; 64];
                while matches!(agent.read(&mut buf), Ok(n) if n > 0) {}
                gone.store(true, Ordering::Release);
            })?;
        }
        let lease_file = open(&dir.join(LEASE_FILE))?;
        let mut last = locked(&lease_file, FlockArg::LockShared, read_from)?.ok_or_else(|| {
            io::Error::other(format!("{} holds no lease", dir.join(LEASE_FILE).display()))
        })?;
        let ours = last.agent;
        // One keeper per directory: an earlier one (of an agent now gone) guards until this
        // agent's lease replaces its own, then leaves the lock to this one.
        let lock = open(&dir.join(KEEPER_LOCK))?;
        let _lock =
            Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
        info!(dir = %dir.display(), agent = format!("{ours:016x}"), "keeping the node's lease");
        let keeper = Keeper { dir: dir.to_path_buf(), lease_file };
        loop {
            if let Ok(Some(lease)) = locked(&keeper.lease_file, FlockArg::LockShared, read_from) {
                last = lease;
            }
            let now = clock_ms();
            // Every poll while it ran out: a process recorded after a kill (a start that was
            // under way) is killed at the next.
            if last.expired(now) {
                keeper.fence(now);
            }
            if gone.load(Ordering::Acquire) {
                if last.agent != ours {
                    info!("a newer agent holds the lease; its keeper takes over");
                    return Ok(Kept::Replaced);
                }
                if !keeper.guards_any() {
                    info!("the agent is gone and none of its processes runs");
                    return Ok(Kept::NothingLeft);
                }
            }
            std::thread::sleep(POLL);
        }
    }

    struct Keeper {
        dir: PathBuf,
        lease_file: File,
    }

    impl Keeper {
        /// Kills every recorded process still running if, under the lease's lock, the lease
        /// still ran out.
        fn fence(&self, now: u64) {
            let dir = self.dir.clone();
            let done = locked(&self.lease_file, FlockArg::LockExclusive, |file| {
                let lease = read_from(file)?;
                if !lease.expired(clock_ms()) {
                    return None;
                }
                Some((lease, crate::process::kill_recorded(&dir)))
            });
            let Ok(Some((lease, killed))) = done else { return };
            let silent = now.saturating_sub(lease.acked_ms);
            for entry in &killed {
                logs::note(
                    &logs::err_path(&self.dir, &entry.work_id),
                    &format!(
                        "=== berth: {} attempt {} killed at {} by the node's keeper: the head \
                         acknowledged no heartbeat for {silent} ms, and declares the node dead \
                         after {} ms (then its work starts elsewhere)",
                        entry.work_id,
                        entry.attempt,
                        logs::now_utc(),
                        lease.timeout_ms
                    ),
                );
            }
            if !killed.is_empty() {
                warn!(
                    killed = killed.len(),
                    silent_ms = silent,
                    timeout_ms = lease.timeout_ms,
                    "the node's lease ran out: killed its {} process group(s) before the head \
                     can declare the node dead",
                    killed.len()
                );
            }
        }

        /// Whether a process the directory records still runs.
        fn guards_any(&self) -> bool {
            state::load(&self.dir).0.processes.iter().any(state::is_same_process)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_line_reads_back_and_nothing_else_does() {
        let lease = Lease { acked_ms: 12, expires_ms: 34, timeout_ms: 30_000, agent: 0xabc };
        let bytes = lease.encode();
        assert_eq!(bytes.len(), LINE);
        assert_eq!(Lease::decode(&bytes), Some(lease));
        let max = Lease {
            acked_ms: u64::MAX,
            expires_ms: u64::MAX,
            timeout_ms: u64::MAX,
            agent: u64::MAX,
        };
        assert_eq!(Lease::decode(&max.encode()), Some(max));
        for bad in [
            &b""[..],
            b"berth-lease-1 1 2",
            b"berth-lease-1 1 2 3 4 5",
            b"other 1 2 3 4",
            b"berth-lease-1 x 2 3 4",
        ] {
            assert_eq!(Lease::decode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_lease_ends_a_margin_before_the_head_could_declare_the_node_dead() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(margin(s(30)), s(2));
        assert_eq!(margin(s(5)), s(1));
        assert_eq!(margin(s(2)), ms(400));
        assert_eq!(margin(s(1)), ms(200));
        assert_eq!(margin(ms(600)), ms(200));
        assert_eq!(margin(ms(300)), ms(150));
        let lease = Lease::renewed(1_000, s(30), 7);
        assert_eq!((lease.acked_ms, lease.expires_ms, lease.timeout_ms), (1_000, 29_000, 30_000));
        assert!(!lease.expired(28_999));
        assert!(lease.expired(29_000));
        // However short the timeout, half of it is left.
        assert_eq!(Lease::renewed(1_000, ms(100), 7).expires_ms, 1_050);
    }

    #[test]
    fn the_clock_never_goes_back() {
        let a = clock_ms();
        assert!(a > 0);
        assert!(clock_ms() >= a);
    }
}
