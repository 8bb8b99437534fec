//! The slot guard: a wait-free reference-counted pointer to a slab, in one
//! 64-bit word.
//!
//! Each slot of the slot table holds one guard. A slot is empty (`ptr == 0`),
//! being created (`ptr == SENTINEL`, owned by the lane that claimed it), or
//! published (`ptr` = a slab's address in `SLAB_SIZE` units: slabs are
//! aligned to their size, and the heap's region ends below
//! `SLOT_ADDR_LIMIT`, so 32 bits name every slab). The counter says how
//! many reservations (allocations in flight or live, plus transient locks)
//! the slab has, and of which class it is; a flag bit says that it is live
//! (a published slab's). Every other counter is dead — a slot never used
//! (all zero, as device memory starts), empty, claimed, or its slab being
//! taken over — so that the only zero *live* count is a published slab's
//! that its holders released.
//!
//! Pointer and counter share one word, so that one atomic reads both at one
//! instant: a lock is one `fetch_add` that takes the references and returns
//! the slab they hold and its class (no load before, no re-read after, no
//! header read); a claim sets the pointer and its creation tag in one
//! compare-and-swap; a publication sets the pointer and the live count in
//! one swap. (With two 32-bit words, a lock loaded the pointer, added to
//! the count and loaded the pointer again, a locker could hold a stale
//! reference to a slab rebuilt meanwhile, and a creation could be met
//! before its tag: 17 dependent round trips per malloc/free pair in the
//! contention test, 9 now; see BENCHMARKS.md.)
//!
//! ```text
//!   word:  63 ........................... 32  31 ........................... 0
//!        ┌──────────────────────────────────┬──────────────────────────────────┐
//!        │ counter (refs)                   │ ptr                              │
//!        └──────────────────────────────────┴──────────────────────────────────┘
//!   ptr:   0 (empty) | SENTINEL (being created) | slab >> SLAB_SHIFT
//!   refs, live (published):
//!          31    30 ....... 24  23 .......................................... 0
//!        ┌─────┬──────────────┬─────────────────────────────────────────────┐
//!        │LIVE │ class + 1    │ count                                        │
//!        └─────┴──────────────┴─────────────────────────────────────────────┘
//!   refs while being created (dead):
//!        ┌─────┬──────────────┬─────────────────────────────────────────────┐
//!        │  0  │ class + 1    │ lanes: the claim's + every registered group's │
//!        └─────┴──────────────┴─────────────────────────────────────────────┘
//! ```
//!
//! The pointer is the low half, as a host reads a slot (pointer, then
//! counter, 32 bits each, little-endian), and additions to the counter are
//! additions of `n << 32`: a carry out of the counter leaves the word, never
//! touching the pointer.
//!
//! While a slot is being created its dead counter counts who waits for the
//! creation: the claim sets it to a creation tag — the class above
//! `TAG_SHIFT`, the claiming group's lanes below — and each search group
//! that meets the slot adds its lanes. A group for which the creation will
//! have room waits for it; the others go on and claim slots of their own,
//! so a class grows by as many slabs at once as its waiting lanes need
//! (heap/search.rs). A takeover that keeps its slot (`take_over`) leaves it
//! being created with an untagged counter (class field 0): a group that
//! meets it looks again.
//!
//! A live count is at most a slab's blocks (2^17) plus the lanes in flight
//! (an H200 holds 270 336 threads at once): far below the count field's
//! 2^24, so an addition never reaches the class. A dead counter's garbage —
//! failed acquires, at most 32 each, on an empty slot, a slab being taken
//! over, or a creation (where a free's, an exhausted search's or a blind
//! lock's lanes count as waiters they are not: they only steer who waits)
//! — is overwritten by
//! the next claim, takeover, vacate or publication; `LIVE` on an empty slot
//! or a creation is no state the protocol makes, and is read as dead
//! (`Seen::is_live`).
//!
//! * `lock(n)`: `fetch_add(n << 32)`; it succeeded iff the counter it left
//!   is live (a failed one leaves garbage in a dead counter, or counts the
//!   caller on a creation).
//! * `release(n)`: `fetch_sub(n << 32)`, nothing more: a slab whose count
//!   reaches zero stays published, empty (its class's next malloc takes it
//!   as it is). The free path never disposes of a slab.
//! * `reclaim()`: CAS `slab, LIVE | class | 0 → slab, 0`, by a lane that
//!   wants an empty slab for something else. Winning it means no one holds
//!   the slab and every later acquire fails, so the winner owns it; it
//!   empties the slot (`vacate`) and uses the slab elsewhere — or,
//!   `take_over()`, CAS `→ SENTINEL, 0`: keeps the slot as a claim would
//!   and rebuilds the slab in it (a group that found no free slot).
//! * `claim(tag)`: CAS `0, garbage → SENTINEL, tag`.
//! * `publish(slab, class, n)`: swap `SENTINEL, dead → slab, LIVE | class |
//!   n`, after the release fence that makes the slab's initialisation
//!   visible to every acquire that lands on the new count.
//! * `look()`: pointer, count and class, one load.
//!
//! Invariants (checked by the loom models in `tests/loom.rs` and by the
//! simulator stress tests; `DeviceHeap::check` checks the class against
//! the slab's header):
//! * `count ≥ live reservations of the slab` while `ptr` is published, and a
//!   reservation is taken (acquire) before its bit is set and given back
//!   (release) after its bit is cleared, so `count ≥ set bits`;
//! * a live counter's class is its slab's (`publish` names it);
//! * a slab is taken over only by the one `reclaim` that turned a live zero
//!   count dead — never while anyone holds it;
//! * a lane holding a successful acquire holds the slab the same atomic
//!   returned, and that slab outlives its release.

