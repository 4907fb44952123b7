//! The layout of the simulated deployment: which replica and AllocSvr
//! process belongs to which set.

use std::ops::Range;

/// Who is where: every set has `replicas` store replicas and `allocs`
/// AllocSvr ids, each id with a first process and a twin slot. Replicas
/// and process slots are numbered across sets, set 0's first: replica
/// `set · replicas + i`; slot `set · 2 · allocs + i` for AllocSvr `i`'s
/// first process, `+ allocs` for its twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Sets (store groups).
    pub sets: usize,
    /// Store replicas per set.
    pub replicas: usize,
    /// AllocSvr ids per set.
    pub allocs: usize,
}

impl Layout {
    /// Process slots per set (first processes and twins).
    pub fn slots_per_set(&self) -> usize {
        2 * self.allocs
    }

    /// Process slots in all.
    pub fn slots(&self) -> usize {
        self.sets * self.slots_per_set()
    }

    /// The set process slot `p` belongs to.
    pub fn set_of_slot(&self, p: usize) -> usize {
        p / self.slots_per_set()
    }

    /// The AllocSvr (index within its set) process slot `p` runs.
    pub fn index_of_slot(&self, p: usize) -> usize {
        p % self.slots_per_set() % self.allocs
    }

    /// Whether slot `p` is a twin slot (only a fault starts it).
    pub fn is_twin(&self, p: usize) -> bool {
        p % self.slots_per_set() >= self.allocs
    }

    /// The first process slot of AllocSvr `i` of `set`.
    pub fn first_slot(&self, set: usize, i: usize) -> usize {
        set * self.slots_per_set() + i
    }

    /// The twin slot of AllocSvr `i` of `set`.
    pub fn twin_slot(&self, set: usize, i: usize) -> usize {
        self.first_slot(set, i) + self.allocs
    }

    /// The process slots of `set`.
    pub fn slots_of(&self, set: usize) -> Range<usize> {
        set * self.slots_per_set()..(set + 1) * self.slots_per_set()
    }

    /// Replica `i` of `set`, numbered across sets.
    pub fn replica(&self, set: usize, i: usize) -> usize {
        set * self.replicas + i
    }

    /// The replicas of `set`, numbered across sets.
    pub fn replicas_of(&self, set: usize) -> Range<usize> {
        set * self.replicas..(set + 1) * self.replicas
    }

    /// The set replica `r` (numbered across sets) belongs to.
    pub fn set_of_replica(&self, r: usize) -> usize {
        r / self.replicas
    }
}
