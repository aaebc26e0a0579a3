//! Per-instance accounting of unit-instance resources (GPUs by default).
//!
//! Assumptions: a unit-instance resource is a set of devices, each of capacity 1.0, numbered
//! 0..n-1 on its node, and a process must be told *which* devices it may use
//! (`CUDA_VISIBLE_DEVICES`).
//!
//! Rules (seed 002):
//! - a request of 1 or more must be whole and takes that many *fully free* instances, lowest
//!   IDs first;
//! - a request below 1 must fit inside one instance (two half-free GPUs cannot serve 0.75) and
//!   goes to the instance where it fits most tightly (least free space left, lowest ID on ties),
//!   so that whole instances stay whole for whole requests;
//! - a release gives each share back to its instance; fractions merge, an instance never holds
//!   more than 1.0 free.
//!
//! Capacity changes: growing appends fresh instances; shrinking removes the highest-numbered
//! ones. Work that holds a removed instance keeps running, but its release is ignored: the
//! instance is gone, and a later re-grown instance with the same number is a different device.
//! Each instance carries a generation so that a stale release cannot credit the new one. For
//! these resources the pool is the truth of what is available (`Σ free`): it agrees with the
//! seed's aggregate rule (`available + Δtotal`, floored at 0) whenever the removed instances were
//! free, and is more exact when they were not, because it knows which devices went away.

use smallvec::SmallVec;

use crate::quantity::Quantity;

/// Most instances of one resource on one node. Bounds memory and the per-instance scans.
pub const MAX_INSTANCES: i64 = 4096;

/// The number of an instance on its node (`GPU 0`, `GPU 1`, …).
pub type InstanceId = u32;

/// A share of one instance held by a placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InstanceShare {
    /// Which instance.
    pub instance: InstanceId,
    /// The instance's generation when the share was taken; a mismatch on release means the
    /// instance was removed meanwhile.
    pub generation: u32,
    /// How much of it.
    pub quantity: Quantity,
}

/// The shares one placement holds of one resource, in instance order.
pub type InstanceShares = SmallVec<[InstanceShare; 2]>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Instance {
    free: Quantity,
    generation: u32,
}

/// The instances of one unit-instance resource on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstancePool {
    instances: SmallVec<[Instance; 8]>,
    /// Next generation handed to a (re)created instance.
    next_generation: u32,
}

impl InstancePool {
    /// A pool of `count` free instances. `count` must be within `0..=MAX_INSTANCES`
    /// (the node validates it).
    pub fn new(count: u32) -> InstancePool {
        let mut pool = InstancePool { instances: SmallVec::new(), next_generation: 0 };
        pool.resize(count);
        pool
    }

    /// Number of instances.
    pub fn len(&self) -> u32 {
        self.instances.len() as u32
    }

    /// True when there are no instances.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Free capacity summed over instances: what the node has available of this resource.
    pub fn free_sum(&self) -> Quantity {
        self.instances.iter().fold(Quantity::ZERO, |sum, i| sum + i.free)
    }

