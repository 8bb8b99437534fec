//! The slot guard: a wait-free reference-counted pointer to a slab.
//!
//! Each slot of the slot table holds one guard. A slot is empty (`ptr == 0`),
//! being created (`ptr == SENTINEL`, owned by the lane that claimed it), or
//! published (`ptr` = a slab's address in `SLAB_SIZE` units: slabs are
//! aligned to their size, and the heap's region ends below
//! `SLOT_ADDR_LIMIT`, so 32 bits name every slab). The reference count says
//! how many reservations (allocations in flight or live, plus transient
//! locks) the slab has; a flag bit says that the count is live (a published
//! slab's, or one being published: `publish` makes it live just before the
//! pointer shows). Every other counter is dead — a slot never used (all
//! zero, as device memory starts), empty, claimed, or its slab being taken
//! over — so that the only zero *live* count is a published slab's that its
//! holders released. Both words are 32-bit: the search's atomics and
//! compare-and-swaps take one register per operand, not two.
//!
//! ```text
//!   ptr:   31 ............................................................ 0
//!        ┌─────────────────────────────────────────────────────────────────┐
//!        │ 0 (empty) | SENTINEL (being created) | slab >> SLAB_SHIFT       │
//!        └─────────────────────────────────────────────────────────────────┘
//!   refs:  31      30 ..................................................... 0
//!        ┌───────┬─────────────────────────────────────────────────────────┐
//!        │ LIVE  │ count                                                   │
//!        └───────┴─────────────────────────────────────────────────────────┘
//! ```
//!
//! While a slot is being created its dead counter counts who waits for the
//! creation: the claim sets it to a creation tag — the class above
//! `TAG_SHIFT`, the claiming group's lanes below — and each search group
//! that meets the slot adds its lanes. A group for which the creation will
//! have room waits for it; the others go on and claim slots of their own,
//! so a class grows by as many slabs at once as its waiting lanes need
//! (heap/search.rs).
//!
//! ```text
//!   refs while being created (dead):
//!          31  30 ....... 24  23 .......................................... 0
//!        ┌───┬──────────────┬─────────────────────────────────────────────┐
//!        │ 0 │ class + 1    │ lanes: the claim's + every registered group's │
//!        └───┴──────────────┴─────────────────────────────────────────────┘
//! ```
//!
//! A live count is at most a slab's blocks (2^17) plus the lanes in flight
//! (an H200 holds 270 336 threads at once): far below 2^31. A dead count's
//! garbage is overwritten by the next claim's tag and `publish`; each failed
//! acquire adds at most 32 (one group's lock) and needs a locker that read
//! the slab's word in the short window between a takeover's CAS and its
//! store to `ptr`, and registrations add a creation's waiters (at most the
//! lanes resident, 270 336 on an H200, below the tag's 2^24), so reading as
//! LIVE would take far more lock attempts than one window sees.
//!
//! * `acquire(n)`: `fetch_add(n)`; it succeeded iff LIVE was set (a failed
//!   one leaves garbage in a dead counter, which `publish` overwrites).
//! * `release(n)`: `fetch_sub(n)`, nothing more: a slab whose count reaches
//!   zero stays published, empty (its class's next malloc takes it as it
//!   is). The free path never disposes of a slab.
//! * `reclaim()`: CAS `LIVE | 0 → 0`, by a lane that wants an empty slab for
//!   something else (a claim of a new slab, for any class). Winning it means
//!   no one holds the slab and every later acquire fails, so the winner owns
//!   it; it empties the slot (`vacate`) and uses the slab elsewhere —
//!   or, `take_over()`, keeps the slot as a claim would (`SENTINEL`) and
//!   rebuilds the slab in it (a group that found no free slot).
//! * `lock(n, claim)` on a slot being created, by a search that may claim:
//!   `fetch_add(n)` too — on the dead counter a registration (`Creating`,
//!   with the tag and the lanes counted so far); if the creation was
//!   published meanwhile, an acquire like any other. A claim sets the tag
//!   with an exchange, not a store (loom: with a store, a model ended with
//!   a published slab whose count was dead, never to be reclaimed).
//! * `read()`: the count, or 0 for a dead counter. One load.
//! * `publish(n)`: after creating a slab, set the count to `LIVE | n` (a CAS
//!   from the dead counter: every acquire of it failed, so no holder exists),
//!   then store the address. In this order no locker can take the new slab
//!   and release it to zero — making it reclaimable — before the publishers'
//!   references count.
//!
//! Invariants (checked by the loom models in `tests/loom.rs` and by the
//! simulator stress tests):
//! * `count ≥ live reservations of the slab` while `ptr` is published, and a
//!   reservation is taken (acquire) before its bit is set and given back
//!   (release) after its bit is cleared, so `count ≥ set bits`;
//! * a slab is taken over only by the one `reclaim` that turned a live zero
//!   count dead — never while anyone holds it (a never-used slot's zero is
//!   dead, so a reclaim racing with the slot's first creation fails: loom
//!   found the version with a dead bit instead, where it won);
//! * a lane holding a successful acquire reads a published `ptr`, and that
//!   slab outlives its release.

