//! [`ResourceTable`]: a node's resources by name, as answers show them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::ResourceUse;

// A sorted list rather than a map: a head keeps one per node version in its watch log, and a
// `BTreeMap` node took 640 bytes for the one to four resources a node has.
/// Resource name to amounts, in name order; a JSON object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceTable(Vec<(Arc<str>, ResourceUse)>);

impl ResourceTable {
    /// The amounts of `name`.
    pub fn get(&self, name: &str) -> Option<&ResourceUse> {
        let i = self.0.binary_search_by(|(n, _)| (**n).cmp(name)).ok()?;
        Some(&self.0[i].1)
    }

    /// Name and amounts, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ResourceUse)> {
        self.0.iter().map(|(name, amounts)| (&**name, amounts))
    }

    /// Number of resources.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: Into<Arc<str>>> FromIterator<(N, ResourceUse)> for ResourceTable {
    /// Sorted by name; of a name given twice, the last.
    fn from_iter<I: IntoIterator<Item = (N, ResourceUse)>>(items: I) -> ResourceTable {
        let mut rows: Vec<(Arc<str>, ResourceUse)> =
            items.into_iter().map(|(name, amounts)| (name.into(), amounts)).collect();
        // Stable: equal names keep their order, so the last one given is kept below.
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 = later.1;
            }
            same
        });
        rows.shrink_to_fit();
        ResourceTable(rows)
    }
}

impl std::ops::Index<&str> for ResourceTable {
    type Output = ResourceUse;

    /// The amounts of `name`; panics when there is no such resource (as a map's index does).
    fn index(&self, name: &str) -> &ResourceUse {
        self.get(name).unwrap_or_else(|| panic!("no resource {name:?}"))
    }
}

impl Serialize for ResourceTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for ResourceTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, ResourceUse>::deserialize(deserializer)?;
        Ok(map.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::Quantity;

    fn use_of(total: i64) -> ResourceUse {
        ResourceUse::new(Quantity::from_whole(total), Quantity::from_whole(total))
    }

    #[test]
    fn rows_are_sorted_by_name_and_a_name_given_twice_keeps_the_last() {
        let table: ResourceTable =
            [("GPU", use_of(4)), ("CPU", use_of(8)), ("GPU", use_of(2))].into_iter().collect();
        let names: Vec<&str> = table.iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["CPU", "GPU"]);
        assert_eq!(table["GPU"], use_of(2));
        assert_eq!(table.get("memory"), None);
        assert_eq!(table.len(), 2);
        assert!(!table.is_empty() && ResourceTable::default().is_empty());
    }

    #[test]
    fn its_json_is_the_maps() {
        let rows = [("memory", use_of(1 << 30)), ("CPU", use_of(8))];
        let table: ResourceTable = rows.into_iter().collect();
        let map: BTreeMap<&str, ResourceUse> = rows.into_iter().collect();
        let json = serde_json::to_string(&table).unwrap();
        assert_eq!(json, serde_json::to_string(&map).unwrap());
        assert_eq!(
            json,
            r#"{"CPU":{"total":"8","used":"0","available":"8"},"memory":{"total":"1073741824","used":"0","available":"1073741824"}}"#
        );
        assert_eq!(serde_json::from_str::<ResourceTable>(&json).unwrap(), table);
        // A row that is not an amount is refused, saying why (not read as zero).
        let negative = r#"{"CPU": {"total": "-1", "used": "0", "available": "0"}}"#;
        let err = serde_json::from_str::<ResourceTable>(negative).unwrap_err().to_string();
        let expected = berth_core::Quantity::parse("-1").unwrap_err().to_string();
        assert!(err.contains(&expected), "{err}");
        let missing = serde_json::from_str::<ResourceTable>(r#"{"CPU": {"total": "1"}}"#);
        assert!(missing.unwrap_err().to_string().contains("missing field `used`"));
    }

    #[test]
    #[should_panic(expected = "no resource \"GPU\"")]
    fn indexing_a_missing_resource_panics_as_a_maps_does() {
        let _ = &ResourceTable::default()["GPU"];
    }
}
