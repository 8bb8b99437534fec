//! The slab pool (pool mode): a lock-free stack of slabs the host mapped
//! before launch, so that a claim takes a slab with no RPC.
//!
//! ```text
//!   head: u64 = tag (32) │ top (32)         top = granule + 1, 0: empty
//!   next: [u32; N]       next[g] = the granule below g, + 1 (0 ends)
//!
//!   head ─► g5 ─► g2 ─► g9 ─► ∅           (next[5] = 3, next[2] = 10, next[9] = 0)
//! ```
//!
//! Slabs are named by their granule index in the region. `push` links the
//! slab above the head and swings the head with one CAS; `pop` reads the top's
//! link and swings the head to it. The tag changes on every successful push
//! and pop, so a pop that read a head, was overtaken by pops and pushes that
//! put the same slab back on top, and then tries its CAS fails (no ABA: the
//! link it read may be stale, and a stale link would hand a slab out twice).
//!
//! Invariants: every granule is on the stack at most once; a slab on the
//! stack is mapped and owned by the pool; a pop hands each pushed slab to
//! exactly one popper. Its bitfield may hold anything (a fresh mapping is
//! not zeroed on CUDA): whoever publishes a popped slab zeroes its words
//! (`obtain_slab` reports none known to be zero).

use crate::guard::{POOL_PUSH_WITHOUT_RELEASE, POOL_WITHOUT_TAG, planted};
use crate::simt::Scope;
use crate::sync::{AtomicU32, AtomicU64, Ordering, SharedArray, fence};

/// A stack of up to `N` slabs, by granule index (`N` a power of two).
#[repr(C)]
#[derive(Debug)]
pub struct SlabPool<const N: usize> {
    head: AtomicU64,
    next: SharedArray<AtomicU32, N>,
}

impl<const N: usize> SlabPool<N> {
    const MASK: u32 = {
        assert!(N.is_power_of_two() && N <= 1 << 31);
        (N - 1) as u32
    };

    /// An empty pool.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        SlabPool {
            head: AtomicU64::new(0),
            next: SharedArray::new([const { AtomicU32::new(0) }; N]),
        }
    }

    /// An empty pool.
    #[cfg(loom)]
    pub fn new() -> Self {
        SlabPool {
            head: AtomicU64::new(0),
            next: SharedArray::new(core::array::from_fn(|_| AtomicU32::new(0))),
        }
    }

    #[inline(always)]
    fn next_of(&self, granule: u32) -> &AtomicU32 {
        self.next.get((granule & Self::MASK) as usize)
    }

    #[inline(always)]
    fn retag(head: u64) -> u64 {
        if planted(POOL_WITHOUT_TAG) {
            head & !0xffff_ffff
        } else {
            (head & !0xffff_ffff).wrapping_add(1 << 32)
        }
    }

    /// Pushes the slab of granule `granule` (`< N`, not on the stack).
    pub fn push(&self, granule: u32) {
        let granule = granule & Self::MASK;
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            self.next_of(granule).store(head as u32, Ordering::Relaxed);
            if !planted(POOL_PUSH_WITHOUT_RELEASE) {
                // ORDERING: release (gpu): our link, and the slab's clean
                // bitfield, happen-before the popper's reads; pairs with the
                // acquire fence in `pop`.
                fence(Ordering::Release, Scope::Gpu);
            }
            match self
                .head
                .compare_exchange(head, Self::retag(head) | u64::from(granule + 1))
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Pops a slab's granule, if any.
    pub fn pop(&self) -> Option<u32> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let top = head as u32;
            if top == 0 {
                return None;
            }
            // ORDERING: acquire (gpu): pairs with the release fence in `push`
            // of the head we read: its link is visible.
            fence(Ordering::Acquire, Scope::Gpu);
            let next = self.next_of(top - 1).load(Ordering::Relaxed);
            match self
                .head
                .compare_exchange(head, Self::retag(head) | u64::from(next))
            {
                Ok(_) => {
                    // ORDERING: acquire (gpu): the slab as its pusher left it
                    // (pairs with the release fence in `push`).
                    fence(Ordering::Acquire, Scope::Gpu);
                    return Some(top - 1);
                }
                Err(now) => head = now,
            }
        }
    }

    /// Slabs on the stack (host side, quiescent pool; a corrupt cycle stops
    /// after `N`).
    pub fn len(&self) -> usize {
        let mut n = 0;
        let mut at = self.head.load(Ordering::Relaxed) as u32;
        while at != 0 && n <= N {
            n += 1;
            at = self.next_of(at - 1).load(Ordering::Relaxed);
        }
        n
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) as u32 == 0
    }
}

impl<const N: usize> Default for SlabPool<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn last_in_first_out_and_len() {
        let p: SlabPool<8> = SlabPool::new();
        assert_eq!(p.pop(), None);
        for g in [5, 2, 7] {
            p.push(g);
        }
        assert_eq!(p.len(), 3);
        assert_eq!(p.pop(), Some(7));
        assert_eq!(p.pop(), Some(2));
        p.push(0);
        assert_eq!(p.pop(), Some(0));
        assert_eq!(p.pop(), Some(5));
        assert!(p.is_empty());
    }
}
