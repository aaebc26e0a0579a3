//! Resource names, interned to small IDs, and sparse sets of resource quantities.
//!
//! Names are interned once per cluster by a [`ResourceRegistry`] so that the decision loop
//! compares `u16`s, never strings. The four predefined resources have fixed IDs; any other valid
//! name (`nvidia.com/t4`, `TPU`, `accelerator_type:A100`) is a custom resource interned on first
//! use.

use std::fmt;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use thiserror::Error;

use crate::quantity::Quantity;

/// A resource name interned in a [`ResourceRegistry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId(u16);

impl ResourceId {
    /// Logical CPUs.
    pub const CPU: ResourceId = ResourceId(0);
    /// GPUs; a unit-instance resource by default.
    pub const GPU: ResourceId = ResourceId(1);
    /// Memory, in bytes.
    pub const MEMORY: ResourceId = ResourceId(2);
    /// Object-store memory, in bytes.
    pub const OBJECT_STORE_MEMORY: ResourceId = ResourceId(3);

    /// The dense index of this ID, for per-resource arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The ID of dense index `index` (the inverse of [`ResourceId::index`]); `None` past the
    /// largest ID there can be.
    pub fn from_index(index: usize) -> Option<ResourceId> {
        u16::try_from(index).ok().map(ResourceId)
    }
}

/// The predefined names, in ID order.
const PREDEFINED: [&str; 4] = ["CPU", "GPU", "memory", "object_store_memory"];

/// The longest accepted resource name (that of a Kubernetes qualified name with its prefix).
const MAX_NAME_LEN: usize = 253;

/// Why a resource name was rejected.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ResourceNameError {
    /// Empty, too long or with a character outside the allowed set.
    #[error(
        "resource name {0:?} is invalid: use 1 to 253 characters of letters, digits, '-', '_', \
         '.', '/' and ':', starting with a letter or digit"
    )]
    Invalid(String),
    /// The registry is full (65,536 names).
    #[error("too many distinct resource names (at most 65536)")]
    TooMany,
}

/// Interns resource names and records which resources are accounted per unit instance.
#[derive(Clone, Debug)]
pub struct ResourceRegistry {
    /// Shared, so that what shows resources by name (the head's node answers, one per node
    /// version) need not copy a name each time.
    names: Vec<std::sync::Arc<str>>,
    ids: FxHashMap<String, ResourceId>,
    /// Indexed by `ResourceId::index`; true for unit-instance resources (GPUs by default).
    unit_instance: Vec<bool>,
}

impl Default for ResourceRegistry {
    fn default() -> Self {
        let mut registry = ResourceRegistry {
            names: Vec::new(),
            ids: FxHashMap::default(),
            unit_instance: Vec::new(),
        };
        for name in PREDEFINED {
            registry.intern(name).expect("predefined names are valid");
        }
        registry.unit_instance[ResourceId::GPU.index()] = true;
        registry
    }
}

impl ResourceRegistry {
    /// A registry with the predefined resources, where exactly `unit_instance` (instead of the
    /// default `GPU`) are accounted per instance.
    pub fn with_unit_instance<'a>(
        unit_instance: impl IntoIterator<Item = &'a str>,
    ) -> Result<ResourceRegistry, ResourceNameError> {
        let mut registry = ResourceRegistry::default();
        registry.unit_instance.iter_mut().for_each(|flag| *flag = false);
        for name in unit_instance {
            let id = registry.intern(name)?;
            registry.unit_instance[id.index()] = true;
        }
        Ok(registry)
    }

    /// The ID of `name`, interning it if new. Rejects invalid names.
    pub fn intern(&mut self, name: &str) -> Result<ResourceId, ResourceNameError> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        validate_name(name)?;
        let id =
            ResourceId(u16::try_from(self.names.len()).map_err(|_| ResourceNameError::TooMany)?);
        self.names.push(name.into());
        self.ids.insert(name.to_string(), id);
        self.unit_instance.push(false);
        Ok(id)
    }

    /// `Ok` when [`ResourceRegistry::intern`] would accept `name` (a predefined name, or one
    /// that follows the naming rule), without a registry to intern it into.
    pub fn check_name(name: &str) -> Result<(), ResourceNameError> {
        if PREDEFINED.contains(&name) {
            return Ok(());
        }
        validate_name(name)
    }

    /// The ID of `name` if it was interned.
    pub fn lookup(&self, name: &str) -> Option<ResourceId> {
        self.ids.get(name).copied()
    }

    /// The ID of `name` if it was interned, `None` if it is a valid name nobody has used yet;
    /// an invalid name is an error. For requests, which must not grow the registry: only what
    /// nodes have is interned (else any caller could fill it, for good, with made-up names).
    pub fn lookup_checked(&self, name: &str) -> Result<Option<ResourceId>, ResourceNameError> {
        match self.lookup(name) {
            Some(id) => Ok(Some(id)),
            None => validate_name(name).map(|()| None),
        }
    }

    /// The name of `id`; `"?"` for an ID this registry did not give (a caller mixing
    /// registries: [`crate::Request::new`] rejects such IDs, so decisions never show it).
    pub fn name(&self, id: ResourceId) -> &str {
        self.names.get(id.index()).map_or("?", |name| name)
    }

    /// The name of `id`, shared (see [`ResourceRegistry::name`]).
    pub fn shared_name(&self, id: ResourceId) -> std::sync::Arc<str> {
        self.names.get(id.index()).cloned().unwrap_or_else(|| "?".into())
    }

    /// True when `id` was given by this registry.
    pub fn contains(&self, id: ResourceId) -> bool {
        id.index() < self.names.len()
    }

    /// True when `id` is accounted per unit instance (whole instances or a fraction of one).
    pub fn is_unit_instance(&self, id: ResourceId) -> bool {
        self.unit_instance.get(id.index()).copied().unwrap_or(false)
    }

    /// Number of interned names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Always false: the predefined names are always there.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

