//! The fixed set of tables the store keeps.

use std::fmt;

/// One of the store's tables. The set is closed: the head's state is nodes, actors, tasks,
/// placement groups, the starts of attempts and a little metadata, and a backend lays out
/// exactly these tables. A table added later goes last, so that the indices of the others
/// (which Redis commits carry) stay the same.
///
/// Each table maps string keys to opaque values (the head serializes its own types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Nodes, by node ID.
    Nodes,
    /// Actors, by actor ID.
    Actors,
    /// Tasks, by task ID.
    Tasks,
    /// Placement groups, by placement group ID.
    Groups,
    /// Metadata of the head (format versions, counters). Keys that begin with
    /// [`RESERVED_META_PREFIX`](crate::RESERVED_META_PREFIX) belong to the store itself.
    Meta,
    /// Starts of actors' and tasks' attempts, by the object's key: a start is written here
    /// alone, a few bytes, instead of its whole object again.
    Starts,
    /// Jobs, by job ID.
    Jobs,
}

impl Table {
    /// Every table, in a fixed order (the order of [`Table::index`]).
    pub const ALL: [Table; 7] = [
        Table::Nodes,
        Table::Actors,
        Table::Tasks,
        Table::Groups,
        Table::Meta,
        Table::Starts,
        Table::Jobs,
    ];

    /// The table's stable name: the redb table name and the last part of the Redis hash key.
    /// Never change these: they name data on disk and in Redis.
    pub const fn name(self) -> &'static str {
        match self {
            Table::Nodes => "nodes",
            Table::Actors => "actors",
            Table::Tasks => "tasks",
            Table::Groups => "groups",
            Table::Meta => "meta",
            Table::Starts => "starts",
            Table::Jobs => "jobs",
        }
    }

    /// The table's position in [`Table::ALL`], for arrays indexed by table.
    pub const fn index(self) -> usize {
        match self {
            Table::Nodes => 0,
            Table::Actors => 1,
            Table::Tasks => 2,
            Table::Groups => 3,
            Table::Meta => 4,
            Table::Starts => 5,
            Table::Jobs => 6,
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_distinct() {
        let names: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["nodes", "actors", "tasks", "groups", "meta", "starts", "jobs"]);
    }

    #[test]
    fn index_matches_position_in_all() {
        for (position, table) in Table::ALL.iter().enumerate() {
            assert_eq!(table.index(), position, "{table}");
        }
    }
}
