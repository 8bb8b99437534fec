//! The slot guard: a wait-free reference-counted pointer to a slab.
//!
//! Each slot of the slot table holds one guard. A slot is empty (`ptr == 0`),
//! being created (`ptr == SENTINEL`, owned by the lane that claimed it), or
//! published (`ptr` = a slab's address). The reference count says how many
//! reservations (allocations in flight or live, plus transient locks) the slab
//! has; two flag bits let the release that reaches zero destroy the slab
//! without a lock:
//!
//! ```text
//!   refs:  63        62       61 ............................. 0
//!        ┌─────────┬────────┬───────────────────────────────────┐
//!        │ INVALID │ HELPED │ count                             │
//!        └─────────┴────────┴───────────────────────────────────┘
//! ```
//!
//! * `acquire(n)`: `fetch_add(n)`; it succeeded iff INVALID was clear.
//! * `release(n)`: `fetch_sub(n)`; the lane that takes the count to zero tries
//!   to CAS `0 → INVALID`. If that fails because a reader saw zero first and
//!   set `INVALID | HELPED`, the releaser swaps in `INVALID` and owns the
//!   destruction iff the swapped-out value still had HELPED (so exactly one
//!   of them wins). If it fails because an acquire resurrected the count, the
//!   slab lives on.
//! * `read()`: the count, or 0 for a dying or empty slot; a reader that sees a
//!   bare 0 marks it `INVALID | HELPED` so it can report the slot as empty
//!   without waiting for the releaser.
//! * `publish(n)`: after creating a slab, set the count to `n` (a CAS from the
//!   empty or dead counter: every acquire of it failed, so no holder exists),
//!   then store the address. In this order no locker can take the new slab
//!   and release it to zero before the publishers' references count.
//!
//! Invariants (checked by the loom model in `tests` and by the simulator
//! stress tests):
//! * `count ≥ live reservations of the slab` while `ptr` is published, and a
//!   reservation is taken (acquire) before its bit is set and given back
//!   (release) after its bit is cleared, so `count ≥ set bits`;
//! * the slab is destroyed only by the release that took the count to zero
//!   and won INVALID, exactly once per publication;
//! * a lane holding a successful acquire reads a published `ptr`, and that
//!   slab outlives its release.

use crate::simt::Scope;
use crate::sync::{AtomicU64, Ordering, fence};

/// The counter is dying or empty: acquires fail.
pub const INVALID: u64 = 1 << 63;
/// A reader saw zero before the releaser could invalidate.
pub const HELPED: u64 = 1 << 62;
/// `ptr` of a slot being created.
pub const SENTINEL: u64 = u64::MAX;
/// How many times `find_slab` retries a busy slot (being created or
/// destroyed) before moving on.
pub const MAX_TRIES: u32 = 16;

const _: () = assert!(INVALID & HELPED == 0 && (INVALID | HELPED) >> 62 == 3);

/// Bugs a loom model can plant in this protocol, to show that the model
/// catches them (`tests/loom.rs`). Loom builds only.
#[cfg(loom)]
pub mod plant {
    use core::sync::atomic::{AtomicU32, Ordering};

    static ACTIVE: AtomicU32 = AtomicU32::new(NONE);

    /// No bug.
    pub const NONE: u32 = 0;
    pub use super::{
        POOL_PUSH_WITHOUT_RELEASE, POOL_WITHOUT_TAG, PUBLISH_BEFORE_COUNT, PUBLISH_WITHOUT_RELEASE,
        RELEASE_WITHOUT_SWAP, RPC_FLIP_BEFORE_RELEASE, RPC_REPLY_WITHOUT_RELEASE,
        UNLOCK_WITHOUT_ACQUIRE,
    };

    /// Plants `bug` (or `NONE`) for the models that run next.
    pub fn set(bug: u32) {
        ACTIVE.store(bug, Ordering::SeqCst);
    }

    pub(crate) fn active(bug: u32) -> bool {
        ACTIVE.load(Ordering::SeqCst) == bug
    }
}

/// Planted bug: `release` owns the destruction whenever its CAS sees HELPED,
/// without swapping the flag out, so two releasers can both win.
pub const RELEASE_WITHOUT_SWAP: u32 = 1;
/// Planted bug: `unlock`'s winner disposes without the acquire fence, so its
/// writes race with the other holders' last accesses.
pub const UNLOCK_WITHOUT_ACQUIRE: u32 = 2;
/// Planted bug: `publish` stores the pointer without the release fence, so
/// lockers can read the slab before it is initialised.
pub const PUBLISH_WITHOUT_RELEASE: u32 = 3;
/// Planted bug: `publish` shows the pointer before the publishers' count is
/// in (the order LLVM libc's `finalize` uses), so a locker can take the slab,
/// release it to zero and destroy it under the publishers.
pub const PUBLISH_BEFORE_COUNT: u32 = 4;

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

