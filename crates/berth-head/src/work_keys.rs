//! Work keys: the credential shared by one actor's (or task's) processes and the clients that
//! created or may call it.
//!
//! The key of work `id` is HMAC-SHA256(secret, id), hex. The secret is 32 random bytes made on
//! the first start and kept in the store's meta table, so every head that opens the store (a
//! restart, a standby taking over) derives the same keys and nothing per object is stored.
//! An agent gives the key to the processes of that work only (`BERTH_WORK_KEY`, never in the
//! spec, which read tokens can see); the creator gets it in the answer to its creation, and
//! admin tokens through `GET /api/v1/actors/{id}/endpoint`. A process proves with it that it is
//! that work's (registering its endpoint; fetching its function from the driver), and callers
//! prove with it that the head let them call the actor.

use berth_store::{Batch, Snapshot, Table};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The meta-table key of the secret.
pub(crate) const SECRET_KEY: &str = "work-key-secret";

/// Derives work keys.
#[derive(Clone)]
pub(crate) struct WorkKeys {
    /// The MAC already keyed with the secret: each key clones it instead of hashing the
    /// secret's pads again (half of a key's hashing; one is made for every start).
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for WorkKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkKeys(..)")
    }
}

impl WorkKeys {
    /// The store's secret, or a new one with the write that keeps it (to commit before the head
    /// answers anyone). A secret shorter than 32 bytes is replaced.
    pub(crate) fn load(snapshot: &Snapshot) -> (WorkKeys, Option<Batch>) {
        if let Some(secret) = snapshot.get(Table::Meta, SECRET_KEY).filter(|s| s.len() >= 32) {
            return (WorkKeys::keyed(secret), None);
        }
        let secret = crate::keyring::random_secret().into_bytes();
        let mut batch = Batch::new();
        batch.put(Table::Meta, SECRET_KEY, secret.clone());
        (WorkKeys::keyed(&secret), Some(batch))
    }

    fn keyed(secret: &[u8]) -> WorkKeys {
        WorkKeys { keyed: Hmac::<Sha256>::new_from_slice(secret).expect("any key length") }
    }

    /// Keys from a known secret (tests).
    #[cfg(test)]
    pub(crate) fn with_secret(secret: &[u8]) -> WorkKeys {
        WorkKeys::keyed(secret)
    }

    fn mac(&self, work_id: &str) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(work_id.as_bytes());
        mac
    }

    /// The key of `work_id`, 64 hex digits.
    pub(crate) fn key(&self, work_id: &str) -> String {
        crate::keyring::lower_hex(&self.mac(work_id).finalize().into_bytes())
    }

    /// True when `presented` is `work_id`'s key (compared in constant time).
    pub(crate) fn verify(&self, work_id: &str, presented: &str) -> bool {
        let Some(bytes) = hex_bytes(presented) else {
            return false;
        };
        self.mac(work_id).verify_slice(&bytes).is_ok()
    }
}

fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 {
        return None;
    }
    (0..64).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_per_work_and_verify_only_their_own() {
        let keys = WorkKeys::with_secret(&[7; 32]);
        let a = keys.key("actor-1");
        assert_eq!(a.len(), 64);
        assert_ne!(a, keys.key("actor-2"));
        assert_eq!(a, WorkKeys::with_secret(&[7; 32]).key("actor-1"), "derivation is stable");
        assert_ne!(a, WorkKeys::with_secret(&[8; 32]).key("actor-1"), "the secret matters");
        assert!(keys.verify("actor-1", &a));
        assert!(keys.verify("actor-1", &a.to_uppercase()), "hex in any case");
        assert!(!keys.verify("actor-2", &a));
        assert!(!keys.verify("actor-1", &a[..62]));
        assert!(!keys.verify("actor-1", "zz"));
        assert!(!keys.verify("actor-1", &"é".repeat(32)));
    }

    #[test]
    fn a_key_is_the_hmac_sha256_in_lowercase_hex() {
        // RFC 4231, test case 2; twice, so the kept keyed MAC is not changed by a use.
        let keys = WorkKeys::with_secret(b"Jefe");
        for _ in 0..2 {
            assert_eq!(
                keys.key("what do ya want for nothing?"),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
            );
        }
    }

    #[test]
    fn a_missing_secret_is_made_with_its_write() {
        let (made, batch) = WorkKeys::load(&Snapshot::default());
        let batch = batch.expect("a new secret is written");
        match batch.ops() {
            [berth_store::Op::Put { table: Table::Meta, key, value }] => {
                assert_eq!(key, SECRET_KEY);
                assert_eq!(made.key("task-1"), WorkKeys::with_secret(value).key("task-1"));
            }
            other => panic!("expected one put of the secret, got {other:?}"),
        }
    }
}