use crate::simt::Scope;
use crate::size_class::SLAB_SHIFT;
use crate::sync::{AtomicU32, Ordering, fence};

/// The counter is live (a published slab's): acquires succeed. Without
/// it, the counter is dead and acquires fail.
pub const LIVE: u32 = 1 << 31;
/// `ptr` of a slot being created.
pub const SENTINEL: u32 = u32::MAX;
/// How many times a slab search retries a busy slot (its slab being taken
/// over) before moving on.
pub const MAX_TRIES: u32 = 16;

const _: () = assert!(LIVE.count_ones() == 1 && LIVE >> 31 == 1);

/// [`Lock::Creating`]'s `waiting` when the caller met a publication in
/// flight rather than a creation's dead counter, or did not register (it
/// may not claim: a free, an exhausted heap's search).
pub const UNKNOWN_WAIT: u32 = u32::MAX;
/// A creation tag's class sits above this bit; the lanes counted below.
pub const TAG_SHIFT: u32 = 24;
const TAG_LANES: u32 = (1 << TAG_SHIFT) - 1;
/// Class fields a tag can hold (7 bits, below `LIVE`): a class plus one,
/// so that 0 says "not tagged yet".
const TAG_CLASSES: u32 = 1 << (31 - TAG_SHIFT);
const _: () = assert!((crate::size_class::CLASS_COUNT as u32) < TAG_CLASSES);

/// The dead counter a claim of a slot for `class` by `n` lanes leaves while
/// it creates the slab: the class above [`TAG_SHIFT`], the lanes below.
/// Groups that meet the slot add their lanes to it ([`Lock::Creating`]),
/// so that a creation is waited for by about as many lanes as it will
/// serve, and the rest go on and create slabs of their own. Never 0 (`n`
/// ≥ 1), so that it also says "may claim" to [`Guard::lock`]. The class is
/// stored plus one: a claim takes the slot (its pointer's CAS) before it
/// tags the counter, and a group that registers in between adds its lanes
/// to a counter of 0 — a class field of 0, which says "not tagged yet" (the
/// tag's exchange will overwrite that addition: `Guard::lock` answers
/// [`UNKNOWN_WAIT`], look again), rather than "class 0". Read as class 0, it sent groups of every other class on
/// to claim slots of their own: two slabs where one served (4 blocks of
/// 128 threads at 64 B, 2026-12-04).
#[inline(always)]
pub const fn creation_tag(class: usize, n: u32) -> u32 {
    (((class as u32 + 1) % TAG_CLASSES) << TAG_SHIFT) | (n & TAG_LANES)
}

/// The room a search for `n` lanes wants in a slab of `usable` blocks
/// before it locks it: room for the whole group, so that a group is not
/// split over two slabs (a lock and a free more, its lanes beyond the room
/// searching again) — unless the group is more than half a slab, where
/// any room is worth taking (a group of 32 at 64 KiB, 31 blocks a slab,
/// wanting room for all would pass every slab and create a new one for
/// each malloc: `warpalloc stress`'s `resize` took 27 s instead of 0.06).
#[inline(always)]
pub const fn admission(n: u32, usable: u32) -> u32 {
    if n <= usable / 2 { n } else { 1 }
}

/// What a [`Lock::Creating`]'s `waiting` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creation {
    /// The class the slot is being created for.
    pub class: u32,
    /// The lanes counted on it: its creators' and its registered waiters'.
    pub lanes: u32,
}