use crate::simt::Scope;
use crate::size_class::SLAB_SHIFT;
use crate::sync::{AtomicU64, Ordering, fence};

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
/// may not claim: a free, an exhausted heap's search, a scan's lock made
/// before it read the exhausted mark — the blind lock of its hint, say).
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
/// stored plus one, so that a class field of 0 says "not tagged": a
/// takeover's rebuild (`Guard::take_over` leaves the counter 0), which a
/// group that meets it must look at again ([`UNKNOWN_WAIT`]), rather than
/// a creation of class 0. (When a claim set its pointer and its tag in two
/// atomics, a group that registered in between read the untagged counter
/// as class 0 and went on to claim a slot of its own: two slabs where one
/// served, 4 blocks of 128 threads at 64 B, 2026-12-04.) A live counter
/// keeps the class the same way ([`live_count`]).
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

/// The room a search for `n` lanes wants in a live slab of its class of
/// `usable` blocks before it locks it ([`Seen::worth_a_lock`]):
/// [`admission`]'s room times `1 + headroom` (0: none, 1: twice over, 2:
/// three times over, 3: four times over; search.rs, `headroom`, which asks
/// three times over only in classes of 255 blocks a slab or more, where
/// that is about half a slab or less, and `room_behind`, which asks three
/// and four times over where three times fits a slab), but admission's
/// alone in a class of one block a slab —
/// twice the room is more than such a slab holds, and an empty slab of the
/// class is worth a lock whatever a search wants.
#[inline(always)]
pub const fn wanted(n: u32, usable: u32, headroom: u32) -> u32 {
    admission(n, usable) * if usable > 1 { 1 + headroom } else { 1 }
}

// 8 KiB (255 blocks), a group of 32: 32, 64, 96.
const _: () = assert!(wanted(32, 255, 0) == 32 && wanted(32, 255, 1) == 64);
const _: () = assert!(wanted(32, 255, 2) == 96);
// A class of one block a slab: one.
const _: () = assert!(wanted(1, 1, 1) == 1 && wanted(32, 1, 2) == 1);

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
        LOCK_WITHOUT_ACQUIRE, MARK_WITHOUT_RELEASE, POOL_PUSH_WITHOUT_RELEASE, POOL_WITHOUT_TAG,
        PUBLISH_BY_ADD, PUBLISH_WITHOUT_RELEASE, RECLAIM_WITHOUT_ACQUIRE, RECLAIM_WITHOUT_COUNT,
        RPC_FLIP_BEFORE_RELEASE, RPC_LOCK_WITHOUT_FENCES, RPC_LOCK_WITHOUT_WAIT,
        RPC_REPLY_WITHOUT_RELEASE, TAKE_CLEARS_BY_STORE, TAKE_MARK_WITHOUT_ACQUIRE,
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
/// Planted bug: `lock` returns a reference without its acquire fence, so a
/// locker whose addition lands on a publication's live count — of a slab
/// taken over and rebuilt in its slot, say — uses the slab before its
/// initialisation is visible.
pub const LOCK_WITHOUT_ACQUIRE: u32 = 4;

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
/// Bug: a tag's class field is read as it is stored (class plus one), not
/// less one — as when the untagged 0 was read as class 0: a group meets a
/// creation of its own class as another's and goes on to claim a slot of
/// its own while the creation would have served it.
pub const UNTAGGED_AS_CLASS_ZERO: u32 = 11;
/// Planted bug: the empty-slot bitmap's `mark` sets its bit without the
/// release fence, so a taker that sees the bit can read the count from
/// before the release that emptied the slab, fail to reclaim it, and use
/// the mark up: the slab stays empty and unmarked.
pub const MARK_WITHOUT_RELEASE: u32 = 12;
/// Planted bug: the empty-slot bitmap's `take` clears a mark without the
/// acquire fence after it, with the same outcome as
/// [`MARK_WITHOUT_RELEASE`].
pub const TAKE_MARK_WITHOUT_ACQUIRE: u32 = 13;

