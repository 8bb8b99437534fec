//! Slot search: finding a slab of a class with room, and the slab's life in
//! a slot — created by the group that claimed an empty slot, disposed of by
//! the release that takes its count to zero.
//!
//! ```text
//!   lanes of one class ─► hint[class] ─► its slot: room? ── yes ─► lock
//!                              │ no                                  │
//!                              ▼                                     ▼
//!            scan from hash(class): slot i, i+1, ... ─► empty: claim, create
//!                                                       full / other class: next
//! ```
//!
//! Lanes aiming at the same slot form a `uniform` group whose leader locks
//! the slot for all of them with one atomic (the guard's count grows by the
//! group's size); each lane's position among the reservations tells whether
//! it got room. A group that claimed an empty slot gets a slab (cache, pool,
//! else the host), zeroes its bitfield together and publishes it. The scan
//! ends at the table's end: out of memory.
//!
//! # Hints and out of memory (the policy)
//! `hint[class]` names the slot where the class last found room: a malloc
//! that succeeds elsewhere moves it there, and a free into a full slab moves
//! it to that slab. When the provider refuses a slab, the heap is marked
//! exhausted until memory comes back (a slab disposed of, a large block
//! freed, the host's `trim`; a generation count makes a refusal that raced
//! with such a return stale at once). A refusal that was only temporary on
//! the host's side (its headroom check, fault injection, another process
//! freeing device memory) stays in force until one of those happens. While it is, a search asks the host nothing,
//! claims no empty slot (unless the cache or pool holds a slab) and looks at
//! the hint and the `EXHAUSTED_WINDOW` slots from the class's start only; so
//! an out-of-memory malloc costs about what a successful one does. Worst
//! case: room in a slab of the class that is neither the hint nor in that
//! window is not found until memory comes back (a class's slabs sit from its
//! start slot on, so the window covers its first 32).

use super::DeviceHeap;
use crate::abi::ProviderKind;
use crate::granule::Granule;
use crate::guard::{Lock, MAX_TRIES};
use crate::index::{reduce, wrap};
use crate::simt;
use crate::size_class::{SLAB_SIZE, geometry};
use crate::slab::Slab;
use crate::sync::Ordering;

/// `count` from a lock that claimed an empty slot: the group must create the
/// slab.
const FRESH: u32 = u32::MAX;
/// `count` from a lock whose claim found no memory.
const NO_MEMORY: u32 = u32::MAX - 1;
/// `count` from a lock of an empty slot the lane may not claim: move on.
const SKIP: u32 = u32::MAX - 2;
/// `count` from a lock of a slot being created: wait for it.
const CREATING: u32 = u32::MAX - 3;

/// Slots an out-of-memory search looks at after the class's hint: the scan
/// is bounded, so a malloc that returns null because the heap is full costs
/// about what a successful one does. The price: while the heap is exhausted,
/// room in a slab of the class outside the hint and this window is not
/// found (a free into a full slab points the hint at it, see `free_small`).
pub(super) const EXHAUSTED_WINDOW: u32 = 32;

/// The result of `find_slab` for one lane.
#[derive(Clone, Copy)]
pub(super) struct Found {
    pub(super) slab: u64,
    pub(super) reserved: u32,
    pub(super) uniform: u32,
}

/// The slot a class's scan starts from: a hash of the class, spread over the
/// table (murmur3's finaliser).
#[inline(always)]
fn start_slot(class: usize, slot_count: u32) -> u32 {
    let mut x = class as u32 + 1;
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^= x >> 16;
    reduce(x, slot_count)
}

impl DeviceHeap {
    /// The slot hint of `class`, valid for the current table size.
    #[inline(always)]
    fn hint(&self, class: usize, slot_count: u32) -> u32 {
        match self.class_hint(class).load(Ordering::Relaxed) {
            // A hint beyond the table (the host shrank it) is no hint.
            h if h.wrapping_sub(1) < slot_count => h - 1,
            _ => start_slot(class, slot_count),
        }
    }