fn validate_name(name: &str) -> Result<(), ResourceNameError> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b':'));
    if ok {
        Ok(())
    } else {
        Err(ResourceNameError::Invalid(name.to_string()))
    }
}

/// A set of resource quantities: sorted by ID, zeros dropped.
///
/// Requests and nodes hold a handful of resources, so a sorted inline vector beats a hash map:
/// no allocation, and subset tests are a linear merge.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceSet {
    entries: SmallVec<[(ResourceId, Quantity); 4]>,
}

/// Lookups into a [`ResourceSet`] in ascending resource order ([`ResourceSet::ascending`]).
pub struct Ascending<'a> {
    entries: &'a [(ResourceId, Quantity)],
    at: usize,
}

impl Ascending<'_> {
    /// The quantity of `id`, zero when absent. Each `id` must be at least the one before it (a
    /// smaller one reads as absent): the cursor only moves forward.
    #[inline]
    pub fn get(&mut self, id: ResourceId) -> Quantity {
        while let Some(&(entry, quantity)) = self.entries.get(self.at) {
            if entry >= id {
                return if entry == id { quantity } else { Quantity::ZERO };
            }
            self.at += 1;
        }
        Quantity::ZERO
    }
}

/// A strict subtraction found a resource with less than was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The resource that is short.
    pub resource: ResourceId,
    /// What was asked.
    pub requested: Quantity,
    /// What there is.
    pub have: Quantity,
}

impl ResourceSet {
    /// The empty set.
    pub fn new() -> ResourceSet {
        ResourceSet::default()
    }