/// Planted bug: an RPC client locks and unlocks a port without the gpu
/// fences around the lock bit, so the next holder can read the port's
/// flags as they were before the last holder's request: it takes a port
/// whose request the server has not taken for free, and overwrites it.
pub const RPC_LOCK_WITHOUT_FENCES: u32 = 14;
/// Planted bug: an RPC client that locked a port does not wait until the
/// server has taken the port's previous request (a free, which no one
/// waits for), and overwrites it.
pub const RPC_LOCK_WITHOUT_WAIT: u32 = 15;

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

/// The guard word of a slot whose pointer is `ptr` and whose counter is
/// `refs`.
#[inline(always)]
const fn pack(ptr: u32, refs: u32) -> u64 {
    (refs as u64) << REFS_SHIFT | ptr as u64
}

/// Where the counter sits in the guard word: the high half, so that the
/// low half is the pointer as a host reads the slot (`repr(C)` order of old:
/// pointer, then count), and a carry out of the counter leaves the word.
const REFS_SHIFT: u32 = 32;

/// The counter of a published slab of `class` holding `n` references.
#[inline(always)]
pub const fn live_count(class: usize, n: u32) -> u32 {
    LIVE | creation_tag(class, n)
}

/// A live counter's references (the lanes field: a class sits above).
const COUNT_MASK: u32 = TAG_LANES;

/// One load of a slot: its pointer and its counter at one instant, and
/// what a search reads from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    ptr: u32,
    refs: u32,
}

impl Seen {
    #[inline(always)]
    fn of(word: u64) -> Seen {
        Seen {
            ptr: word as u32,
            refs: (word >> REFS_SHIFT) as u32,
        }
    }

    /// Whether the slot publishes a slab with a live counter. (`LIVE` on
    /// an empty slot or a creation is no state the protocol makes: only
    /// lockers' failed additions, piled up past 2^31, could set it.)
    #[inline(always)]
    fn is_live(self) -> bool {
        self.refs & LIVE != 0 && self.ptr != 0 && self.ptr != SENTINEL
    }

    /// The references, or 0 for a dead counter.
    #[inline(always)]
    pub fn count(self) -> u32 {
        if self.is_live() {
            self.refs & COUNT_MASK
        } else {
            0
        }
    }

    /// The class of a published slab (`None` for a dead counter).
    #[inline(always)]
    pub fn class(self) -> Option<u32> {
        self.is_live()
            .then(|| ((self.refs >> TAG_SHIFT) % TAG_CLASSES).wrapping_sub(1))
    }