    /// Finds each lane of `lane_mask` a slab of class `class` with room, and
    /// a reservation on it.
    pub(super) fn find_slab(&self, lane_mask: u32, class: usize) -> Found {
        let geo = geometry(class);
        let usable = geo.usable;
        let slot_count = self.slot_count();
        let hint = self.hint(class, slot_count);
        let base = start_slot(class, slot_count);
        let mut found = Found {
            slab: 0,
            reserved: 0,
            uniform: 0,
        };
        // Out of memory (the provider refused a slab, none came back since):
        // claim no empty slot unless the cache or pool has a slab, and look
        // at the hint and a bounded window only.
        // (Decided once for all the lanes, so that the probes below are
        // collectives they all take part in.)
        let exhausted = simt::ballot(lane_mask, self.is_exhausted()) != 0;
        let at_hand = exhausted && simt::ballot(lane_mask, self.slab_at_hand()) != 0;
        let probe = exhausted && !at_hand;
        let mut may_claim = !probe;
        let mut limit = if exhausted {
            EXHAUSTED_WINDOW.min(slot_count)
        } else {
            slot_count
        };
        let mut offset = 0u32;
        let mut retries = 0u32;
        let mut backoff = simt::Backoff::new();
        let mut done = false;
        loop {
            let active = simt::ballot(lane_mask, !done);
            if active == 0 {
                return found;
            }
            if done {
                continue;
            }
            let searching = if probe {
                // Exhausted: skip to the window's next slot with room; the
                // lanes at one offset (all of `active` take part in the
                // match, each group in its probe) probe a slot each.
                let same = simt::match_any_u32(active, offset);
                if offset > 0 {
                    offset = self.next_with_room(same, base, offset, limit, usable, slot_count);
                    done = offset > limit;
                }
                simt::ballot(active, !done)
            } else {
                active
            };
            if done {
                continue;
            }
            // Lanes still looking: `searching`, all of them here.
            let index = if offset == 0 {
                hint
            } else {
                wrap(base, offset - 1, slot_count)
            };
            let guard = self.slot(index);
            // A slot whose count is 0 is empty (or dying): worth a lock only
            // to claim it.
            let count = guard.use_count();
            let available = offset == 0 || (count < usable && (may_claim || count > 0));
            let slab_mask = simt::ballot(searching, available);
            if available {
                let key = ((class as u64) << 32) | u64::from(index);
                let group = simt::match_any_u64(slab_mask, key);
                let (slab, count) = self.try_lock(slab_mask, group, index, class, may_claim);
                // SAFETY: a non-zero `slab` is live and referenced by us.
                let fits = slab != 0
                    && count <= usable
                    && unsafe { Slab(slab).header() }.block == geo.block;
                let locked = simt::ballot(slab_mask, fits);
                let spare = simt::ballot(slab_mask, slab != 0) & !locked;
                if fits {
                    if index != hint && simt::is_leader(group & locked) {
                        self.class_hint(class).store(index + 1, Ordering::Relaxed);
                    }
                    found = Found {
                        slab,
                        reserved: count,
                        uniform: group & locked,
                    };
                    done = true;
                } else if slab != 0 {
                    // Wrong class, or more lanes than room: give the group's
                    // unused references back.
                    self.unlock_slot(index, spare & group);
                } else if count == NO_MEMORY {
                    // No memory for new slabs: keep looking for room in
                    // existing ones only, within the window.
                    may_claim = false;
                    limit = limit.min(offset + EXHAUSTED_WINDOW);
                } else if count == CREATING {
                    // Being created, most likely for our class: wait for it
                    // rather than create a second slab. The creators make
                    // progress on their own (they wait for no one), so this
                    // ends.
                    backoff.snooze();
                    continue;
                } else if count != SKIP && retries < MAX_TRIES {
                    // Being destroyed: it will be empty (claimable) soon.
                    retries += 1;
                    backoff.snooze();
                    continue;
                }
            }
            retries = 0;
            offset += 1;
            if offset > limit {
                done = true;
            }
        }
    }

    /// The first offset in `from..=limit` (offsets count from the class's
    /// start slot `base`, as in `find_slab`) whose slot publishes a slab
    /// with room, or `limit + 1`. The lanes of `lane_mask` (all calling)
    /// probe a slot each per round: one load and one ballot for up to 32
    /// slots.
    fn next_with_room(
        &self,
        lane_mask: u32,
        base: u32,
        from: u32,
        limit: u32,
        usable: u32,
        slot_count: u32,
    ) -> u32 {
        let lanes = lane_mask.count_ones();
        let rank = (lane_mask & simt::lanemask_lt()).count_ones();
        let mut at = from;
        while at <= limit {
            let mine = at + rank;
            let room = mine <= limit && {
                let count = self.slot(wrap(base, mine - 1, slot_count)).use_count();
                count > 0 && count < usable
            };
            let hits = simt::ballot(lane_mask, room);
            if hits != 0 {
                let first = hits.trailing_zeros();
                return at + (lane_mask & ((1u32 << first) - 1)).count_ones();
            }
            at += lanes;
        }
        limit + 1
    }

