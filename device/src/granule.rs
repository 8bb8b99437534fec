//! The granule table: one entry per 2 MiB granule of the heap's region,
//! saying what the granule is now — so that `free` can tell in O(1), before
//! it touches any memory, whether a pointer can be a live block of ours.
//!
//! ```text
//!   region:  │ granule 0 │ granule 1 │ granule 2 │ granule 3 │ ...
//!   entries: │ Slab(7)   │ Large(2)  │ Unused    │ Freed     │ ...
//!            31 30 29 28 ............................... 0
//!   raw u32: ┌──┬──┬──┬───────────────────────────────────┐
//!            │S │L │F │ payload: slot (S) or granules (L)  │
//!            └──┴──┴──┴───────────────────────────────────┘
//! ```
//!
//! A large block of `n` granules has `Large(n)` at its first granule; its
//! other granules keep the entry they had (`Unused`, or `Freed` where a
//! slab or a block's head was before), and a free of a pointer into them
//! frees nothing: an invalid free, or a double free where the entry says
//! `Freed`. (Writing each of them at every large malloc and free would put
//! a loop on the free path, whose registers every kernel that frees pays:
//! the counters' split is not worth it.) `Freed` remembers that a slab or
//! a large block's head was here, so that a stale pointer to it is
//! reported as a double free rather than an invalid one.

use crate::sync::{AtomicU32, Ordering, SharedArray};

/// What a granule of the region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granule {
    /// Never ours (a large block's other granules keep what they had).
    Unused,
    /// A live slab, published by slot `slot`.
    Slab {
        /// The slot.
        slot: u32,
    },
    /// The head of a live large block of `granules` granules.
    Large {
        /// Its length in granules.
        granules: u32,
    },
    /// A slab or large block was here and has been freed.
    Freed,
}

const SLAB: u32 = 1 << 31;
const LARGE: u32 = 1 << 30;
const FREED: u32 = 1 << 29;
/// The largest payload (slot index or granule count) an entry holds.
pub const MAX_PAYLOAD: u32 = FREED - 1;

const _: () = assert!(crate::heap::MAX_SLOTS as u32 <= MAX_PAYLOAD + 1);
const _: () = assert!(crate::heap::REGION_GRANULES as u32 <= MAX_PAYLOAD);

impl Granule {
    /// The entry's raw word.
    #[inline(always)]
    pub const fn encode(self) -> u32 {
        match self {
            Granule::Unused => 0,
            Granule::Slab { slot } => SLAB | (slot & MAX_PAYLOAD),
            Granule::Large { granules } => LARGE | (granules & MAX_PAYLOAD),
            Granule::Freed => FREED,
        }
    }

    /// The entry of a raw word (an unknown word reads as `Unused`: nothing
    /// of ours is there).
    #[inline(always)]
    pub const fn decode(raw: u32) -> Granule {
        if raw & SLAB != 0 {
            Granule::Slab {
                slot: raw & MAX_PAYLOAD,
            }
        } else if raw & LARGE != 0 {
            Granule::Large {
                granules: raw & MAX_PAYLOAD,
            }
        } else if raw == FREED {
            Granule::Freed
        } else {
            Granule::Unused
        }
    }
}

/// `N` granule entries.
#[repr(C)]
#[derive(Debug)]
pub struct GranuleTable<const N: usize> {
    entries: SharedArray<AtomicU32, N>,
}

impl<const N: usize> GranuleTable<N> {
    /// A table of `Unused` entries.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        GranuleTable {
            entries: SharedArray::new([const { AtomicU32::new(0) }; N]),
        }
    }

    #[inline(always)]
    fn entry(&self, index: u32) -> &AtomicU32 {
        // `N` is a power of two: `get` masks the index, the identity for
        // every index the heap computes, and never panics.
        self.entries.get(index as usize)
    }

    /// Entry `index`.
    #[inline(always)]
    pub fn get(&self, index: u32) -> Granule {
        Granule::decode(self.entry(index).load(Ordering::Relaxed))
    }

    /// Sets entry `index` (by the one lane that owns the granule's change).
    #[inline(always)]
    pub fn set(&self, index: u32, value: Granule) {
        self.entry(index).store(value.encode(), Ordering::Relaxed);
    }

    /// Replaces entry `index` with `new` if it is `old`; whether it was.
    /// Exactly one of several racing frees of a large block wins.
    #[inline(always)]
    pub fn replace(&self, index: u32, old: Granule, new: Granule) -> bool {
        self.entry(index)
            .compare_exchange(old.encode(), new.encode())
            .is_ok()
    }
}

impl<const N: usize> Default for GranuleTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        for g in [
            Granule::Unused,
            Granule::Freed,
            Granule::Slab { slot: 0 },
            Granule::Slab { slot: 32_767 },
            Granule::Large { granules: 1 },
            Granule::Large { granules: 4096 },
        ] {
            assert_eq!(Granule::decode(g.encode()), g);
        }
        assert_eq!(Granule::decode(FREED | 3), Granule::Unused);
    }

    #[test]
    fn replace_wins_once() {
        let t: GranuleTable<4> = GranuleTable::new();
        let head = Granule::Large { granules: 2 };
        t.set(1, head);
        assert!(t.replace(1, head, Granule::Freed));
        assert!(!t.replace(1, head, Granule::Freed));
        assert_eq!(t.get(1), Granule::Freed);
    }
}