    /// Whether the slot is empty.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.ptr == 0
    }

    /// Whether the slot is being created for `class` with more lanes
    /// counted on it than its slab will have room for, `n` more included:
    /// its class's demand is ahead of its slabs, and a search that meets it
    /// claims the next empty slot it finds at once.
    #[inline(always)]
    pub fn is_crowded_creation(self, class: u32, n: u32, usable: u32) -> bool {
        !self.is_live()
            && self.ptr != 0
            && Creation::of(self.refs)
                .is_some_and(|c| c.class == class && !c.serves(class, n, usable))
    }

    /// Whether a search for `n` lanes of class `class` (slabs of `usable`
    /// blocks) should lock the slot: a published slab of its class with
    /// the room it wants (an empty one, a zero count, only if the search
    /// may claim); a dead counter (an empty slot, a creation, a
    /// takeover) only if the search may claim, and not a creation tagged
    /// for another class or one that will have no room for the `n` lanes —
    /// registering there would only inflate its count (its own class's
    /// groups would then pass it and claim more slabs than their lanes
    /// need) and cost an atomic. Another class's slab is passed without a
    /// lock: the counter names the class.
    ///
    /// The room wanted: what [`wanted`] says for `headroom` — what
    /// [`admission`] wants, twice or three times over with headroom (a
    /// search that may claim, away from its stream's own slab, or at it
    /// when it looks again after a lock found no room, leaves a slab's
    /// last room to the warps whose hints name it: room that shows for one
    /// group is mostly what those warps freed a moment ago and come back
    /// for, and a group that takes it sends one of them walking to the
    /// class's frontier, to claim a slab the launch did not need) — or one
    /// block with `any_room` (a search's last try before null takes all
    /// the room there is). An empty slab has room whatever
    /// the search wants: in a class of one block a slab, twice the
    /// admission is more than a slab, its own emptied slabs were passed
    /// and a claim was sent back to them for ever
    /// (`every_size_from_1_byte_to_3_mib` hung): no headroom there.
    #[inline(always)]
    pub fn worth_a_lock(
        self,
        class: u32,
        usable: u32,
        n: u32,
        may_claim: bool,
        headroom: u32,
        any_room: bool,
    ) -> bool {
        let raw = self.refs;
        if self.is_live() {
            let count = raw & COUNT_MASK;
            let want = if any_room {
                1
            } else {
                wanted(n, usable, headroom)
            };
            return self.class() == Some(class)
                && count + want <= usable
                && (may_claim || count > 0);
        }
        // An empty slot (whatever failed additions its counter holds), or
        // a takeover's rebuild (class field 0, not tagged): claimable, or
        // to look at again.
        may_claim
            && (self.ptr == 0
                || raw >> TAG_SHIFT == 0
                || Creation::of(raw).is_none_or(|c| c.serves(class, n, usable)))
    }
}

/// What a lock attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// The slot holds slab `slab` of class `class`; the caller holds `n`
    /// references and the count after its acquire was `count`.
    Acquired {
        /// The slab's address.
        slab: u64,
        /// The count after the acquire.
        count: u32,
        /// The slab's class (its publication's).
        class: u32,
    },
    /// The slot was empty and the caller claimed it: it must create a slab
    /// and [`Guard::publish`] it, or [`Guard::abandon`] the claim.
    Claimed,
    /// The slot is being created: retry it soon (the slab may be for us).
    /// `waiting` is the dead counter after the caller's addition: the
    /// claim's [`creation_tag`] plus every group's lanes that registered
    /// so far, the caller's included ([`Creation::of`] reads it); or
    /// [`UNKNOWN_WAIT`] when the slot was being rebuilt by a takeover
    /// (untagged), was claimed by another lane as the caller met it empty,
    /// or the caller did not register (`claim` 0).
    Creating {
        /// The dead counter after the caller's addition.
        waiting: u32,
    },
    /// The slot's slab is being taken over: retry a few times, then another.
    Busy,
    /// The slot is empty and the caller may not claim it.
    Empty,
}

/// One slot of the slot table: one 64-bit word, the pointer in its low
/// half and the counter in its high half (a host reads a slot as the
/// pointer, then the counter, 32 bits each).
#[repr(transparent)]
#[derive(Debug)]
pub struct Guard {
    word: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<Guard>() == 8);
const _: () = assert!(core::mem::align_of::<Guard>() == 8);

