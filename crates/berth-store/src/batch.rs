//! Batches: ordered lists of writes that one commit applies all or nothing.

use std::fmt;

use crate::error::StoreError;
use crate::table::Table;

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The largest value, in bytes. The head's objects are a few kilobytes; anything near this is a
/// bug, and Redis refuses arguments above 512 MiB anyway.
pub const MAX_VALUE_BYTES: usize = 64 * 1024 * 1024;

/// Keys in [`Table::Meta`] that begin with this belong to the store itself (the redb backend
/// keeps its lease there). Batches may not write them and [`Store::load`](crate::Store::load)
/// does not return them.
pub const RESERVED_META_PREFIX: &str = "berth.store.";

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets `key` in `table` to `value`, replacing any value it had.
    Put {
        /// The table written.
        table: Table,
        /// The key written.
        key: String,
        /// The new value.
        value: Vec<u8>,
    },
    /// Removes `key` from `table`; removing a key that is not there is not an error.
    Delete {
        /// The table written.
        table: Table,
        /// The key removed.
        key: String,
    },
}

impl Op {
    /// The table the op writes.
    pub fn table(&self) -> Table {
        match self {
            Op::Put { table, .. } | Op::Delete { table, .. } => *table,
        }
    }

    /// The key the op writes.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    /// Why the op may not be committed, if it may not.
    fn check(&self) -> Result<(), InvalidOp> {
        let key = self.key();
        if key.is_empty() {
            return Err(InvalidOp::EmptyKey);
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(InvalidOp::KeyTooLong { bytes: key.len() });
        }
        if self.table() == Table::Meta && key.starts_with(RESERVED_META_PREFIX) {
            return Err(InvalidOp::ReservedKey);
        }
        if let Op::Put { value, .. } = self {
            if value.len() > MAX_VALUE_BYTES {
                return Err(InvalidOp::ValueTooLarge { bytes: value.len() });
            }
        }
        Ok(())
    }
}

/// Why an op of a batch is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidOp {
    /// The key is the empty string.
    EmptyKey,
    /// The key is longer than [`MAX_KEY_BYTES`].
    KeyTooLong {
        /// The key's length.
        bytes: usize,
    },
    /// The value is larger than [`MAX_VALUE_BYTES`].
    ValueTooLarge {
        /// The value's size.
        bytes: usize,
    },
    /// The key is in [`Table::Meta`] and begins with [`RESERVED_META_PREFIX`].
    ReservedKey,
}

impl fmt::Display for InvalidOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidOp::EmptyKey => f.write_str("the key is empty"),
            InvalidOp::KeyTooLong { bytes } => {
                write!(f, "the key is {bytes} bytes long, more than {MAX_KEY_BYTES}")
            }
            InvalidOp::ValueTooLarge { bytes } => {
                write!(f, "the value is {bytes} bytes, more than {MAX_VALUE_BYTES}")
            }
            InvalidOp::ReservedKey => {
                write!(f, "keys beginning with {RESERVED_META_PREFIX:?} belong to the store")
            }
        }
    }
}

/// An ordered list of writes, applied by one commit, all or nothing. Later ops see earlier ones:
/// a put then a delete of the same key leaves it deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Appends a put of `value` at `key` in `table`.
    pub fn put(
        &mut self,
        table: Table,
        key: impl Into<String>,
        value: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.ops.push(Op::Put { table, key: key.into(), value: value.into() });
        self
    }

    /// Appends a delete of `key` in `table`.
    pub fn delete(&mut self, table: Table, key: impl Into<String>) -> &mut Self {
        self.ops.push(Op::Delete { table, key: key.into() });
        self
    }

    /// Appends an op.
    pub fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Appends every op of `other`, after this batch's ops.
    pub fn append(&mut self, other: Batch) -> &mut Self {
        self.ops.extend(other.ops);
        self
    }

    /// The number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no ops.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The ops, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The ops, in order, by value.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// Checks every op (non-empty keys of at most [`MAX_KEY_BYTES`], values of at most
    /// [`MAX_VALUE_BYTES`], no reserved keys) and names the first invalid one. Every backend
    /// checks a batch before writing any of it, so an invalid batch changes nothing.
    pub fn validate(&self) -> Result<(), StoreError> {
        for (index, op) in self.ops.iter().enumerate() {
            if let Err(reason) = op.check() {
                return Err(StoreError::InvalidBatch {
                    index,
                    table: op.table(),
                    key: truncated(op.key()),
                    reason,
                });
            }
        }
        Ok(())
    }
}