impl Creation {
    /// Decodes a dead counter's value (`None` for [`UNKNOWN_WAIT`]).
    #[inline(always)]
    pub fn of(waiting: u32) -> Option<Creation> {
        let field = (waiting >> TAG_SHIFT) % TAG_CLASSES;
        let class = if planted(UNTAGGED_AS_CLASS_ZERO) {
            field
        } else {
            field.wrapping_sub(1)
        };
        (waiting != UNKNOWN_WAIT).then_some(Creation {
            class,
            lanes: waiting & TAG_LANES,
        })
    }

    /// Whether a search of `class` for `n` more lanes (slabs of `usable`
    /// blocks) would find room in this creation: it is of its class and
    /// will have room for the lanes counted on it and the `n`.
    #[inline(always)]
    pub fn serves(&self, class: u32, n: u32, usable: u32) -> bool {
        self.class == class && self.lanes + n <= usable
    }
}

/// Bugs a loom model can plant in this protocol, to show that the model
/// catches them (`tests/loom.rs`). Loom builds only.
#[cfg(loom)]
pub mod plant {
    use core::sync::atomic::{AtomicU32, Ordering};

    static ACTIVE: AtomicU32 = AtomicU32::new(NONE);

    /// No bug.
    pub const NONE: u32 = 0;
    pub use super::{
        POOL_PUSH_WITHOUT_RELEASE, POOL_WITHOUT_TAG, PUBLISH_BY_ADD, PUBLISH_COUNT_BEFORE_RELEASE,
        PUBLISH_WITHOUT_RELEASE, RECLAIM_WITHOUT_ACQUIRE, RECLAIM_WITHOUT_COUNT,
        RPC_FLIP_BEFORE_RELEASE, RPC_REPLY_WITHOUT_RELEASE, TAKE_CLEARS_BY_STORE,
        UNTAGGED_AS_CLASS_ZERO,
    };

    /// Plants `bug` (or `NONE`) for the models that run next.
    pub fn set(bug: u32) {
        ACTIVE.store(bug, Ordering::SeqCst);
    }

    pub(crate) fn active(bug: u32) -> bool {
        ACTIVE.load(Ordering::SeqCst) == bug
    }
}

/// Planted bug: `reclaim` takes the slab over by a swap to dead whatever
/// the count was, so it can take a slab that a locker holds.
pub const RECLAIM_WITHOUT_COUNT: u32 = 1;
/// Planted bug: `reclaim`'s winner goes on without the acquire fence, so its
/// reuse of the slab races with the last holders' accesses.
pub const RECLAIM_WITHOUT_ACQUIRE: u32 = 2;
/// Planted bug: `publish` stores the pointer without the release fence, so
/// lockers can read the slab before it is initialised.
pub const PUBLISH_WITHOUT_RELEASE: u32 = 3;
/// Planted bug: `publish` makes the count live before its release fence (the
/// order it had first; found in review), so a stale locker — one that read
/// the slot's previous slab, the same address when a slab is taken over and
/// rebuilt in its slot — acquires the new count and uses the slab before
/// its initialisation is visible.
pub const PUBLISH_COUNT_BEFORE_RELEASE: u32 = 4;

/// Planted bug: the RPC client flips its flag before the release fence, so
/// the server can read arguments that are not written yet.
pub const RPC_FLIP_BEFORE_RELEASE: u32 = 5;
/// Planted bug: the RPC server answers without the release fence, so the
/// client can read a reply that is not written yet.
pub const RPC_REPLY_WITHOUT_RELEASE: u32 = 6;
/// Planted bug: the slab pool swings its head without changing the tag, so a
/// pop that read a stale link wins its CAS after the same slab came back on
/// top (ABA) and hands a slab out twice.
pub const POOL_WITHOUT_TAG: u32 = 7;
/// Planted bug: the slab pool's push links the slab without the release
/// fence, so a popper can use the slab before the pusher's writes to it.
pub const POOL_PUSH_WITHOUT_RELEASE: u32 = 8;
/// Planted bug: the empty-slot bitmap's `take` clears its bit by a load and
/// a store instead of one `fetch_and`, so a slot marked in the same word
/// between the two is lost (its empty slab never taken over).
pub const TAKE_CLEARS_BY_STORE: u32 = 9;