/// The reference count of a slot.
#[repr(transparent)]
#[derive(Debug)]
pub struct RefCount {
    counter: AtomicU64,
}

impl RefCount {
    /// A count of zero (an empty slot).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RefCount {
            counter: AtomicU64::new(0),
        }
    }

    /// A count of zero (an empty slot).
    #[cfg(loom)]
    pub fn new() -> Self {
        RefCount {
            counter: AtomicU64::new(0),
        }
    }

    /// Takes `n` references; the count after, or `None` if the counter is
    /// INVALID (the references are not held).
    #[inline(always)]
    pub fn acquire(&self, n: u64) -> Option<u64> {
        let count = self.counter.fetch_add(n).wrapping_add(n);
        (count & INVALID == 0).then_some(count)
    }

    /// Gives back `n` references taken by a successful [`acquire`]. Returns
    /// whether the caller now owns the destruction of the slab.
    ///
    /// [`acquire`]: RefCount::acquire
    #[inline(always)]
    pub fn release(&self, n: u64) -> bool {
        if self.counter.fetch_sub(n) != n {
            return false;
        }
        match self.counter.compare_exchange(0, INVALID) {
            Ok(_) => true,
            Err(seen) if planted(RELEASE_WITHOUT_SWAP) => seen & HELPED != 0,
            Err(seen) => seen & HELPED != 0 && self.counter.swap(INVALID) & HELPED != 0,
        }
    }

    /// The count, or 0 for a dying or empty slot (helping a releaser that
    /// took it to zero).
    #[inline(always)]
    pub fn read(&self) -> u64 {
        let value = self.counter.load(Ordering::Relaxed);
        if value == 0 {
            // Either way the slot is empty or dying: report zero.
            let _ = self.counter.compare_exchange(0, INVALID | HELPED);
            return 0;
        }
        if value & INVALID != 0 { 0 } else { value }
    }

    /// Sets the count of a slab about to be published to `n`, from an empty
    /// (0) or dead (INVALID) counter. A compare-and-swap, not a store: a
    /// stale locker's failing `fetch_add` on the dead counter must not be
    /// lost or overwrite ours, and every acquire that succeeds afterwards
    /// counts on top of `n`.
    fn establish(&self, n: u64) {
        let mut seen = self.counter.load(Ordering::Relaxed);
        while let Err(now) = self.counter.compare_exchange(seen, n) {
            seen = now;
        }
    }

    /// The raw counter (for reports and checks).
    pub fn raw(&self) -> u64 {
        self.counter.load(Ordering::Relaxed)
    }
}

impl Default for RefCount {
    fn default() -> Self {
        Self::new()
    }
}

/// A count as the slab search uses it: 32 bits (a slab has at most
/// 131 072 blocks, and lanes in flight are far fewer than 2^31), so that
/// the search's arithmetic stays in single registers.
#[inline(always)]
fn narrow(count: u64) -> u32 {
    count.min(u64::from(u32::MAX)) as u32
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
    Creating,
    /// The slot's slab is being destroyed: retry a few times, then another.
    Busy,
    /// The slot is empty and the caller may not claim it.
    Empty,
}

/// One slot of the slot table (`repr(C)`: `ptr`, then the count; a host
/// reads slot tables by this layout).
#[repr(C)]
#[derive(Debug)]
pub struct Guard {
    ptr: AtomicU64,
    refs: RefCount,
}

