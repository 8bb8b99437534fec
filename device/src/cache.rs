//! The slab cache: a bounded lock-free set of released slabs, so that a
//! malloc/free loop that empties and refills a slab does not go to the host
//! each time.
//!
//! ```text
//!   entries: [ slab | 0 ][ slab | 0 ] ... [ slab | 0 ]    N words, `limit` used
//!              ▲ push: CAS 0 → slab at the first free entry from a hint
//!              ▼ pop:  swap slab → 0 at the first full entry from a hint
//! ```
//!
//! Each entry is claimed or emptied by one atomic on that entry alone, so a
//! slab is handed to exactly one popper and no ABA can hand it twice.
//! Invariant: every non-zero entry is a slab that no slot publishes and that
//! is mapped and clean (all bitfield bits zero), owned by the cache.

use crate::index::wrap;
use crate::simt::Scope;
use crate::sync::{AtomicU32, AtomicU64, Ordering, SharedArray, fence};

/// A bounded set of up to `N` cached slab addresses (`repr(C)`: the
/// entries come first).
#[repr(C)]
#[derive(Debug)]
pub struct SlabCache<const N: usize> {
    entries: SharedArray<AtomicU64, N>,
    /// Where the last push landed: pushes and pops start scanning there.
    hint: AtomicU32,
}

impl<const N: usize> SlabCache<N> {
    /// An empty cache.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        SlabCache {
            entries: SharedArray::new([const { AtomicU64::new(0) }; N]),
            hint: AtomicU32::new(0),
        }
    }

    /// An empty cache.
    #[cfg(loom)]
    pub fn new() -> Self {
        SlabCache {
            entries: SharedArray::new(core::array::from_fn(|_| AtomicU64::new(0))),
            hint: AtomicU32::new(0),
        }
    }

    /// Offers `slab` to the cache, using at most `limit` entries; `false`
    /// when full (the caller keeps the slab).
    pub fn push(&self, slab: u64, limit: usize) -> bool {
        let limit = limit.min(N);
        if limit == 0 || slab == 0 {
            return false;
        }
        // ORDERING: release (gpu): the slab's contents (its clean bitfield,
        // its header) happen-before the popper's use; pairs with the acquire
        // fence in `pop`.
        fence(Ordering::Release, Scope::Gpu);
        let limit = limit as u32;
        let start = self.start(limit);
        for i in 0..limit {
            let at = wrap(start, i, limit);
            if self
                .entries
                .get(at as usize)
                .compare_exchange(0, slab)
                .is_ok()
            {
                self.hint.store(at, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Takes a cached slab, if any (looking at the first `limit` entries).
    pub fn pop(&self, limit: usize) -> Option<u64> {
        let limit = limit.min(N);
        if limit == 0 {
            return None;
        }
        let limit = limit as u32;
        let start = self.start(limit);
        for i in 0..limit {
            // From the hint downwards, wrapping.
            let at = wrap(start, limit - i, limit);
            let entry = self.entries.get(at as usize);
            // A cheap look first: most entries are empty when the cache is.
            if entry.load(Ordering::Relaxed) != 0 {
                let slab = entry.swap(0);
                if slab != 0 {
                    // ORDERING: acquire (gpu), pairs with the release fence
                    // in `push`.
                    fence(Ordering::Acquire, Scope::Gpu);
                    return Some(slab);
                }
            }
        }
        None
    }

    /// Whether the most recently filled entry holds a slab: one load, a
    /// cheap look for an exhausted heap (a slab pushed while a refusal was
    /// in flight sits there), not an exact answer.
    pub fn recently_filled(&self, limit: usize) -> bool {
        let limit = limit.min(N);
        limit != 0
            && self
                .entries
                .get(self.start(limit as u32) as usize)
                .load(Ordering::Relaxed)
                != 0
    }

    /// Where scans start: the hint, or 0 when it lies beyond `limit` (the
    /// limit shrank).
    #[inline(always)]
    fn start(&self, limit: u32) -> u32 {
        let hint = self.hint.load(Ordering::Relaxed);
        if hint < limit { hint } else { 0 }
    }

    /// Takes every cached slab, calling `f` on each (host side, when no
    /// kernel runs; or a trim).
    pub fn drain(&self, mut f: impl FnMut(u64)) {
        for entry in self.entries.iter(N) {
            let slab = entry.swap(0);
            if slab != 0 {
                f(slab);
            }
        }
    }

    /// Calls `f` on every cached slab, leaving them cached (for checks).
    pub fn for_each(&self, mut f: impl FnMut(u64)) {
        for entry in self.entries.iter(N) {
            let slab = entry.load(Ordering::Relaxed);
            if slab != 0 {
                f(slab);
            }
        }
    }

    /// Cached slabs now.
    pub fn len(&self) -> usize {
        self.entries
            .iter(N)
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<const N: usize> Default for SlabCache<N> {
    fn default() -> Self {
        Self::new()
    }
}