/// Planted bug: `publish` makes the count live by adding `LIVE | n` to the
/// dead counter instead of setting it, so a creation's tag and the lanes
/// that registered to wait for it become references that no one holds:
/// the slab never empties.
pub const PUBLISH_BY_ADD: u32 = 10;
/// Bug: a dead counter that the claim has not tagged yet reads as a
/// creation of class 0 (the tag's class stored as it is, 0 a class): a
/// group of another class that registered before the tag goes on to claim
/// a slot of its own while the creation would have served it.
pub const UNTAGGED_AS_CLASS_ZERO: u32 = 11;

/// Whether `bug` is planted (always false outside loom builds).
#[inline(always)]
pub(crate) fn planted(bug: u32) -> bool {
    #[cfg(loom)]
    {
        plant::active(bug)
    }
    #[cfg(not(loom))]
    {
        let _ = bug;
        false
    }
}

/// The slot word of a slab: its address in slab units (slabs are
/// `SLAB_SIZE`-aligned, and the heap's region ends below
/// [`SLOT_ADDR_LIMIT`], so it is neither 0 nor `SENTINEL`).
#[inline(always)]
fn word_of(slab: u64) -> u32 {
    (slab >> SLAB_SHIFT) as u32
}

/// The slab a slot word names.
#[inline(always)]
fn slab_of(word: u32) -> u64 {
    u64::from(word) << SLAB_SHIFT
}

/// Slabs lie below this address, so that a slot word names every one.
pub const SLOT_ADDR_LIMIT: u64 = (SENTINEL as u64) << SLAB_SHIFT;

/// The reference count of a slot.
#[repr(transparent)]
#[derive(Debug)]
pub struct RefCount {
    counter: AtomicU32,
}

impl RefCount {
    /// A count of zero (an empty slot).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RefCount {
            counter: AtomicU32::new(0),
        }
    }

    /// A count of zero (an empty slot).
    #[cfg(loom)]
    pub fn new() -> Self {
        RefCount {
            counter: AtomicU32::new(0),
        }
    }

    /// Takes `n` references; the count after, or `None` if the counter is
    /// dead (the references are not held).
    #[inline(always)]
    pub fn acquire(&self, n: u32) -> Option<u32> {
        let value = self.add(n);
        (value & LIVE != 0).then_some(value & !LIVE)
    }

    /// Adds `n` to the counter and returns its raw value after: a live
    /// count (`LIVE` set: `n` references taken), or a dead counter's
    /// garbage (the references are not held).
    #[inline(always)]
    fn add(&self, n: u32) -> u32 {
        self.counter.fetch_add(n).wrapping_add(n)
    }

    /// Sets a dead counter to `tag` (a claim's [`creation_tag`]): only a
    /// slot's claimant does this, and no acquire can succeed on it until
    /// `publish` makes it live. An exchange, not a store (loom: with a
    /// store, `guard_claim_race` ended with a published slab whose count
    /// was dead). A racing registration may be lost or land on top: the
    /// value only steers how many groups wait for the creation.
    #[inline(always)]
    fn tag(&self, tag: u32) {
        self.counter.swap(tag & !LIVE);
    }

    /// Gives back `n` references taken by a successful [`acquire`];
    /// returns the count after. A count of zero leaves the slab published
    /// and empty.
    ///
    /// [`acquire`]: RefCount::acquire
    #[inline(always)]
    pub fn release(&self, n: u32) -> u32 {
        self.counter.fetch_sub(n).wrapping_sub(n) & !LIVE
    }

    /// Takes the slab over if no one holds it (a live zero count): the
    /// counter becomes dead and the caller owns the slab.
    #[inline(always)]
    pub fn reclaim(&self) -> bool {
        if planted(RECLAIM_WITHOUT_COUNT) {
            return self.counter.swap(0) & LIVE != 0;
        }
        self.counter.compare_exchange(LIVE, 0).is_ok()
    }

    /// The count, or 0 for a dead counter. One load.
    #[inline(always)]
    pub fn read(&self) -> u32 {
        let value = self.counter.load(Ordering::Relaxed);
        if value & LIVE != 0 { value & !LIVE } else { 0 }
    }

    /// Sets the count of a slab about to be published to `LIVE | n`, from a
    /// dead counter. A compare-and-swap, not a store: a
    /// stale locker's failing `fetch_add` on the dead counter must not be
    /// lost or overwrite ours, and every acquire that succeeds afterwards
    /// counts on top of `n`.
    fn establish(&self, n: u32) {
        if planted(PUBLISH_BY_ADD) {
            self.counter.fetch_add(LIVE | n);
            return;
        }
        let mut seen = self.counter.load(Ordering::Relaxed);
        while let Err(now) = self.counter.compare_exchange(seen, LIVE | n) {
            seen = now;
        }
    }

    /// The raw counter (for reports and checks).
    pub fn raw(&self) -> u32 {
        self.counter.load(Ordering::Relaxed)
    }
}