impl Guard {
    /// An empty slot.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Guard {
            ptr: AtomicU64::new(0),
            refs: RefCount::new(),
        }
    }

    /// An empty slot.
    #[cfg(loom)]
    pub fn new() -> Self {
        Guard {
            ptr: AtomicU64::new(0),
            refs: RefCount::new(),
        }
    }

    /// Tries to take `n` references to the slot's slab, claiming the slot
    /// when it is empty and `may_claim`. One lane calls it for its group.
    pub fn lock(&self, n: u32, may_claim: bool) -> Lock {
        let n = u64::from(n);
        let mut seen = self.ptr.load(Ordering::Relaxed);
        if seen == 0 {
            if !may_claim {
                return Lock::Empty;
            }
            match self.ptr.compare_exchange(0, SENTINEL) {
                Ok(_) => {
                    // ORDERING: acquire (gpu): pairs with the release fence in
                    // `vacate`: the previous occupant's disposal happens-before
                    // our creation.
                    fence(Ordering::Acquire, Scope::Gpu);
                    return Lock::Claimed;
                }
                Err(now) => seen = now,
            }
        }
        if seen == SENTINEL {
            // Being created: the caller retries later. It must not wait here:
            // the creating group may be in its own warp, waiting for it at the
            // next collective.
            return Lock::Creating;
        }
        if seen == 0 {
            // Just vacated or abandoned between our two reads.
            return Lock::Busy;
        }
        let Some(count) = self.refs.acquire(n) else {
            return Lock::Busy;
        };
        // ORDERING: pairs with the release fence in `publish` (gpu scope): a
        // successful acquire means the slab we now read was published, with
        // its header and bitfield initialised, before our reference counted.
        fence(Ordering::Acquire, Scope::Gpu);
        // Re-read: the slab may have been replaced between the first load and
        // the acquire; the reference now protects the current one.
        let slab = self.ptr.load(Ordering::Relaxed);
        if slab == 0 || slab == SENTINEL {
            // We read a dead slab's address, and our acquire landed on the
            // count a publisher established before storing its new address.
            // The publisher's references keep the count above zero: give ours
            // back and retry.
            let _ = self.refs.release(n);
            return Lock::Creating;
        }
        Lock::Acquired {
            slab,
            count: narrow(count),
        }
    }

    /// Publishes a slab created after [`Lock::Claimed`], with `n`
    /// references held by the publishing group; returns the count, `n`.
    ///
    /// The count is set *before* the pointer appears, so that no locker can
    /// take the slab and release it to zero — destroying it — before the
    /// publishers' references count.
    pub fn publish(&self, slab: u64, n: u32) -> u32 {
        if planted(PUBLISH_BEFORE_COUNT) {
            self.ptr.store(slab, Ordering::Relaxed);
        }
        self.refs.establish(u64::from(n));
        // ORDERING: release (gpu): the slab's header and zeroed bitfield,
        // and the count above, happen-before any lane that acquires the slab
        // (pairs with the acquire fence in `lock`).
        if !planted(PUBLISH_WITHOUT_RELEASE) {
            fence(Ordering::Release, Scope::Gpu);
        }
        self.ptr.store(slab, Ordering::Relaxed);
        n
    }

    /// Gives up a claim (no memory for a slab).
    pub fn abandon(&self) {
        self.ptr.store(0, Ordering::Relaxed);
    }

    /// Gives back `n` references. Returns the slab's address when the caller
    /// now owns its destruction: it must dispose of the slab, then call
    /// [`Guard::vacate`].
    pub fn unlock(&self, n: u32) -> Option<u64> {
        // ORDERING: release (gpu): our accesses to the slab (block data,
        // bitfield) happen-before its destruction by whichever lane wins it;
        // pairs with the acquire fence below on the winning side.
        fence(Ordering::Release, Scope::Gpu);
        if !self.refs.release(u64::from(n)) {
            return None;
        }
        // ORDERING: acquire (gpu): everything the other holders did to the
        // slab happened before we dispose of it.
        if !planted(UNLOCK_WITHOUT_ACQUIRE) {
            fence(Ordering::Acquire, Scope::Gpu);
        }
        Some(self.ptr.load(Ordering::Relaxed))
    }

    /// Empties the slot after its slab was disposed of.
    pub fn vacate(&self) {
        // ORDERING: release (gpu): the disposal (cache push, granule table)
        // happens-before a later claim of this slot.
        fence(Ordering::Release, Scope::Gpu);
        self.ptr.store(0, Ordering::Relaxed);
    }

    /// The slot's count, or 0 when it is empty or dying.
    pub fn use_count(&self) -> u32 {
        narrow(self.refs.read())
    }

    /// The published slab, if any (no reference taken: for checks only).
    pub fn peek(&self) -> Option<u64> {
        match self.ptr.load(Ordering::Relaxed) {
            0 | SENTINEL => None,
            slab => Some(slab),
        }
    }

    /// The raw reference counter (for checks).
    pub fn raw_count(&self) -> u64 {
        self.refs.raw()
    }
}

impl Default for Guard {
    fn default() -> Self {
        Self::new()
    }
}
