//! Leases and the epochs that fence stale writers.

use std::fmt;
use std::time::Duration;

/// A lease epoch: a fencing token. Every acquisition of the lease increases its number by one
/// (the first acquisition gets epoch 1) and draws a fresh random token; every commit names
/// its writer's epoch, and the store refuses a commit unless number *and* token are the ones
/// it granted last, so a head that lost the lease cannot overwrite the state of the head that
/// took it over. The token is what makes that hold when a store forgets: a Redis server
/// restarted without persistence counts epochs from 1 again, and the head that held epoch 1
/// before the restart must not pass for the one granted it after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch {
    number: u64,
    token: u64,
}

impl Epoch {
    /// The epoch with this number and no token. Stores hand out epochs; tests and tools may
    /// build them (a store grants none without a token, so such an epoch is always fenced).
    pub const fn new(number: u64) -> Self {
        Epoch { number, token: 0 }
    }

    /// The epoch with this number and token (a store granting one draws the token with
    /// [`random_u64`]).
    pub(crate) const fn with_token(number: u64, token: u64) -> Self {
        Epoch { number, token }
    }

    /// The epoch's number.
    pub const fn get(self) -> u64 {
        self.number
    }

    /// Its token, random per acquisition (0 for one built with [`Epoch::new`]).
    pub const fn token(self) -> u64 {
        self.token
    }

    /// The text form stores keep: `NUMBER:TOKEN`, the token in hex.
    pub(crate) fn stored(self) -> String {
        format!("{}:{:016x}", self.number, self.token)
    }

    /// Reads [`Epoch::stored`]'s form back; a bare number (no token) reads as token 0.
    pub(crate) fn parse_stored(text: &str) -> Option<Self> {
        match text.split_once(':') {
            Some((number, token)) => Some(Epoch {
                number: number.parse().ok()?,
                token: u64::from_str_radix(token, 16).ok()?,
            }),
            None => Some(Epoch::new(text.parse().ok()?)),
        }
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number)
    }
}

/// 64 random bits from the operating system. Tokens need only be distinct, not secret; if the
/// system source fails (it does not on Linux), the clock and the process ID still tell two
/// acquisitions apart.
pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Where a store's history stands: which store it is and how many commits it has taken. A
/// store that lost writes (a Redis server restarted without persistence, a database restored
/// from an old backup) shows another `id` or fewer `commits` than a head saw before, and that
/// is how the loss is noticed ([`StoreError::Behind`](crate::StoreError::Behind)).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Generation {
    /// The store's ID, random, written by the first acquisition of its lease.
    pub id: String,
    /// Commits the store has applied (for etcd: the revision of the last commit), only ever
    /// growing while the store keeps its data.
    pub commits: u64,
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.id.is_empty() {
            write!(f, "a store with no ID (never written, or wiped) at commit {}", self.commits)
        } else {
            write!(f, "store {} at commit {}", self.id, self.commits)
        }
    }
}

impl Generation {
    /// Whether a store that shows `found` lost what this saw: another ID (an empty ID here
    /// means none was seen yet), or fewer commits.
    pub fn is_ahead_of(&self, found: &Generation) -> bool {
        (!self.id.is_empty() && self.id != found.id) || self.commits > found.commits
    }
}

/// A fresh store ID: 128 random bits in hex.
pub(crate) fn new_store_id() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// The furthest a store object has seen its store's history go: from the store's own answers
/// and from what the caller says it knew before ([`Store::expect`](crate::Store::expect)). An
/// answer behind it is a store that lost writes.
#[derive(Debug, Default)]
pub(crate) struct Watermark {
    seen: std::sync::Mutex<Option<Generation>>,
}

impl Watermark {
    /// What has been seen, if anything.
    pub(crate) fn get(&self) -> Option<Generation> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets what the caller knew, without checking it against what was seen.
    pub(crate) fn set(&self, known: Option<Generation>) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = known;
    }

    /// Takes in a store's answer to a request sent when `sent` was known: `Err(sent)` if the
    /// answer is behind that, `Err(what was seen)` if it names another store than one seen;
    /// else the watermark moves to the furthest of both. Answers to concurrent requests may
    /// arrive in another order than the store executed them, so an answer is compared with
    /// what was known when it was asked, never with what later answers taught.
    pub(crate) fn observe(
        &self,
        sent: Option<&Generation>,
        found: &Generation,
    ) -> Result<(), Generation> {
        if let Some(sent) = sent.filter(|sent| sent.is_ahead_of(found)) {
            return Err(sent.clone());
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *seen {
            Some(known) if !known.id.is_empty() && !found.id.is_empty() && known.id != found.id => {
                Err(known.clone())
            }
            Some(known) => {
                if known.id.is_empty() {
                    known.id = found.id.clone();
                }
                known.commits = known.commits.max(found.commits);
                Ok(())
            }
            None => {
                *seen = Some(found.clone());
                Ok(())
            }
        }
    }
}