impl Default for RefCount {
    fn default() -> Self {
        Self::new()
    }
}

/// What a lock attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// The slot holds slab `slab`; the caller holds `n` references and the
    /// count after its acquire was `count`.
    Acquired {
        /// The slab's address.
        slab: u64,
        /// The count after the acquire.
        count: u32,
    },
    /// The slot was empty and the caller claimed it: it must create a slab
    /// and [`Guard::publish`] it, or [`Guard::abandon`] the claim.
    Claimed,
    /// The slot is being created: retry it soon (the slab may be for us).
    /// `waiting` is the dead counter after the caller's addition: the
    /// claim's [`creation_tag`] plus every group's lanes that registered
    /// so far, the caller's included ([`Creation::of`] reads it); or
    /// [`UNKNOWN_WAIT`] when the caller met a creation that was just
    /// being published (retry at once) or did not register (`claim` 0).
    Creating {
        /// The dead counter after the caller's addition.
        waiting: u32,
    },
    /// As `Creating`, but the caller's stale reference was the slot's
    /// last: its new slab is empty now, and the caller must mark it empty
    /// (`EmptySlots::mark`).
    Emptied,
    /// The slot's slab is being taken over: retry a few times, then another.
    Busy,
    /// The slot is empty and the caller may not claim it.
    Empty,
}

/// One slot of the slot table (`repr(C)`: `ptr`, then the count, 32 bits
/// each; a host reads slot tables by this layout).
#[repr(C)]
#[derive(Debug)]
pub struct Guard {
    ptr: AtomicU32,
    refs: RefCount,
}