    /// The quantity of `id`, zero when absent.
    #[inline]
    pub fn get(&self, id: ResourceId) -> Quantity {
        // Sets hold a handful of entries: a forward scan that stops at the first ID not below
        // `id` beats a binary search there (it runs several times per visited node).
        if self.entries.len() <= 8 {
            return self.ascending().get(id);
        }
        match self.entries.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => self.entries[i].1,
            Err(_) => Quantity::ZERO,
        }
    }

    /// Sets `id` to `quantity`; zero removes it.
    pub fn set(&mut self, id: ResourceId, quantity: Quantity) {
        match self.entries.binary_search_by_key(&id, |e| e.0) {
            Ok(i) if quantity.is_zero() => {
                self.entries.remove(i);
            }
            Ok(i) => self.entries[i].1 = quantity,
            Err(_) if quantity.is_zero() => {}
            Err(i) => self.entries.insert(i, (id, quantity)),
        }
    }

    /// Removes `id`, returning its quantity.
    pub fn remove(&mut self, id: ResourceId) -> Quantity {
        let quantity = self.get(id);
        self.set(id, Quantity::ZERO);
        quantity
    }

    /// Entries in ID order.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceId, Quantity)> + '_ {
        self.entries.iter().copied()
    }

    /// True when no resource has a non-zero quantity.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of resources with a non-zero quantity.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The first resource where `self` asks more than `other` has, if any.
    // Inlined into the filters (as are the node's two callers): returned through memory, the
    // shortfall was copied into the verdict piece by piece and read back whole, a stall on
    // every node that failed (8% of the trace replay's time).
    #[inline]
    pub fn first_shortfall(&self, other: &ResourceSet) -> Option<Shortfall> {
        // One merge walk over both sorted sets (this runs for every node a decision visits).
        let mut theirs = other.ascending();
        self.iter().find_map(|(resource, requested)| {
            let have = theirs.get(resource);
            (requested > have).then_some(Shortfall { resource, requested, have })
        })
    }

    /// Quantities looked up in ascending resource order, in one pass over the set: for walks
    /// that read several sets side by side (the filters and scorers, once per node).
    #[inline]
    pub fn ascending(&self) -> Ascending<'_> {
        Ascending { entries: &self.entries, at: 0 }
    }

    /// True when every quantity in `self` is at most the quantity in `other`.
    pub fn is_subset_of(&self, other: &ResourceSet) -> bool {
        self.first_shortfall(other).is_none()
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &ResourceSet) {
        for (id, quantity) in other.iter() {
            self.set(id, self.get(id) + quantity);
        }
    }

    /// Adds `other` into `self`, keeping each resource at most its quantity in `cap`
    /// (the seed's `AddResourcesCapacityConstrained`: a node never has more available than total).
    pub fn add_capped(&mut self, other: &ResourceSet, cap: &ResourceSet) {
        for (id, quantity) in other.iter() {
            self.set(id, (self.get(id) + quantity).min(cap.get(id)));
        }
    }

    /// Subtracts `other`, failing without change if any resource would go negative.
    pub fn checked_sub(&mut self, other: &ResourceSet) -> Result<(), Shortfall> {
        if let Some(shortfall) = other.first_shortfall(self) {
            return Err(shortfall);
        }
        for (id, quantity) in other.iter() {
            self.set(id, self.get(id) - quantity);
        }
        Ok(())
    }

    /// Subtracts `other`, flooring each resource at zero.
    pub fn saturating_sub(&mut self, other: &ResourceSet) {
        for (id, quantity) in other.iter() {
            self.set(id, self.get(id).saturating_sub(quantity));
        }
    }

    /// A view that prints names instead of IDs: `{CPU: 2, GPU: 0.5}`.
    pub fn display<'a>(&'a self, registry: &'a ResourceRegistry) -> ResourceSetDisplay<'a> {
        ResourceSetDisplay { set: self, registry }
    }
}

impl FromIterator<(ResourceId, Quantity)> for ResourceSet {
    fn from_iter<I: IntoIterator<Item = (ResourceId, Quantity)>>(iter: I) -> ResourceSet {
        let mut set = ResourceSet::new();
        for (id, quantity) in iter {
            set.set(id, set.get(id) + quantity);
        }
        set
    }
}

/// Prints a [`ResourceSet`] with resource names.
pub struct ResourceSetDisplay<'a> {
    set: &'a ResourceSet,
    registry: &'a ResourceRegistry,
}

impl fmt::Display for ResourceSetDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (id, quantity)) in self.set.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: {}", self.registry.name(id), quantity)?;
        }
        f.write_str("}")
    }
}

/// Quantities a request asks for by resource names no node has: kept as names, so asking does
/// not grow the registry, and resolved (moved into the request's [`ResourceSet`]) once a node
/// brings the resource. While any is left, the request is infeasible with that reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnknownResources(Vec<(String, Quantity)>);

impl UnknownResources {
    /// No unknown resource.
    pub const EMPTY: UnknownResources = UnknownResources(Vec::new());

    /// Adds `quantity` of the resource `name`.
    pub fn push(&mut self, name: impl Into<String>, quantity: Quantity) {
        self.0.push((name.into(), quantity));
    }