/// The right to write to the store, granted by [`Store::acquire_lease`](crate::Store::acquire_lease).
///
/// Holding a lease does not stop anyone from writing: the epoch does. Another holder can take
/// the lease over once it has gone `ttl` without renewal, and from then on every commit made
/// with this lease's epoch is refused as [`StoreError::Fenced`](crate::StoreError::Fenced).
/// Renew it well within its `ttl` (every third of it, say), counting from when the request was
/// sent, not from when the answer came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    holder: String,
    epoch: Epoch,
    ttl: Duration,
}

impl Lease {
    pub(crate) fn new(holder: &str, epoch: Epoch, ttl: Duration) -> Self {
        Lease { holder: holder.to_owned(), epoch, ttl }
    }

    /// Who holds the lease (the name given to `acquire_lease`).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The lease's epoch: pass it to every [`Store::commit`](crate::Store::commit).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// For how long the lease was granted or last renewed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// The longest holder name, in bytes.
pub const MAX_HOLDER_BYTES: usize = 256;

/// The shortest lease.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(1);

/// The longest lease: a day. A head that dies holding a longer one would block its successors
/// for longer than anyone would wait.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Checks a lease request: a holder of 1 to [`MAX_HOLDER_BYTES`] bytes and a `ttl` between
/// [`MIN_LEASE_TTL`] and [`MAX_LEASE_TTL`]. Returns the reason it is invalid.
pub(crate) fn check_lease_request(holder: &str, ttl: Duration) -> Result<(), String> {
    if holder.is_empty() {
        return Err("the holder name is empty".to_owned());
    }
    if holder.len() > MAX_HOLDER_BYTES {
        return Err(format!(
            "the holder name is {} bytes long, more than {MAX_HOLDER_BYTES}",
            holder.len()
        ));
    }
    if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
        return Err(format!("the ttl {ttl:?} is outside {MIN_LEASE_TTL:?}..={MAX_LEASE_TTL:?}"));
    }
    Ok(())
}

/// A duration in whole milliseconds, rounded up so a short lease never becomes zero.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    let millis = ttl.as_millis() + u128::from(!ttl.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(millis).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_requests_are_checked() {
        let cases: [(&str, Duration, Option<&str>); 6] = [
            ("head-1", Duration::from_secs(10), None),
            ("", Duration::from_secs(10), Some("the holder name is empty")),
            ("h", Duration::ZERO, Some("outside")),
            ("h", Duration::from_millis(1), None),
            ("h", MAX_LEASE_TTL, None),
            ("h", MAX_LEASE_TTL + Duration::from_secs(1), Some("outside")),
        ];
        for (holder, ttl, expected) in cases {
            let got = check_lease_request(holder, ttl);
            match expected {
                None => assert_eq!(got, Ok(()), "{holder:?} {ttl:?}"),
                Some(text) => {
                    let message = got.expect_err("invalid request accepted");
                    assert!(message.contains(text), "{message}");
                }
            }
        }
        let long = "x".repeat(MAX_HOLDER_BYTES + 1);
        assert!(check_lease_request(&long, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn answers_are_judged_by_what_was_known_when_they_were_asked() {
        let at = |commits| Generation { id: "s".into(), commits };
        let watermark = Watermark::default();
        assert_eq!(watermark.observe(None, &at(3)), Ok(()));
        // A renewal sent knowing 3 and a commit sent knowing 3: the store ran the renewal
        // first (3), then the commit (4), but the commit's answer came back first.
        let sent = watermark.get();
        assert_eq!(watermark.observe(sent.as_ref(), &at(4)), Ok(()));
        assert_eq!(watermark.observe(sent.as_ref(), &at(3)), Ok(()), "not behind what was sent");
        assert_eq!(watermark.get(), Some(at(4)), "the furthest is kept");
        // Behind what was sent is behind.
        let sent = watermark.get();
        assert_eq!(watermark.observe(sent.as_ref(), &at(2)), Err(at(4)));
        // Another store ID is behind whenever an ID was seen.
        let other = Generation { id: "t".into(), commits: 9 };
        assert_eq!(watermark.observe(None, &other), Err(at(4)));
        // An empty ID seen takes the first one found.
        watermark.set(Some(Generation { id: String::new(), commits: 1 }));
        assert_eq!(watermark.observe(None, &at(2)), Ok(()));
        assert_eq!(watermark.get(), Some(at(2)));
    }

    #[test]
    fn ttl_millis_rounds_up() {
        assert_eq!(ttl_millis(Duration::from_micros(1)), 1);
        assert_eq!(ttl_millis(Duration::from_millis(5)), 5);
        assert_eq!(ttl_millis(Duration::from_micros(5_001)), 6);
    }
}