impl Guard {
    /// An empty slot.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Guard {
            ptr: AtomicU32::new(0),
            refs: RefCount::new(),
        }
    }

    /// An empty slot.
    #[cfg(loom)]
    pub fn new() -> Self {
        Guard {
            ptr: AtomicU32::new(0),
            refs: RefCount::new(),
        }
    }

    /// Tries to take `n` references to the slot's slab, claiming the slot
    /// when it is empty and `claim` is not 0 — a [`creation_tag`], which
    /// the claim leaves in the dead counter. One lane calls it for its
    /// group. Meeting a slot being created, the caller's `n` lanes are
    /// added to the creation's count ([`Lock::Creating`]).
    pub fn lock(&self, n: u32, claim: u32) -> Lock {
        let seen = self.ptr.load(Ordering::Relaxed);
        if seen == 0 {
            if claim == 0 {
                return Lock::Empty;
            }
            if self.claim(claim) {
                return Lock::Claimed;
            }
            // Claimed (or published) by another lane since.
        }
        // On a slab: an acquire. On a creation (SENTINEL; also an empty
        // slot claimed since our load) by a search that may claim: a
        // registration as its waiter (the dead counter counts the lanes
        // that wait for it), or, if it was published meanwhile, an
        // acquire. Others (frees, an exhausted heap's search) only learn
        // that it is being created. The guard does not wait: its caller
        // decides (the search waits only for a creation of its own class
        // that will have room for it, out of line, see heap/search.rs).
        let creating = seen == 0 || seen == SENTINEL;
        if creating && claim == 0 {
            return Lock::Creating {
                waiting: UNKNOWN_WAIT,
            };
        }
        let raw = self.refs.add(n);
        if raw & LIVE == 0 {
            return if creating {
                // A class field of 0: the claim has not tagged the counter
                // yet, and its tag will overwrite our addition — we are
                // not counted, and must look again.
                let untagged = raw >> TAG_SHIFT == 0 && !planted(UNTAGGED_AS_CLASS_ZERO);
                Lock::Creating {
                    waiting: if untagged { UNKNOWN_WAIT } else { raw },
                }
            } else {
                // A published slab whose count is dead: being taken over.
                Lock::Busy
            };
        }
        let count = raw & !LIVE;
        // ORDERING: acquire (gpu): pairs with the release fence in `publish`
        // (before it makes the count live): a successful acquire means the
        // slab we now read was initialised (header, bitfield, granule entry)
        // before our reference counted.
        fence(Ordering::Acquire, Scope::Gpu);
        // Re-read: the slab may have been replaced between the first load and
        // the acquire; the reference now protects the current one.
        let word = self.ptr.load(Ordering::Relaxed);
        if word == 0 || word == SENTINEL {
            // We read a dead slab's address, and our acquire landed on the
            // count a publisher made live before storing its new address: give
            // ours back and retry. If ours was the last reference (the
            // publishers stored the address, allocated and freed meanwhile),
            // the new slab is empty now, and the caller must mark it.
            if self.refs.release(n) == 0 {
                return Lock::Emptied;
            }
            return Lock::Creating {
                waiting: UNKNOWN_WAIT,
            };
        }
        Lock::Acquired {
            slab: slab_of(word),
            count,
        }
    }

    /// Claims the slot if it is empty (true), leaving `tag` (a
    /// [`creation_tag`]) in its dead counter: the caller must create a slab
    /// and [`Guard::publish`] it, or [`Guard::abandon`] the claim. Unlike
    /// [`Guard::lock`], a slot that is not empty is left as it is — no
    /// registration on a creation, no reference to a slab.
    #[inline(always)]
    pub fn claim(&self, tag: u32) -> bool {
        if self.ptr.compare_exchange(0, SENTINEL).is_err() {
            return false;
        }
        // ORDERING: acquire (gpu): pairs with the release fence in `vacate`:
        // the previous occupant's takeover happens-before our creation —
        // our tag below included, which must come after the takeover's CAS
        // of the counter (loom found the tag stored before this fence land
        // before that CAS in the counter's order and turn a published
        // slab's count dead).
        fence(Ordering::Acquire, Scope::Gpu);
        // The counter is dead (an empty slot's): it counts the lanes that
        // wait for this creation until `publish`.
        self.refs.tag(tag);
        true
    }

    /// Whether a search for `n` lanes of class `class` (slabs of `usable`
    /// blocks) should lock the slot, from one load of its counter: a live
    /// count with the room [`admission`] wants (a zero count, an empty
    /// slab, only if the search may claim); a dead one (an empty slot, a
    /// creation, a takeover) only if
    /// the search may claim, and not a creation tagged for another class or
    /// one that will have no room for the `n` lanes — registering there
    /// would only inflate its count (its own class's groups would then pass
    /// it and claim more slabs than their lanes need) and cost an atomic.
    #[inline(always)]
    pub fn worth_a_lock(&self, class: u32, usable: u32, n: u32, may_claim: bool) -> bool {
        let raw = self.refs.raw();
        if raw & LIVE != 0 {
            let count = raw & !LIVE;
            return count + admission(n, usable) <= usable && (may_claim || count > 0);
        }
        // An empty slot's counter, or a claim's not tagged yet: class
        // field 0 (claimable, or to look at again).
        may_claim
            && (raw >> TAG_SHIFT == 0
                || Creation::of(raw).is_none_or(|c| c.serves(class, n, usable)))
    }

    /// Whether the slot is empty now (one load): a search looks for its
    /// class's emptied slabs before it claims one.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.ptr.load(Ordering::Relaxed) == 0
    }

    /// Whether the slot is being created by a claim that has not tagged its
    /// counter yet, or rebuilt by a takeover (which leaves it untagged):
    /// a registration now would not count (two loads; a search polls this
    /// instead of locking again).
    #[inline(always)]
    pub fn is_untagged_claim(&self) -> bool {
        self.is_creating() && self.refs.raw() >> TAG_SHIFT == 0
    }

    /// Whether the slot is being created now (one load: a waiter polls
    /// this instead of registering again).
    #[inline(always)]
    pub fn is_creating(&self) -> bool {
        self.ptr.load(Ordering::Relaxed) == SENTINEL
    }

    /// Publishes a slab created after [`Lock::Claimed`], with `n`
    /// references held by the publishing group; returns the count, `n`.
    ///
    /// The count is made live *before* the pointer appears: a locker that
    /// reads the pointer finds the publishers' references counted. (The
    /// other order would be safe too — a dead count refuses acquires — but
    /// this one keeps "published ⇒ live" true at every instant.)
    pub fn publish(&self, slab: u64, n: u32) -> u32 {
        if planted(PUBLISH_COUNT_BEFORE_RELEASE) {
            self.refs.establish(n);
        }
        // ORDERING: release (gpu), before both writes: the slab's header
        // and zeroed bitfield (the group's stores, ordered before this by
        // `init`'s syncwarp) and its granule entry happen-before any lane
        // that acquires the live count — a stale locker may, before the
        // pointer shows — or reads the pointer (pairs with the acquire fence
        // in `lock`).
        if !planted(PUBLISH_WITHOUT_RELEASE) {
            fence(Ordering::Release, Scope::Gpu);
        }
        if !planted(PUBLISH_COUNT_BEFORE_RELEASE) {
            self.refs.establish(n);
        }
        self.ptr.store(word_of(slab), Ordering::Relaxed);
        n
    }

    /// Gives up a claim (no memory for a slab).
    pub fn abandon(&self) {
        self.ptr.store(0, Ordering::Relaxed);
    }

    /// Gives back `n` references; returns the count after (0: the slab is
    /// empty now, and stays published).
    #[inline(always)]
    pub fn unlock(&self, n: u32) -> u32 {
        // ORDERING: release (gpu): our accesses to the slab (block data,
        // bitfield) happen-before a later `reclaim` of it; pairs with the
        // acquire fence there.
        fence(Ordering::Release, Scope::Gpu);
        self.refs.release(n)
    }

    /// Takes the slot's slab over when no one holds it (an empty slab):
    /// returns the slab, which the caller now owns — it calls
    /// [`Guard::vacate`] and uses the slab elsewhere.
    pub fn reclaim(&self) -> Option<u64> {
        if !self.refs.reclaim() {
            return None;
        }
        // ORDERING: acquire (gpu): pairs with the release fence in `unlock`
        // (and `publish`): every holder's accesses to the slab happen-before
        // our reuse of it.
        if !planted(RECLAIM_WITHOUT_ACQUIRE) {
            fence(Ordering::Acquire, Scope::Gpu);
        }
        // Read after the CAS: only the winner of a reclaim changes a
        // published pointer, so it is the slab whose count we took. A live
        // zero count means a published slab: the count turns live in
        // `publish` before the pointer shows, and its publishers hold it
        // above zero until after (the release whose zero we read ordered
        // the pointer's store before us).
        match self.ptr.load(Ordering::Relaxed) {
            0 | SENTINEL => None,
            word => Some(slab_of(word)),
        }
    }

    /// Takes the slot's empty slab over and keeps the slot, as a claim
    /// would: the slot shows `SENTINEL` (being created) and the caller must
    /// [`Guard::publish`] a slab in it — the same slab, reinitialised, when
    /// it likes — or [`Guard::abandon`] it.
    pub fn take_over(&self) -> Option<u64> {
        let slab = self.reclaim()?;
        self.ptr.store(SENTINEL, Ordering::Relaxed);
        Some(slab)
    }

    /// Empties the slot after its slab was reclaimed.
    pub fn vacate(&self) {
        // ORDERING: release (gpu): the reclaim's writes (granule table)
        // happen-before a later claim of this slot; pairs with the acquire
        // fence of a claim in `lock`.
        fence(Ordering::Release, Scope::Gpu);
        self.ptr.store(0, Ordering::Relaxed);
    }

    /// The slot's count, or 0 when it is empty, being created, or being
    /// taken over. One load.
    #[inline(always)]
    pub fn use_count(&self) -> u32 {
        self.refs.read()
    }

    /// The published slab, if any (no reference taken: for checks only).
    pub fn peek(&self) -> Option<u64> {
        match self.ptr.load(Ordering::Relaxed) {
            0 | SENTINEL => None,
            word => Some(slab_of(word)),
        }
    }

    /// The raw pointer word (for checks): 0, `SENTINEL` or a slab.
    pub fn raw_ptr(&self) -> u32 {
        self.ptr.load(Ordering::Relaxed)
    }

    /// The raw reference counter (for checks).
    pub fn raw_count(&self) -> u32 {
        self.refs.raw()
    }
}

impl Default for Guard {
    fn default() -> Self {
        Self::new()
    }
}
