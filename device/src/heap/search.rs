//! Slot search: finding a slab of a class with room, and the slab's life in
//! a slot — created by the group that claimed an empty slot, taken back by
//! its class or taken over by a claim elsewhere once it is empty.
//!
//! ```text
//!   lanes of one class ─► hint[class] ─► its slot: room? ── yes ─► lock
//!                              │ no                                  │
//!                              ▼                                     ▼
//!          scan on from the hint: slot h+1, h+2, ... ─► empty: claim
//!                                                       full / other class: next
//!   after the scan: each claiming group creates its slab (an empty slab
//!   taken over, else the pool's or the host's), then lanes that met a slot
//!   being created, or found no memory, scan again
//! ```
//!
//! Lanes aiming at the same slot form a `uniform` group whose leader locks
//! the slot for all of them with one atomic (the guard's count grows by the
//! group's size); each lane's position among the reservations tells whether
//! it got room. A group that claimed an empty slot gets a slab, zeroes its
//! bitfield together and publishes it — outside the scan's loop, so that
//! the registers of that slow part do not add to the scan's. The scan ends
//! after every slot once: out of memory.
//!
//! # A slab's life in a slot
//! Claimed (the slot was empty) → created and published by the claiming
//! group → locked and released by mallocs and frees; a release to zero
//! leaves it published and empty, and marks it in `empties` → either its
//! class takes it again (a lock of a zero count), or a claim elsewhere takes
//! it over (`Guard::reclaim`: a CAS of the live zero count to dead), empties
//! the slot and uses the slab for its own. A free never disposes of a slab:
//! the work (and the registers) of taking one over is on the claim's path,
//! which allocates anyway.
//!
//! # Hints, search cost and out of memory (the policy)
//! `hint[class]` names the slot where the class last found room: a malloc
//! that succeeds elsewhere moves it there, and a free into a full slab moves
//! it to that slab. The scan starts at the hint and goes on from it, so the
//! class's full slabs behind the hint are not walked again: as a class
//! grows, a malloc looks at its hint (full, once it fills) and the next
//! slot, where the class's next slab is claimed — a cost that does not grow
//! with the class's slabs. Worst case: a full hint with every slot after it
//! full or of other classes: the scan walks the table once.
//!
//! When the provider refuses a slab, the heap is marked exhausted until
//! memory comes back (a large block freed, the host's `trim`; a generation
//! count makes a refusal that raced with such a return stale at once; a
//! slab that goes empty is seen through `empties`). A refusal that was only
//! temporary on the host's side (its headroom check, fault injection,
//! another process freeing device memory) stays in force until one of those
//! happens. While it is, a search asks the host nothing, claims no empty
//! slot (unless a slab went empty or the pool holds one) and looks at the
//! hint and the `EXHAUSTED_WINDOW` slots after it only; so an out-of-memory
//! malloc costs about what a successful one does. Worst case: room in a
//! slab of the class that is neither the hint nor in that window is not
//! found until memory comes back (a free into a full slab points the hint
//! at it).

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
const CLAIM: u32 = u32::MAX;
/// `count` from a lock of an empty slot the lane may not claim: move on.
const SKIP: u32 = u32::MAX - 2;
/// `count` from a lock of a slot being created: scan again after the
/// round's creations.
const CREATING: u32 = u32::MAX - 3;

/// Outcome of a scan or a creation: nothing found (null).
const NOTHING: u32 = 0;
/// Outcome: a slab with room, and a reservation on it.
const FOUND: u32 = 1;
/// Outcome of a scan: the lane's group claimed an empty slot (the slot in
/// `Found::reserved`, the group in `Found::uniform`) and must create a slab.
const CLAIMED: u32 = 2;
/// Outcome of a creation that found no memory: search again, existing slabs
/// only.
const NO_MEMORY: u32 = 3;
/// Outcome: scan again (a slot being created was met, or a new slab was too
/// small for the whole group).
const RETRY: u32 = 4;

// A probe's key holds an offset (at most the slot count, plus one) and a
// class in one word.
const _: () = assert!(super::MAX_SLOTS < 1 << 16 && crate::size_class::CLASS_COUNT < 1 << 16);

/// Marks of `empties` a claim tries before asking the host (a mark is
/// stale when its slab's class took the slab again).
const TAKE_OVER_TRIES: u32 = 4;

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

impl Found {
    /// Nothing found.
    const NONE: Found = Found {
        slab: 0,
        reserved: 0,
        uniform: 0,
    };
}