impl From<Vec<Op>> for Batch {
    fn from(ops: Vec<Op>) -> Self {
        Batch { ops }
    }
}

impl FromIterator<Op> for Batch {
    fn from_iter<I: IntoIterator<Item = Op>>(iter: I) -> Self {
        Batch { ops: iter.into_iter().collect() }
    }
}

/// A key shortened for an error message, on a character boundary.
fn truncated(key: &str) -> String {
    const SHOWN: usize = 64;
    if key.len() <= SHOWN {
        return key.to_owned();
    }
    let mut end = SHOWN;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_first_invalid_op() {
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        let cases: [(Op, Option<InvalidOp>); 6] = [
            (Op::Put { table: Table::Nodes, key: "n1".into(), value: vec![1] }, None),
            (Op::Delete { table: Table::Nodes, key: String::new() }, Some(InvalidOp::EmptyKey)),
            (
                Op::Delete { table: Table::Tasks, key: long_key },
                Some(InvalidOp::KeyTooLong { bytes: MAX_KEY_BYTES + 1 }),
            ),
            (
                Op::Put { table: Table::Meta, key: "berth.store.lease".into(), value: vec![] },
                Some(InvalidOp::ReservedKey),
            ),
            // The prefix is reserved only in Meta.
            (Op::Put { table: Table::Nodes, key: "berth.store.lease".into(), value: vec![] }, None),
            (
                Op::Put {
                    table: Table::Groups,
                    key: "g".into(),
                    value: vec![0; MAX_VALUE_BYTES + 1],
                },
                Some(InvalidOp::ValueTooLarge { bytes: MAX_VALUE_BYTES + 1 }),
            ),
        ];
        for (op, expected) in cases {
            let mut batch = Batch::new();
            batch.put(Table::Actors, "a", b"ok".to_vec()).push(op.clone());
            match (batch.validate(), expected) {
                (Ok(()), None) => {}
                (Err(StoreError::InvalidBatch { index, table, reason, .. }), Some(want)) => {
                    assert_eq!((index, table, reason), (1, op.table(), want));
                }
                (got, want) => panic!("{op:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn invalid_batch_message_names_op_table_key_and_rule() {
        let mut batch = Batch::new();
        batch.delete(Table::Nodes, "n1").put(Table::Meta, "berth.store.x", vec![]);
        let message = batch.validate().expect_err("reserved key accepted").to_string();
        assert_eq!(
            message,
            "invalid batch: op 1 (meta \"berth.store.x\"): keys beginning with \"berth.store.\" \
             belong to the store"
        );
    }

    #[test]
    fn long_keys_are_truncated_on_a_char_boundary() {
        let key = "é".repeat(100);
        let shown = truncated(&key);
        assert!(shown.ends_with('…'));
        assert!(shown.len() <= 64 + '…'.len_utf8());
    }

    #[test]
    fn builders_keep_order() {
        let mut first = Batch::new();
        first.put(Table::Nodes, "a", vec![1]).delete(Table::Nodes, "a");
        let mut second = Batch::new();
        second.put(Table::Tasks, "t", vec![2]);
        first.append(second);
        let keys: Vec<(Table, &str)> =
            first.ops().iter().map(|op| (op.table(), op.key())).collect();
        assert_eq!(keys, [(Table::Nodes, "a"), (Table::Nodes, "a"), (Table::Tasks, "t")]);
        assert_eq!(first.len(), 3);
        assert!(!first.is_empty());
    }
}
