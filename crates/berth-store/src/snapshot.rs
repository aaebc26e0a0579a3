//! What [`Store::load`](crate::Store::load) returns: every table's entries.

use std::collections::BTreeMap;

use crate::table::Table;

/// Every entry of every table, keys sorted, as of one point in time (the backends read all
/// tables in one read transaction or one atomic Redis transaction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    tables: [BTreeMap<String, Vec<u8>>; Table::ALL.len()],
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Snapshot::default()
    }

    /// One table's entries, keys sorted.
    pub fn table(&self, table: Table) -> &BTreeMap<String, Vec<u8>> {
        &self.tables[table.index()]
    }

    /// The value of `key` in `table`.
    pub fn get(&self, table: Table, key: &str) -> Option<&[u8]> {
        self.tables[table.index()].get(key).map(Vec::as_slice)
    }

    /// The number of entries in all tables.
    pub fn len(&self) -> usize {
        self.tables.iter().map(BTreeMap::len).sum()
    }

    /// Whether every table is empty.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(BTreeMap::is_empty)
    }

    /// Every entry, table by table in [`Table::ALL`] order, keys sorted within a table.
    pub fn iter(&self) -> impl Iterator<Item = (Table, &str, &[u8])> + '_ {
        Table::ALL.iter().flat_map(move |&table| {
            self.table(table)
                .iter()
                .map(move |(key, value)| (table, key.as_str(), value.as_slice()))
        })
    }

    /// Sets one entry; backends build snapshots with this.
    pub(crate) fn insert(&mut self, table: Table, key: String, value: Vec<u8>) {
        self.tables[table.index()].insert(key, value);
    }

    /// Replaces one table; backends build snapshots with this.
    pub(crate) fn set_table(&mut self, table: Table, entries: BTreeMap<String, Vec<u8>>) {
        self.tables[table.index()] = entries;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iter_goes_table_by_table_with_sorted_keys() {
        let mut snapshot = Snapshot::new();
        snapshot.insert(Table::Tasks, "t2".into(), vec![2]);
        snapshot.insert(Table::Nodes, "n1".into(), vec![1]);
        snapshot.insert(Table::Tasks, "t1".into(), vec![3]);
        let entries: Vec<(Table, &str)> = snapshot.iter().map(|(t, k, _)| (t, k)).collect();
        assert_eq!(entries, [(Table::Nodes, "n1"), (Table::Tasks, "t1"), (Table::Tasks, "t2")]);
        assert_eq!(snapshot.len(), 3);
        assert_eq!(snapshot.get(Table::Tasks, "t1"), Some(&[3][..]));
        assert_eq!(snapshot.get(Table::Actors, "t1"), None);
        assert!(!snapshot.is_empty());
        assert!(Snapshot::new().is_empty());
    }
}
