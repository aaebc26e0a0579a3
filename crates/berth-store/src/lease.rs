//! Leases and the epochs that fence stale writers.

use std::fmt;
use std::time::Duration;

/// A lease epoch: a fencing token. Every acquisition of the lease increases it by one (the
/// first acquisition gets epoch 1), and every commit names the epoch of its writer's lease;
/// the store refuses a commit whose epoch is not the current one, so a head that lost the lease
/// cannot overwrite the state of the head that took it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(u64);

impl Epoch {
    /// The epoch with this number. Stores hand out epochs; tests and tools may build them.
    pub const fn new(number: u64) -> Self {
        Epoch(number)
    }

    /// The epoch's number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
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
    fn ttl_millis_rounds_up() {
        assert_eq!(ttl_millis(Duration::from_micros(1)), 1);
        assert_eq!(ttl_millis(Duration::from_millis(5)), 5);
        assert_eq!(ttl_millis(Duration::from_micros(5_001)), 6);
    }
}