    /// True when every name was known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names and quantities, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Quantity)> {
        self.0.iter().map(|(name, quantity)| (name.as_str(), *quantity))
    }

    /// Moves every name `registry` knows now into `set`; true when any moved.
    pub fn resolve(&mut self, registry: &ResourceRegistry, set: &mut ResourceSet) -> bool {
        let before = self.0.len();
        self.0.retain(|(name, quantity)| match registry.lookup(name) {
            Some(id) => {
                set.set(id, *quantity);
                false
            }
            None => true,
        });
        self.0.len() != before
    }

    /// Why a request with these is infeasible: `no node has the resource "TPU" (asked 4)`.
    pub fn reason(&self) -> Option<String> {
        let (name, quantity) = self.0.first()?;
        Some(format!("no node has the resource {name:?} (asked {quantity})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    #[test]
    fn predefined_ids_are_fixed_and_custom_names_intern() {
        let mut registry = ResourceRegistry::default();
        assert_eq!(registry.intern("CPU"), Ok(ResourceId::CPU));
        assert_eq!(registry.intern("object_store_memory"), Ok(ResourceId::OBJECT_STORE_MEMORY));
        let t4 = registry.intern("nvidia.com/t4").unwrap();
        assert_eq!(registry.intern("nvidia.com/t4"), Ok(t4));
        assert_eq!(registry.name(t4), "nvidia.com/t4");
        assert!(registry.intern("TPU").is_ok());
        assert!(registry.intern("accelerator_type:A100").is_ok());
        assert!(registry.is_unit_instance(ResourceId::GPU));
        assert!(!registry.is_unit_instance(t4));
    }

    #[test]
    fn invalid_names_are_rejected_with_the_rule() {
        let mut registry = ResourceRegistry::default();
        for bad in ["", " GPU", "G PU", "-x", "a\u{e9}", &"x".repeat(254)] {
            let err = registry.intern(bad).unwrap_err().to_string();
            assert!(err.contains("1 to 253 characters"), "{bad:?}: {err}");
        }
    }

    proptest::proptest! {
        /// The check without a registry accepts exactly what a fresh registry interns.
        #[test]
        fn check_name_agrees_with_a_fresh_registry(name in "[ -~]{0,12}|CPU|GPU|memory") {
            proptest::prop_assert_eq!(
                ResourceRegistry::check_name(&name),
                ResourceRegistry::default().intern(&name).map(|_| ())
            );
        }
    }

    #[test]
    fn unit_instance_list_is_configurable() {
        let registry = ResourceRegistry::with_unit_instance(["TPU"]).unwrap();
        assert!(!registry.is_unit_instance(ResourceId::GPU));
        assert!(registry.is_unit_instance(registry.lookup("TPU").unwrap()));
    }

    #[test]
    fn set_drops_zeros_and_keeps_order() {
        let mut set = ResourceSet::new();
        set.set(ResourceId::GPU, q("1"));
        set.set(ResourceId::CPU, q("2"));
        set.set(ResourceId::MEMORY, Quantity::ZERO);
        assert_eq!(set.iter().map(|e| e.0).collect::<Vec<_>>(), [ResourceId::CPU, ResourceId::GPU]);
        set.set(ResourceId::GPU, Quantity::ZERO);
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn subset_add_and_subtract() {
        let small: ResourceSet =
            [(ResourceId::CPU, q("1")), (ResourceId::GPU, q("0.5"))].into_iter().collect();
        let big: ResourceSet =
            [(ResourceId::CPU, q("4")), (ResourceId::GPU, q("1"))].into_iter().collect();
        assert!(small.is_subset_of(&big));
        assert!(!big.is_subset_of(&small));
        assert!(ResourceSet::new().is_subset_of(&small));

        let mut left = big.clone();
        left.checked_sub(&small).unwrap();
        assert_eq!(left.get(ResourceId::CPU), q("3"));
        left.add(&small);
        assert_eq!(left, big);

        let mut short = small.clone();
        let err = short.checked_sub(&big).unwrap_err();
        assert_eq!(err.resource, ResourceId::CPU);
        assert_eq!(short, small, "a failed strict subtraction changes nothing");

        short.saturating_sub(&big);
        assert!(short.is_empty());

        let mut capped = small.clone();
        capped.add_capped(&big, &big);
        assert_eq!(capped, big);
    }

    proptest::proptest! {
        /// `get` (a scan on small sets, a search on larger ones) and ascending lookups in one
        /// pass read what the set lists, for any set and any ascending list of IDs (repeats
        /// included).
        #[test]
        fn ascending_lookups_agree_with_get(
            quantities in proptest::collection::vec((0u16..24, 0i64..5), 0..20),
            mut ids in proptest::collection::vec(0u16..26, 0..10),
        ) {
            let set: ResourceSet = quantities
                .iter()
                .map(|&(id, units)| (ResourceId(id), Quantity::from_units(units)))
                .collect();
            ids.sort_unstable();
            let mut ascending = set.ascending();
            for id in ids {
                let id = ResourceId(id);
                let listed = set.iter().find(|&(r, _)| r == id).map_or(Quantity::ZERO, |e| e.1);
                proptest::prop_assert_eq!(set.get(id), listed);
                proptest::prop_assert_eq!(ascending.get(id), listed);
            }
        }
    }
}