/// The slot a class's first scan starts from (its hint until it has one): a
/// hash of the class, spread over the table (murmur3's finaliser).
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
    /// a reservation on it (`slab == 0`: no memory).
    ///
    /// Rounds of a scan and the creations it asked for: the scan locks a
    /// slab with room or claims an empty slot; after it, outside its loop
    /// (so that its state is dead and the registers of the slow part do not
    /// add to it), each claiming group creates its slab. Lanes whose scan
    /// found nothing while a slab sits empty somewhere (a full slot table,
    /// or an exhausted heap's window) take that slab over in its own slot
    /// and create theirs there. A lane whose claim found no memory (the heap
    /// is now marked exhausted), or that met a slot being created (by its
    /// own warp, perhaps: waiting inside the scan could deadlock), scans
    /// again from the class's hint — which creators move to their new slab.
    pub(super) fn find_slab(&self, lane_mask: u32, class: usize) -> Found {
        let mut pending = lane_mask;
        let mut backoff = simt::Backoff::new();
        loop {
            let (mut found, mut outcome) = self.scan(pending, class);
            let nothing = simt::ballot(pending, outcome == NOTHING);
            if outcome == CLAIMED || outcome == NOTHING {
                // Claimed: `found.reserved` is the claimed slot,
                // `found.uniform` the group that claimed it. Nothing: the
                // lanes of one class take an empty slab over in its slot.
                let adopt = outcome == NOTHING;
                let group = if adopt {
                    simt::match_any_u32(nothing, class as u32)
                } else {
                    found.uniform
                };
                (found, outcome) = self.create(group, found.reserved, class, adopt);
            }
            let again = outcome == NO_MEMORY || outcome == RETRY;
            pending = simt::ballot(pending, again);
            if !again {
                return found;
            }
            // The lanes of `pending`, all of them here. No memory: the next
            // scan looks at existing slabs only (the exhausted mark says
            // so).
            backoff.snooze();
        }
    }

    /// One scan for the lanes of `lane_mask`, from the class's hint (offset
    /// 0) on (offset `o`: the `o`-th slot after it). Returns the lane's
    /// result and outcome: FOUND (a slab with room, and a reservation),
    /// CLAIMED (`reserved` is a slot the lane's group, `uniform`, claimed:
    /// it must create the slab), RETRY (a slot being created: scan again),
    /// or NOTHING.
    fn scan(&self, lane_mask: u32, class: usize) -> (Found, u32) {
        let geo = geometry(class);
        let usable = geo.usable;
        let slot_count = self.slot_count();
        let hint = self.hint(class, slot_count);
        let mut found = Found {
            slab: 0,
            reserved: 0,
            uniform: 0,
        };
        let mut outcome = NOTHING;
        // Out of memory (the provider refused a slab, none came back since):
        // claim no empty slot unless a slab went empty or the pool has one,
        // and look at the hint and a bounded window only. (Decided once for
        // all the lanes, so that the probes below are collectives they all
        // take part in.)
        let exhausted = simt::ballot(lane_mask, self.is_exhausted()) != 0;
        let at_hand = exhausted && simt::ballot(lane_mask, self.slab_at_hand()) != 0;
        let probe = exhausted && !at_hand;
        let may_claim = !probe;
        let limit = if probe {
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
                return (found, outcome);
            }
            if done {
                continue;
            }
            let searching = if probe {
                // Exhausted: skip to the window's next slot with room; the
                // lanes of one class at one offset (all of `active` take
                // part in the match, each group in its probe) probe a slot
                // each. (The class too: offsets count from the class's hint,
                // and room is by the class's blocks.)
                let same = simt::match_any_u32(active, offset | ((class as u32) << 16));
                if offset > 0 {
                    offset = self.next_with_room(same, hint, offset, limit, usable, slot_count);
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
            // The hint, then the slots after it: a class's full slabs
            // before its hint are not walked again, so the cost of finding
            // room does not grow with the class's slabs.
            let index = wrap(hint, offset, slot_count);
            // A slot whose count is 0 is empty, being created or taken
            // over, or an empty slab: worth a lock only to claim it (or to
            // find the empty slab ours).
            let count = self.slot(index).use_count();
            let available = offset == 0 || (count < usable && (may_claim || count > 0));
            let slab_mask = simt::ballot(searching, available);
            if available {
                let key = ((class as u64) << 32) | u64::from(index);
                let group = simt::match_any_u64(slab_mask, key);
                let (slab, count) = self.try_lock(slab_mask, group, index, may_claim);
                // SAFETY: a non-zero `slab` is live and referenced by us.
                let fits = slab != 0
                    && count <= usable
                    && unsafe { Slab(slab).header() }.block == geo.block;
                let locked = simt::ballot(slab_mask, fits);
                let spare = simt::ballot(slab_mask, slab != 0) & !locked;
                if fits {
                    if count == 1 {
                        // The first reservation of a slab that had none:
                        // an empty slab of ours put back to use (one lane
                        // counts it; a new slab's come from `create`).
                        self.counters.slabs_revived.fetch_add(1);
                    }
                    if index != hint && simt::is_leader(group & locked) {
                        self.class_hint(class).store(index + 1, Ordering::Relaxed);
                    }
                    found = Found {
                        slab,
                        reserved: count,
                        uniform: group & locked,
                    };
                    outcome = FOUND;
                    done = true;
                } else if slab != 0 {
                    // Wrong class, or more lanes than room: give the group's
                    // unused references back.
                    self.unlock_slot(index, spare & group);
                } else if count == CLAIM {
                    found.reserved = index;
                    found.uniform = group;
                    outcome = CLAIMED;
                    done = true;
                } else if count == CREATING {
                    // Being created, most likely for our class: come back
                    // after this round's creations (its creators may be in
                    // this warp, waiting for us at our next collective).
                    outcome = RETRY;
                    done = true;
                } else if count != SKIP && retries < MAX_TRIES {
                    // Being taken over (by another warp): it will be empty
                    // (claimable) soon.
                    retries += 1;
                    backoff.snooze();
                    continue;
                }
            }
            if done {
                continue;
            }
            retries = 0;
            offset += 1;
            if offset > limit {
                done = true;
            }
        }
    }

    /// The first offset in `from..=limit` (offsets count from the class's
    /// hint `base`, as in `scan`) whose slot publishes a slab
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
                let count = self.slot(wrap(base, mine, slot_count)).use_count();
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
    /// position among its reservations, or (0, 0 | CLAIM | SKIP |
    /// CREATING).
    fn try_lock(&self, lane_mask: u32, group: u32, index: u32, may_claim: bool) -> (u64, u32) {
        let leader = simt::leader(group);
        let n = group.count_ones();
        let (mut slab, mut count) = (0u64, 0u32);
        if simt::lane_id() == leader {
            match self.slot(index).lock(n, may_claim) {
                Lock::Acquired { slab: s, count: c } => (slab, count) = (s, c),
                Lock::Claimed => count = CLAIM,
                Lock::Empty => count = SKIP,
                Lock::Creating => count = CREATING,
                Lock::Emptied => {
                    // Our stale reference was the new slab's last.
                    self.empties.mark(index);
                    count = CREATING;
                }
                Lock::Busy => {}
            }
        }
        let slab = simt::shfl_u64(lane_mask, slab, leader);
        let count = simt::shfl_u32(lane_mask, count, leader);
        if slab == 0 {
            return (0, count);
        }
        let rank = (group & simt::lanemask_lt()).count_ones();
        (slab, count - n + rank + 1)
    }

    /// The lanes of `group` (all calling) claimed slot `index`: they get a
    /// slab (an empty one taken over, the pool's, or the host's), zero its
    /// bitfield together and publish it with a reservation each. FOUND, or
    /// NO_MEMORY (the claim given up, the heap marked exhausted).
    ///
    /// With `adopt`, the group found nothing and claimed no slot (a full
    /// slot table, or an exhausted heap's window): it takes over an empty
    /// slab that `empties` names, keeping it in its slot (which then shows
    /// "being created"), and builds its own slab there from it. FOUND, or
    /// NOTHING when no empty slab could be had.
    fn create(&self, group: u32, index: u32, class: usize, adopt: bool) -> (Found, u32) {
        let leader = simt::leader(group);
        let (mut index, mut slab, mut clean_words) = (index, 0u64, 0u32);
        if simt::lane_id() == leader {
            if adopt {
                if let Some((from, s, clean)) = self.take_over_empty(false) {
                    (index, slab, clean_words) = (from, s, clean);
                }
            } else {
                let generation = self.memory_generation();
                match self.obtain_slab() {
                    Some((s, clean)) => (slab, clean_words) = (s, clean),
                    None => {
                        self.slot(index).abandon();
                        // The provider refused: remember it until memory
                        // comes back (stale at once if it came back while we
                        // asked).
                        self.refused(generation);
                    }
                }
            }
        }
        let slab = simt::shfl_u64(group, slab, leader);
        if slab == 0 {
            return (Found::NONE, if adopt { NOTHING } else { NO_MEMORY });
        }
        let index = simt::shfl_u32(group, index, leader);
        let clean_words = simt::shfl_u32(group, clean_words, leader);
        self.build(group, index, class, slab, clean_words)
    }

    /// The lanes of `group` (all calling) own slot `index` (claimed, or
    /// kept by a takeover) and `slab`: they zero its bitfield from
    /// `clean_words` on, the leader names the slot in the granule table,
    /// points the class's hint at it and publishes it with a reservation
    /// per lane. FOUND, or RETRY for the lanes beyond the class's blocks.
    fn build(
        &self,
        group: u32,
        index: u32,
        class: usize,
        slab: u64,
        clean_words: u32,
    ) -> (Found, u32) {
        let leader = simt::leader(group);
        // SAFETY: the group owns the slot's new slab exclusively.
        unsafe { Slab(slab).init(group, geometry(class), index, clean_words) };
        let n = group.count_ones();
        if simt::lane_id() == leader {
            if let Some(granule) = self.granule_of(slab) {
                self.granules.set(granule, Granule::Slab { slot: index });
            }
            self.slot(index).publish(slab, n);
            self.class_hint(class).store(index + 1, Ordering::Relaxed);
        }
        // The count is `n` after the publication: the lanes' positions are
        // 1..=n. A group larger than the class's blocks (the largest
        // classes) keeps what fits; the others give their references back
        // and search again.
        let reserved = (group & simt::lanemask_lt()).count_ones() + 1;
        let fits = reserved <= geometry(class).usable;
        let spare = simt::ballot(group, !fits);
        if spare != 0 {
            self.unlock_slot(index, spare);
        }
        if !fits {
            return (Found::NONE, RETRY);
        }
        (
            Found {
                slab,
                reserved,
                uniform: group & !spare,
            },
            FOUND,
        )
    }

    /// Whether a slab can be had without the host: a slot is marked empty,
    /// or the pool holds one (checked, in O(1), when the heap is exhausted:
    /// a slab emptied while a refusal was in flight must not be stranded).
    fn slab_at_hand(&self) -> bool {
        self.empties.count() != 0
            || (self.provider() == ProviderKind::Pool && !self.pool.is_empty())
    }

    /// A slab for a claimed slot: an empty slab taken over, else one from
    /// the pool or the host — not the host while the heap is exhausted (its
    /// marks were stale: the host refused already). Returns it with the
    /// number of bitfield words known to be zero.
    fn obtain_slab(&self) -> Option<(u64, u32)> {
        if let Some((_, slab, clean)) = self.take_over_empty(true) {
            return Some((slab, clean));
        }
        let slab = if self.provider() == ProviderKind::Pool {
            self.pool_pop().unwrap_or(0)
        } else if self.is_exhausted() {
            0
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

    /// Takes over an empty slab that `empties` names: a few marks are tried
    /// (a mark is stale when the slab's class took it again), each costing
    /// a load and two atomics. Returns the slot it was in, the slab, and the
    /// bitfield words known to be zero. With `vacate`, the slot is emptied
    /// (the slab goes to a slot the caller claimed); without, the caller
    /// keeps the slot, "being created", and must publish in it.
    fn take_over_empty(&self, vacate: bool) -> Option<(u32, u64, u32)> {
        let slots = self.slot_count();
        for _ in 0..TAKE_OVER_TRIES {
            let from = self.empties.take(slots)?;
            let guard = self.slot(from);
            let taken = if vacate {
                guard.reclaim()
            } else {
                guard.take_over()
            };
            let Some(slab) = taken else {
                continue;
            };
            // The slab is ours: no reference to it exists, and the slot's
            // count is dead. The granule table still names its old slot (a
            // stale free finds that slot empty, being created or holding
            // another slab, and counts a double free) until our publication
            // names the new one.
            if vacate {
                guard.vacate();
            }
            self.counters.slabs_reclaimed.fetch_add(1);
            // SAFETY: a published slab is mapped, with its header; a zero
            // count means every bit is clear (`count ≥ set bits`).
            let words = unsafe { Slab(slab).header() }.words;
            return Some((from, slab, words));
        }
        None
    }

    /// Gives back one reference per lane of `mask` to slot `index` (the
    /// lowest lane of `mask` does it).
    fn unlock_slot(&self, index: u32, mask: u32) {
        self.release_slot(index, mask, mask.count_ones());
    }

    /// The lowest lane of `mask` gives back `n` references to slot `index`;
    /// it gets the count after (other lanes: 0). A release to zero marks the
    /// slot's slab empty; it stays published.
    pub(super) fn release_slot(&self, index: u32, mask: u32, n: u32) -> u32 {
        if !simt::is_leader(mask) || n == 0 {
            return 0;
        }
        let after = self.slot(index).unlock(n);
        if after == 0 {
            self.empties.mark(index);
        }
        after
    }
}