    /// Locks slot `index` for the lanes of `group` (a subset of
    /// `lane_mask`, all calling). Returns the slab and the lane's 1-based
    /// position among its reservations, or (0, 0 | NO_MEMORY | SKIP |
    /// CREATING).
    fn try_lock(
        &self,
        lane_mask: u32,
        group: u32,
        index: u32,
        class: usize,
        may_claim: bool,
    ) -> (u64, u32) {
        let leader = simt::leader(group);
        let n = group.count_ones();
        let guard = self.slot(index);
        let (mut slab, mut count, mut clean_words) = (0u64, 0u32, 0u32);
        if simt::lane_id() == leader {
            match guard.lock(n, may_claim) {
                Lock::Acquired { slab: s, count: c } => (slab, count) = (s, c),
                Lock::Claimed => {
                    let generation = self.memory_generation();
                    match self.obtain_slab() {
                        Some((s, clean)) => (slab, count, clean_words) = (s, FRESH, clean),
                        None => {
                            guard.abandon();
                            // The provider refused: remember it until memory
                            // comes back (stale at once if it came back
                            // while we asked).
                            self.refused(generation);
                            count = NO_MEMORY;
                        }
                    }
                }
                Lock::Empty => count = SKIP,
                Lock::Creating => count = CREATING,
                Lock::Busy => {}
            }
        }
        let slab = simt::shfl_u64(lane_mask, slab, leader);
        let mut count = simt::shfl_u32(lane_mask, count, leader);
        if slab == 0 {
            return (0, count);
        }
        if count == FRESH {
            // The whole group creates the slab: zero the bitfield together,
            // then the leader publishes it.
            let clean_words = simt::shfl_u32(group, clean_words, leader);
            // SAFETY: the group owns the claimed slot's new slab exclusively.
            unsafe { Slab(slab).init(group, geometry(class), index, clean_words) };
            if simt::lane_id() == leader {
                if let Some(granule) = self.granule_of(slab) {
                    self.granules.set(granule, Granule::Slab { slot: index });
                }
                count = guard.publish(slab, n);
            }
            count = simt::shfl_u32(group, count, leader);
        }
        let rank = (group & simt::lanemask_lt()).count_ones();
        (slab, count - n + rank + 1)
    }

    /// Whether a slab can be had without the host: the pool holds one, or
    /// the cache's most recent entry does (checked, in O(1), when the heap
    /// is exhausted: a slab pushed while a refusal was in flight must not be
    /// stranded).
    fn slab_at_hand(&self) -> bool {
        self.cache.recently_filled(self.cache_limit())
            || (self.provider() == ProviderKind::Pool && !self.pool.is_empty())
    }

    /// A slab for a claimed slot: from the cache, else the pool or the host.
    /// Returns it with the number of bitfield words known to be zero.
    fn obtain_slab(&self) -> Option<(u64, u32)> {
        if let Some(slab) = self.cache.pop(self.cache_limit()) {
            self.counters.slabs_from_cache.fetch_add(1);
            // SAFETY: cached slabs are mapped, with the header of their last
            // life; every bit of that life's bitfield is clear (the cache's
            // invariant).
            let words = unsafe { Slab(slab).header() }.words;
            return Some((slab, words));
        }
        let slab = if self.provider() == ProviderKind::Pool {
            self.pool_pop().unwrap_or(0)
        } else {
            self.system_allocate(SLAB_SIZE, SLAB_SIZE)
        };
        if slab == 0 {
            return None;
        }
        if self.granule_of(slab).is_none() {
            self.system_deallocate(slab, SLAB_SIZE);
            return None;
        }
        self.counters.slabs_from_provider.fetch_add(1);
        Some((slab, 0))
    }

    /// Gives back one reference per lane of `mask` to slot `index` (the
    /// lowest lane of `mask` does it); disposes of the slab if that was the
    /// last.
    fn unlock_slot(&self, index: u32, mask: u32) {
        self.release_slot(index, mask, mask.count_ones());
    }

    /// The lowest lane of `mask` gives back `n` references to slot `index`.
    pub(super) fn release_slot(&self, index: u32, mask: u32, n: u32) {
        if !simt::is_leader(mask) || n == 0 {
            return;
        }
        let guard = self.slot(index);
        if let Some(slab) = guard.unlock(n) {
            self.dispose(slab);
            guard.vacate();
        }
    }

    /// Disposes of an empty slab whose destruction the caller won: the
    /// granule table forgets it, then the cache, the pool or the host takes
    /// it.
    fn dispose(&self, slab: u64) {
        if let Some(granule) = self.granule_of(slab) {
            self.granules.set(granule, Granule::Freed);
        }
        if self.cache.push(slab, self.cache_limit()) {
            self.counters.slabs_to_cache.fetch_add(1);
        } else if self.provider() == ProviderKind::Pool {
            // Pool slabs stay with the device: no RPC on the slab path.
            if let Some(granule) = self.granule_of(slab) {
                self.pool.push(granule);
            }
        } else {
            self.counters.slabs_to_provider.fetch_add(1);
            self.system_deallocate(slab, SLAB_SIZE);
        }
        self.memory_returned();
    }
}
