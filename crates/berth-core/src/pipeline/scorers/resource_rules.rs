//! [`ResourceRules`]: values keyed by resource name or `prefix/*` family, the way profiles
//! name the resources their stages read.

/// Values keyed by resource name, where a name may be a `prefix/*` wildcard.
///
/// Rules: an exact name wins over any wildcard; among wildcards the longest prefix wins
/// (`example.com/gpu/*` over `example.com/*`). `prefix/*` matches every name that starts with
/// `prefix/` and has something after it. Lookups neither allocate nor hash: a binary search
/// over the exact names, then the wildcards in order, longest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRules<T> {
    /// Sorted by name, unique.
    exact: Vec<(Box<str>, T)>,
    /// The prefixes with their trailing `/`, longest first, then by name; unique.
    wildcards: Vec<(Box<str>, T)>,
}

impl<T> Default for ResourceRules<T> {
    fn default() -> Self {
        ResourceRules { exact: Vec::new(), wildcards: Vec::new() }
    }
}

impl<T> ResourceRules<T> {
    /// Rules from `(name or prefix/*, value)` pairs; a later pair with the same name replaces
    /// an earlier one. The order of the pairs does not matter otherwise.
    pub fn new(entries: impl IntoIterator<Item = (String, T)>) -> ResourceRules<T> {
        let mut rules = ResourceRules::default();
        for (name, value) in entries {
            let (list, key) = match wildcard_prefix(&name) {
                Some(prefix) => (&mut rules.wildcards, prefix.into()),
                None => (&mut rules.exact, name.into_boxed_str()),
            };
            match list.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => list.push((key, value)),
            }
        }
        rules.exact.sort_by(|a, b| a.0.cmp(&b.0));
        rules.wildcards.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        rules
    }

    /// The value for resource `name`: its exact rule, else the longest wildcard matching it.
    pub fn get(&self, name: &str) -> Option<&T> {
        if let Ok(i) = self.exact.binary_search_by(|(k, _)| (**k).cmp(name)) {
            return Some(&self.exact[i].1);
        }
        self.wildcards
            .iter()
            .find(|(prefix, _)| name.len() > prefix.len() && name.starts_with(&**prefix))
            .map(|(_, value)| value)
    }

    /// Every rule as written (`prefix/*` for wildcards): exact names sorted, then wildcards
    /// longest first.
    pub fn iter(&self) -> impl Iterator<Item = (String, &T)> + '_ {
        let exact = self.exact.iter().map(|(name, value)| (name.to_string(), value));
        let wildcards = self.wildcards.iter().map(|(prefix, value)| (format!("{prefix}*"), value));
        exact.chain(wildcards)
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcards.len()
    }

    /// True when there is no rule.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when some rule is a wildcard.
    pub fn has_wildcards(&self) -> bool {
        !self.wildcards.is_empty()
    }
}

/// `Some("nvidia.com/")` for `"nvidia.com/*"`: a non-empty prefix and one trailing `*`, as
/// Volcano's plugin accepts (`nvidia.*` too); `None` for anything else.
pub fn wildcard_prefix(name: &str) -> Option<&str> {
    name.strip_suffix('*').filter(|prefix| !prefix.is_empty() && !prefix.contains('*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_win_then_the_longest_wildcard() {
        let rules = ResourceRules::new([
            ("nvidia.com/*".to_string(), "family"),
            ("nvidia.com/gpu".to_string(), "exact"),
            ("nvidia.com/mig/*".to_string(), "mig family"),
            ("CPU".to_string(), "cpu"),
        ]);
        // (resource name, expected rule)
        let cases = [
            ("nvidia.com/gpu", Some("exact")),
            ("nvidia.com/t4", Some("family")),
            ("nvidia.com/mig/1g.5gb", Some("mig family")),
            ("nvidia.com/mig", Some("family")),
            ("nvidia.com/", None),
            ("nvidia.com", None),
            ("amd.com/gpu", None),
            ("CPU", Some("cpu")),
            ("cpu", None),
        ];
        for (name, expected) in cases {
            assert_eq!(rules.get(name).copied(), expected, "{name}");
        }
    }

    #[test]
    fn precedence_does_not_depend_on_the_order_rules_are_given() {
        let entries = [
            ("a.com/*".to_string(), 1),
            ("a.com/b/*".to_string(), 2),
            ("a.com/b/c".to_string(), 3),
        ];
        let forward = ResourceRules::new(entries.clone());
        let backward = ResourceRules::new(entries.into_iter().rev());
        assert_eq!(forward, backward);
        assert_eq!(forward.get("a.com/b/c"), Some(&3));
        assert_eq!(forward.get("a.com/b/d"), Some(&2));
        assert_eq!(forward.get("a.com/x"), Some(&1));
        let written: Vec<String> = forward.iter().map(|(name, _)| name).collect();
        assert_eq!(written, ["a.com/b/c", "a.com/b/*", "a.com/*"]);
    }

    #[test]
    fn a_later_rule_for_the_same_name_replaces_the_earlier() {
        let rules = ResourceRules::new([("x".to_string(), 1), ("x".to_string(), 2)]);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules.get("x"), Some(&2));
    }
}