impl Guard {
    /// An empty slot.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Guard {
            word: AtomicU64::new(0),
        }
    }

    /// An empty slot.
    #[cfg(loom)]
    pub fn new() -> Self {
        Guard {
            word: AtomicU64::new(0),
        }
    }

    /// The slot now: pointer and counter from one load.
    #[inline(always)]
    pub fn look(&self) -> Seen {
        Seen::of(self.word.load(Ordering::Relaxed))
    }

    /// Tries to take `n` references to the slot's slab, claiming the slot
    /// when it is empty and `claim` is not 0 — a [`creation_tag`], which
    /// the claim leaves in the dead counter. One lane calls it for its
    /// group. Meeting a slot being created, the caller's `n` lanes are
    /// added to the creation's count ([`Lock::Creating`]).
    ///
    /// One `fetch_add` on the whole word: the counter it adds to and the
    /// pointer it returns are the slot's at one instant, so a live counter
    /// names the slab the references hold (no load before, no re-read
    /// after).
    pub fn lock(&self, n: u32, claim: u32) -> Lock {
        let unit = pack(0, n);
        let after = Seen::of(self.word.fetch_add(unit).wrapping_add(unit));
        match after.ptr {
            // An empty slot: our addition is garbage in its dead counter
            // (the next claim's tag replaces it).
            0 if claim == 0 => Lock::Empty,
            0 if self.claim(claim) => Lock::Claimed,
            // Claimed (or published) by another lane since.
            0 => Lock::Creating {
                waiting: UNKNOWN_WAIT,
            },
            // A creation met by a search that may claim: a registration as
            // its waiter (lanes counted on the dead counter). A class field
            // of 0: a takeover's rebuild, not tagged — we are not counted,
            // and must look again. Others (frees, an exhausted heap's
            // search) learn only that it is being created — their lanes
            // count on it all the same, as waiters they are not (they
            // steer who waits: the publication erases them).
            SENTINEL => {
                let untagged = after.refs >> TAG_SHIFT == 0 && !planted(UNTAGGED_AS_CLASS_ZERO);
                Lock::Creating {
                    waiting: if claim == 0 || untagged {
                        UNKNOWN_WAIT
                    } else {
                        after.refs
                    },
                }
            }
            _ if after.refs & LIVE != 0 => {
                // ORDERING: acquire (gpu): pairs with the release fence in
                // `publish`: the live counter was set by the publication,
                // whose slab (header, bitfield, granule entry) was
                // initialised before it; our reference counts on it.
                if !planted(LOCK_WITHOUT_ACQUIRE) {
                    fence(Ordering::Acquire, Scope::Gpu);
                }
                Lock::Acquired {
                    slab: slab_of(after.ptr),
                    count: after.refs & COUNT_MASK,
                    class: ((after.refs >> TAG_SHIFT) % TAG_CLASSES).wrapping_sub(1),
                }
            }
            // A published slab whose counter is dead: being taken over (our
            // addition holds nothing; the takeover overwrites it).
            _ => Lock::Busy,
        }
    }

    /// Claims the slot if it is empty (true), leaving `tag` (a
    /// [`creation_tag`]) in its dead counter — pointer and tag in one
    /// compare-and-swap, so that no one meets the creation untagged: the
    /// caller must create a slab and [`Guard::publish`] it, or
    /// [`Guard::abandon`] the claim. Unlike [`Guard::lock`], a slot that is
    /// not empty is left as it is — no registration on a creation, no
    /// reference to a slab.
    #[inline(always)]
    pub fn claim(&self, tag: u32) -> bool {
        // An empty slot's counter is 0, or holds failed additions of
        // lockers that met it empty: the tag replaces them. (A claim from
        // `lock` finds its own addition there, so its first CAS fails:
        // passing the lock's word in to expect cost a register on sm_75 in
        // every malloc kernel, for a claim's path; ptxas, 2026-12-05.)
        let mut seen = 0;
        while let Err(now) = self
            .word
            .compare_exchange(seen, pack(SENTINEL, tag & !LIVE))
        {
            if now as u32 != 0 {
                return false;
            }
            seen = now;
        }
        // ORDERING: acquire (gpu): pairs with the release fence in `vacate`:
        // what the reclaimer wrote before it emptied the slot happens-before
        // our creation. Today it writes nothing there (the slab's granule
        // entry is written later, by the build that uses it or by
        // `forget_slab`; a review, 2026-12-07): the pair keeps a write
        // added before `vacate` ordered, at a fence per claim.
        fence(Ordering::Acquire, Scope::Gpu);
        true
    }

    /// Whether the slot is being rebuilt by a takeover, which leaves its
    /// counter untagged: a registration now would not count (one load; a
    /// search polls this instead of locking again).
    #[inline(always)]
    pub fn is_untagged_claim(&self) -> bool {
        let seen = self.look();
        seen.ptr == SENTINEL && seen.refs >> TAG_SHIFT == 0
    }

    /// Whether the slot is being created now (one load: a waiter polls
    /// this instead of registering again).
    #[inline(always)]
    pub fn is_creating(&self) -> bool {
        self.look().ptr == SENTINEL
    }

    /// Publishes a slab of class `class` created after [`Lock::Claimed`]
    /// (or a takeover that kept the slot), with `n` references held by the
    /// publishing group; returns the count, `n`.
    ///
    /// One swap: the pointer and the live count appear together, replacing
    /// the creation's dead counter (its registrations steered waiters, and
    /// hold nothing). A locker whose addition lands after it holds a
    /// reference on top of `n`.
    pub fn publish(&self, slab: u64, class: usize, n: u32) -> u32 {
        // ORDERING: release (gpu): the slab's header and zeroed bitfield
        // (the group's stores, ordered before this by `init`'s syncwarp)
        // and its granule entry happen-before any lane whose acquire lands
        // on the live count (pairs with the acquire fence in `lock`).
        if !planted(PUBLISH_WITHOUT_RELEASE) {
            fence(Ordering::Release, Scope::Gpu);
        }
        let word = pack(word_of(slab), live_count(class, n));
        if planted(PUBLISH_BY_ADD) {
            // The dead counter's tag and registrations stay, counted as
            // references no one holds.
            self.word.fetch_add(word.wrapping_sub(pack(SENTINEL, 0)));
            return n;
        }
        self.word.swap(word);
        n
    }

    /// Gives up a claim (no memory for a slab).
    pub fn abandon(&self) {
        // A swap, not a store: a store would do as well on a GPU, but loom
        // lets a locker's `fetch_add` read the word from before a relaxed
        // store that precedes it (tokio-rs/loom#282: its modification
        // order is not kept for plain stores), and the models then end in
        // states no GPU can reach.
        self.word.swap(0);
    }

    /// Gives back `n` references; returns the count after (0: the slab is
    /// empty now, and stays published).
    #[inline(always)]
    pub fn unlock(&self, n: u32) -> u32 {
        self.release(n).refs & COUNT_MASK
    }

    /// [`Guard::unlock`], returning the slot as the release left it: the
    /// count after it and the slab's class.
    #[inline(always)]
    pub fn release(&self, n: u32) -> Seen {
        // ORDERING: release (gpu): our accesses to the slab (block data,
        // bitfield) happen-before a later `reclaim` of it; pairs with the
        // acquire fence there.
        fence(Ordering::Release, Scope::Gpu);
        let unit = pack(0, n);
        Seen::of(self.word.fetch_sub(unit).wrapping_sub(unit))
    }

    /// Takes the slot's slab when no one holds it (a live zero count),
    /// leaving `ptr` in the slot with a dead counter of 0; returns the
    /// slab, which the caller now owns.
    #[inline(always)]
    fn take(&self, ptr: Option<u32>) -> Option<(u64, u32)> {
        let seen = self.look();
        if !seen.is_live() || (seen.refs & COUNT_MASK != 0 && !planted(RECLAIM_WITHOUT_COUNT)) {
            return None;
        }
        let into = pack(ptr.unwrap_or(seen.ptr), 0);
        let won = if planted(RECLAIM_WITHOUT_COUNT) {
            // Whatever the count: a slab someone holds is taken.
            Seen::of(self.word.swap(into)).refs & LIVE != 0
        } else {
            self.word
                .compare_exchange(pack(seen.ptr, seen.refs), into)
                .is_ok()
        };
        if !won {
            return None;
        }
        // ORDERING: acquire (gpu): pairs with the release fence in `unlock`
        // (and `publish`): every holder's accesses to the slab happen-before
        // our reuse of it.
        if !planted(RECLAIM_WITHOUT_ACQUIRE) {
            fence(Ordering::Acquire, Scope::Gpu);
        }
        // A live counter is a publication's: the pointer is a slab, and
        // the class is its.
        Some((slab_of(seen.ptr), seen.class().unwrap_or(u32::MAX)))
    }

    /// Takes the slot's slab over when no one holds it (an empty slab):
    /// returns the slab, which the caller now owns — it calls
    /// [`Guard::vacate`] and uses the slab elsewhere. The slot keeps
    /// showing the slab, with a dead counter (lockers meet it as `Busy`),
    /// until then.
    pub fn reclaim(&self) -> Option<u64> {
        self.take(None).map(|(slab, _)| slab)
    }

    /// Takes the slot's empty slab over and keeps the slot, as a claim
    /// would: the slot shows `SENTINEL` (being created, untagged) and the
    /// caller must [`Guard::publish`] a slab in it — the same slab,
    /// reinitialised, when it likes — or [`Guard::abandon`] it.
    pub fn take_over(&self) -> Option<u64> {
        self.take(Some(SENTINEL)).map(|(slab, _)| slab)
    }

    /// Empties the slot after its slab was reclaimed.
    pub fn vacate(&self) {
        // ORDERING: release (gpu): what the reclaimer wrote before this
        // happens-before a later claim of this slot; pairs with the acquire
        // fence of `claim` (nothing today: see there).
        fence(Ordering::Release, Scope::Gpu);
        // A swap, not a store: see `abandon`.
        self.word.swap(0);
    }

    /// The slot's count, or 0 when it is empty, being created, or being
    /// taken over. One load.
    #[inline(always)]
    pub fn use_count(&self) -> u32 {
        self.look().count()
    }

    /// The published slab, if any (no reference taken: for checks only).
    pub fn peek(&self) -> Option<u64> {
        match self.look().ptr {
            0 | SENTINEL => None,
            word => Some(slab_of(word)),
        }
    }

    /// The raw pointer word (for checks): 0, `SENTINEL` or a slab.
    pub fn raw_ptr(&self) -> u32 {
        self.look().ptr
    }

    /// The raw counter (for checks).
    pub fn raw_count(&self) -> u32 {
        self.look().refs
    }
}