    /// Free capacity of each instance, in instance order.
    pub fn free_per_instance(&self) -> impl Iterator<Item = Quantity> + '_ {
        self.instances.iter().map(|i| i.free)
    }

    /// True when `quantity` can be taken now under the rules above. A quantity above 1 that is
    /// not whole never fits: `Request::new` rejects it at the edge, and the ledger refuses it
    /// too rather than take one instance for 1.5.
    pub fn fits(&self, quantity: Quantity) -> bool {
        if quantity.is_zero() {
            return true;
        }
        if quantity > Quantity::ONE && !quantity.is_whole() {
            return false;
        }
        if quantity < Quantity::ONE {
            self.instances.iter().any(|i| i.free >= quantity)
        } else {
            let whole_free = self.instances.iter().filter(|i| i.free == Quantity::ONE).count();
            whole_free as i64 >= quantity.whole()
        }
    }

    /// Takes `quantity`, returning the shares taken, or `None` (and no change) if it does not fit.
    pub fn take(&mut self, quantity: Quantity) -> Option<InstanceShares> {
        let mut shares = InstanceShares::new();
        if quantity.is_zero() {
            return Some(shares);
        }
        if quantity < Quantity::ONE {
            let (index, _) = self
                .instances
                .iter()
                .enumerate()
                .filter(|(_, i)| i.free >= quantity)
                .min_by_key(|(index, i)| (i.free, *index))?;
            shares.push(self.share(index, quantity));
        } else {
            if !self.fits(quantity) {
                return None;
            }
            let wanted = quantity.whole() as usize;
            let chosen: SmallVec<[usize; 8]> = (0..self.instances.len())
                .filter(|&index| self.instances[index].free == Quantity::ONE)
                .take(wanted)
                .collect();
            for index in chosen {
                shares.push(self.share(index, Quantity::ONE));
            }
        }
        Some(shares)
    }

    /// Takes `quantity` on exactly the instances `ids` (to rebuild a placement recorded earlier):
    /// a share below 1 names one instance with that much free, a whole quantity `k` names `k`
    /// distinct fully free instances. On error nothing changes and the message says why.
    pub fn take_exact(
        &mut self,
        quantity: Quantity,
        ids: &[InstanceId],
    ) -> Result<InstanceShares, String> {
        let wanted = if quantity < Quantity::ONE {
            1
        } else if quantity.is_whole() {
            quantity.whole() as usize
        } else {
            return Err(format!("{quantity} is neither below 1 nor whole"));
        };
        if ids.len() != wanted {
            return Err(format!(
                "{quantity} takes {wanted} instance(s), but {} are named",
                ids.len()
            ));
        }
        for (i, &id) in ids.iter().enumerate() {
            if ids[..i].contains(&id) {
                return Err(format!("instance {id} is named twice"));
            }
            let Some(instance) = self.instances.get(id as usize) else {
                return Err(format!("there is no instance {id} (the node has {})", self.len()));
            };
            let need = quantity.min(Quantity::ONE);
            if instance.free < need {
                return Err(format!("instance {id} has {} free, {need} is needed", instance.free));
            }
        }
        let share = quantity.min(Quantity::ONE);
        Ok(ids.iter().map(|&id| self.share(id as usize, share)).collect())
    }

    fn share(&mut self, index: usize, quantity: Quantity) -> InstanceShare {
        let instance = &mut self.instances[index];
        instance.free -= quantity;
        InstanceShare { instance: index as InstanceId, generation: instance.generation, quantity }
    }

    /// Gives shares back. A share of a removed (or removed and re-created) instance is ignored.
    pub fn give_back(&mut self, shares: &[InstanceShare]) {
        for share in shares {
            if let Some(instance) = self.instances.get_mut(share.instance as usize) {
                if instance.generation == share.generation {
                    instance.free = (instance.free + share.quantity).min(Quantity::ONE);
                }
            }
        }
    }

    /// Changes the number of instances: new ones are free; removed ones are the highest IDs.
    pub fn resize(&mut self, count: u32) {
        self.instances.truncate(count as usize);
        while self.instances.len() < count as usize {
            self.instances.push(Instance { free: Quantity::ONE, generation: self.next_generation });
            self.next_generation = self.next_generation.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    fn ids(shares: &InstanceShares) -> Vec<InstanceId> {
        shares.iter().map(|s| s.instance).collect()
    }

    #[test]
    fn whole_requests_take_whole_free_instances_lowest_first() {
        let mut pool = InstancePool::new(4);
        let half = pool.take(q("0.5")).unwrap();
        assert_eq!(ids(&half), [0]);
        let two = pool.take(q("2")).unwrap();
        assert_eq!(ids(&two), [1, 2], "instance 0 is split, so it is skipped");
        assert!(!pool.fits(q("2")), "only instance 3 is whole");
        assert_eq!(pool.take(q("2")), None);
        assert_eq!(pool.free_sum(), q("1.5"));
    }

    #[test]
    fn seed_fractions_cannot_combine_two_halves() {
        let mut pool = InstancePool::new(2);
        pool.take(q("0.5")).unwrap();
        let second = pool.take(q("0.5")).unwrap();
        assert_eq!(ids(&second), [0], "best fit fills the half-used instance first");
        pool.take(q("0.5")).unwrap();
        // Now: instance 0 full, instance 1 half free. Make two halves instead:
        let mut pool = InstancePool::new(2);
        let a = pool.take(q("0.5")).unwrap();
        let b = pool.take(q("1")).unwrap();
        pool.give_back(&b);
        let c = pool.take(q("0.5")).unwrap();
        assert_eq!(ids(&a), [0]);
        assert_eq!(ids(&c), [0]);
        pool.give_back(&a);
        let d = pool.take(q("0.5")).unwrap();
        assert_eq!(ids(&d), [0], "instance 0 is the tightest fit again");
        let e = pool.take(q("0.5")).unwrap();
        assert_eq!(ids(&e), [1]);
        pool.give_back(&c);
        // Instance 0 has 0.5 free (d holds 0.5), instance 1 has 0.5 free (e holds 0.5).
        assert_eq!(pool.free_sum(), q("1"));
        assert!(!pool.fits(q("0.75")), "two half-free GPUs cannot serve 0.75");
        assert_eq!(pool.take(q("0.75")), None);
        assert!(pool.fits(q("0.5")));
    }

    #[test]
    fn fractions_go_to_the_tightest_instance() {
        let mut pool = InstancePool::new(3);
        pool.take(q("0.25")).unwrap(); // instance 0: 0.75 free
        let a = pool.take(q("0.5")).unwrap(); // tightest that fits is 0 (0.75)
        assert_eq!(ids(&a), [0]);
        let b = pool.take(q("0.3")).unwrap(); // 0 has 0.25: no; 1 and 2 whole: lowest
        assert_eq!(ids(&b), [1]);
        let c = pool.take(q("0.2")).unwrap(); // 0 has 0.25: tightest
        assert_eq!(ids(&c), [0]);
    }

    #[test]
    fn exact_takes_name_legal_instances_or_change_nothing() {
        let mut pool = InstancePool::new(3);
        let half = pool.take_exact(q("0.5"), &[2]).unwrap();
        assert_eq!(ids(&half), [2]);
        let other = pool.take_exact(q("0.5"), &[1]).unwrap();
        assert_eq!(ids(&other), [1]);
        let before = pool.clone();
        for (quantity, named, rule) in [
            ("2", &[0, 1][..], "instance 1 has 0.5 free"),
            ("2", &[0][..], "takes 2 instance(s), but 1 are named"),
            ("1", &[0, 0][..], "takes 1 instance(s), but 2"),
            ("2", &[0, 0][..], "named twice"),
            ("0.6", &[2][..], "instance 2 has 0.5 free"),
            ("0.5", &[7][..], "no instance 7"),
            ("1.5", &[0, 1][..], "neither below 1 nor whole"),
        ] {
            let err = pool.take_exact(q(quantity), named).unwrap_err();
            assert!(err.contains(rule), "{quantity} on {named:?}: {err}");
            assert_eq!(pool, before, "a refused take changes nothing");
        }
        // Two half-used GPUs: the state best fit alone never builds from empty.
        assert_eq!(pool.free_per_instance().collect::<Vec<_>>(), [q("1"), q("0.5"), q("0.5")]);
    }

    #[test]
    fn non_whole_quantities_above_one_never_fit() {
        let mut pool = InstancePool::new(4);
        assert!(!pool.fits(q("1.5")));
        assert_eq!(pool.take(q("1.5")), None);
        assert_eq!(pool.free_sum(), q("4"));
    }

    #[test]
    fn release_merges_fractions_back_to_whole() {
        let mut pool = InstancePool::new(1);
        let a = pool.take(q("0.3")).unwrap();
        let b = pool.take(q("0.7")).unwrap();
        assert!(!pool.fits(q("0.0001")));
        pool.give_back(&a);
        pool.give_back(&b);
        assert!(pool.fits(q("1")));
        assert_eq!(pool, InstancePool::new(1));
    }

    #[test]
    fn shrink_removes_highest_and_ignores_stale_releases() {
        let mut pool = InstancePool::new(4);
        let held = pool.take(q("4")).unwrap();
        pool.resize(2);
        assert_eq!(pool.free_sum(), Quantity::ZERO);
        pool.resize(4); // instances 2 and 3 are new devices
        assert_eq!(pool.free_sum(), q("2"));
        pool.give_back(&held);
        assert_eq!(pool.free_sum(), q("4"), "instances 0 and 1 come back; 2 and 3 stay whole");
        let whole = pool.take(q("4")).unwrap();
        assert_eq!(ids(&whole), [0, 1, 2, 3]);
    }
}