impl Default for Guard {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A published slab of class 3 at `count` references (slab field 1).
    fn slab_at(count: u32) -> Seen {
        Seen::of(u64::from(live_count(3, count)) << REFS_SHIFT | 1)
    }

    #[test]
    fn a_search_wants_room_for_its_group_twice_over_or_any() {
        // 8 KiB: 255 blocks; a group of 32.
        let (usable, n) = (255, 32);
        // Room for the group: worth it to a search that wants that.
        assert!(slab_at(usable - 40).worth_a_lock(3, usable, n, false, 0, false));
        assert!(slab_at(usable - 40).worth_a_lock(3, usable, n, true, 0, false));
        assert!(!slab_at(usable - 32 + 1).worth_a_lock(3, usable, n, true, 0, false));
        // Room for it, not twice over: passed with headroom.
        assert!(!slab_at(usable - 40).worth_a_lock(3, usable, n, true, 1, false));
        assert!(slab_at(usable - 64).worth_a_lock(3, usable, n, true, 1, false));
        // Three times over (near the hint).
        assert!(!slab_at(usable - 95).worth_a_lock(3, usable, n, true, 2, false));
        assert!(slab_at(usable - 96).worth_a_lock(3, usable, n, true, 2, false));
        // The last try takes any room; none is none.
        assert!(slab_at(usable - 1).worth_a_lock(3, usable, n, true, 0, true));
        assert!(!slab_at(usable).worth_a_lock(3, usable, n, true, 0, true));
        // Another class's slab is never worth a lock; an empty one of the
        // class only to a search that may claim, however little it wants.
        assert!(!slab_at(0).worth_a_lock(5, usable, n, true, 0, true));
        assert!(!slab_at(0).worth_a_lock(3, usable, n, false, 0, true));
        assert!(slab_at(0).worth_a_lock(3, usable, n, true, 0, true));
    }

    #[test]
    fn an_empty_slab_of_the_class_is_worth_a_lock_whatever_the_headroom() {
        // A class of one block a slab: twice the room is more than a slab
        // holds (a claim was sent back to the slab for ever).
        for usable in [1, 2, 3, 31, 255] {
            for n in [1, 2, 16, 32] {
                assert!(
                    slab_at(0).worth_a_lock(3, usable, n, true, 1, false),
                    "usable {usable}, n {n}"
                );
            }
            // Three times over is asked only in classes of 255 blocks a
            // slab and more (search.rs, `NEAR_USABLE`).
            if usable >= 255 {
                assert!(slab_at(0).worth_a_lock(3, usable, 32, true, 2, false));
            }
        }
    }
}
