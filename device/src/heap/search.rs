//! Slot search: finding a slab of a class with room, and the slab's life in
//! a slot — created by the group that claimed an empty slot, put back to
//! use by its class once it is empty, taken over by another class only when
//! memory runs short.
//!
//! ```text
//!   lanes of one class (a group) ─► its leader, alone:
//!       hint[class][stream] ─► its slot: lock n (one atomic): room? ── yes ─► done
//!            │ no (the spare references given back)
//!            ▼
//!       slot h+1, h+2, ... ─► room: lock ─► done
//!                             being created for us, with room for us: count
//!                               our lanes on it, wait for it, lock it ─► done
//!                             being created, enough lanes on it: go on,
//!                               past the slots the lanes counted before
//!                               ours fill (and claim the next empty slot
//!                               at once)
//!                             empty: an emptied slab of the class near,
//!                               or (a stream with a hint of its own, past
//!                               the class's first slot) room in 16 of
//!                               its slabs behind? scan again there;
//!                               else claim ─► done
//!                               (claimed by another first: scan again there)
//!                             full / other class: next
//!   ─► the group: the first lanes, as many as the slab had room for, get a
//!      reservation each; a claiming group creates its slab (the pool's or
//!      the host's; an empty slab of another class taken over only once the
//!      provider refuses); lanes beyond the room, lanes that met a creation
//!      in flight and lanes that found no memory scan again
//! ```
//!
//! The lanes asking for one class form a `uniform` group whose leader scans
//! for all of them: one lock of the group's size per slot it tries (the
//! guard's count grows by the group's size), spare references given back
//! at once, no collectives in its loop — so a warp's groups of different
//! classes scan at the same time, and the loop's registers are one lane's
//! scan state. A group that claimed an empty slot gets a slab, zeroes its
//! bitfield together and publishes it — outside the scan's loop, so that
//! the registers of that slow part do not add to the scan's. The scan ends
//! after every slot once: out of memory.
//!
//! # Growth to the demand
//! A claim tags the slot's dead counter with the class and the claiming
//! group's lanes, and a group that meets the slot while it is being created
//! adds its own (`Lock::Creating`, guard.rs). If the creation is of its
//! class and will have room for every lane counted on it, the group waits
//! for it (polling the slot, out of line: `wait_for_creation`) and locks
//! it; otherwise it goes on and claims a slot of its own. So a class whose
//! slabs are full grows by as many slabs at once as its waiting lanes need
//! — one creation at 16 B, where a slab serves 130 047 lanes; one per eight
//! groups of 32 at 8 KiB — and no group bounces off a creation that cannot
//! serve it. (Before, every group that met a creation gave up its scan and
//! slept: one creation per class at a time.)
//!
//! A scan that met such a creation of its class, one that will not have
//! room for it (`Seen::is_crowded_creation`, or its lock's count), knows
//! the class's demand is ahead of its slabs: it claims the next empty slot
//! it meets at once (CLAIM), without the look for an emptied slab of its
//! class that a claim makes first otherwise (`look_or_claim`). A group
//! whose claim another group won meanwhile scans again at once from that
//! slot (its stream's hint now), where it counts on the winner's creation
//! or goes on to the next — not from its hint, after a wait, past the
//! class's full slabs again. Without these, when the demand rose past the
//! slabs a heap had (the contention test's `rising`: half the warps, then
//! all), the groups that reached the class's first empty slot together
//! raced for it, the losers walked the class's slabs again, and each
//! malloc took more than 4 scans one time in ten at 8 KiB.
//!
//! A group that registered on a crowded creation of its class knows its
//! place in line: the lanes counted before its own. The creation serves
//! the first of them, and the others go on and fill a slab each in the
//! slots after it, so the group passes the slots that the lanes before it
//! will fill (`crowded_past`, at most `CROWD_PASS`): it neither claims
//! them nor counts on their creations, and claims or counts on the one
//! after — but it still looks at each, and takes a slab's room there (a
//! slab kept through a trim, say: jumped over unseen, such slabs were
//! passed and the class grew a slab more). Without it, when every warp of
//! a launch reaches the class's frontier at once — as a GPU starts a
//! launch's resident blocks, and as the simulator's timed schedule does —
//! each group registered on every creation in turn until one had room: at
//! 8 KiB, 2.7 registrations and 4.8 scans per group-malloc in the
//! contention test's cold launch, 1.8 and 1.7 with it (BENCHMARKS.md, "A
//! timed schedule").
//!
//! # Spreading
//! Each class has a hint per stream — the heap keeps one stream per
//! resident warp (`HeapConfig::streams`; 8 192 on an H200) and a warp's
//! stream is its warp slot modulo their number — and a search starts at its
//! stream's hint (else the class's, stream 0's), so warps running at once
//! start at different slabs of a class once it has several, and a warp
//! comes back to the slab it used last. In the contention test's warm
//! launch at 8 KiB: a hint per SM's worth of warps (16 warps a hint) took
//! 7.2 to 13.2 guard RMWs per group-pair, 8 warps a hint 4.8 to 5.9, a hint
//! per warp 3.8 to 6.5 (BENCHMARKS.md).
//!
//! Room away from the hint is wanted twice over while the search may
//! claim and its stream has a slab of its own (`Seen::worth_a_lock`:
//! headroom; not for a stream with no hint of its own, `NEWCOMER`, nor
//! after a crowded creation, `CROWDED`): the room a slab shows for one
//! group is mostly what the warps whose hints name it freed a moment ago
//! and come back for, and a group that takes it sends one of them walking
//! to the class's frontier, where it claims — a claim a warm launch did
//! not need, and a creation the next groups wait for. In the contention
//! test's warm launches at 8 KiB (2026-12-05, 22:05-22:17 UTC, nine runs),
//! extra walk rounds per group-malloc 0.069 to 0.103 (0.16 without, that
//! evening), scans that met a creation 1 to 6 per 1 000 (7), guard RMWs per
//! group-pair 3.04 to 3.10 (3.17); the cold launch grew 93 to 99 slabs for
//! a demand of 65 (92). In the 32 slots after the hint a group of a whole
//! warp wants room three times over (`headroom`; in classes of 8 KiB
//! blocks and smaller): room for one group or two is mostly the runs those
//! warps come back for, and a group that takes one sends its warp to a
//! second round of its walk (2026-12-06: 0.025 to 0.059 extra walk rounds
//! per group-malloc at 8 KiB warm, 0.054 to 0.086 with room twice over
//! there; 99 to 102 slabs cold, 94 to 97). A search that may not claim (the
//! heap is exhausted) takes any room its group fits in, and a search's last try
//! before null takes any room at all (`LAST_RESORT`): in a full slot table
//! the room passed is all there is; a refused claim's stream searches
//! next the window that ends at the refused slot, where its scan passed
//! room. The price: more slabs (above), and at the host's limit room
//! passed far back can be out of reach of an exhausted heap's bounded
//! search (`search_from_first`, "Limits").
//!
//! A slot — the hint's too, but in classes of many blocks a slab
//! (`BLIND_LOCK_USABLE`), for small groups and where the stream's last
//! free there left room (`locks_blind`) — is locked only when one load of
//! its word (pointer, count and class: `Guard::look`) says it is worth it
//! (`Seen::worth_a_lock`): a live slab of the group's class with room for
//! the whole group (admission, `guard::admission`: a slab with room for
//! only part of it would split the group over two slabs, a lock and a free
//! more, and its lanes beyond the room scan again; a group of more than
//! half a slab takes any room), or a slot the group may claim or count on.
//! Full slabs, other classes' slabs and creations, and creations that will have no
//! room for the group are passed (a group that registered on those only
//! inflated their counts, so that their own class's groups passed them and
//! claimed more slabs). Locking the hint whatever its count cost an add
//! and a sub on a full slab's guard — 3 765 such locks in the contention
//! test's 2 048 warm warp-mallocs at 8 KiB — and, by this measure, no
//! registers any more (ptxas, 2026-12-05; on 2026-12-04, 5 to 9).
//!
//! # A slab's life in a slot
//! Claimed (the slot was empty) → created and published by the claiming
//! group → locked and released by mallocs and frees; a release to zero
//! leaves it published and empty, marks it in `empties` and points the
//! freeing stream's hint at it → its class takes it again (a lock of a zero
//! count: revived in place), found by a hint or, from a scan about to
//! claim an empty slot, among the marks (`look_or_claim`, `own_empty`);
//! or, once the provider refuses, a claim of another
//! class takes it over (`Guard::reclaim`: a CAS of the live zero count to
//! dead), empties the slot and uses the slab for its own; or `trim`, or a
//! refused large block that the region could hold (`give_back_empties`),
//! gives it back to the host. A
//! free never disposes of a slab: the work (and the registers) of taking
//! one over is on the claim's path, which allocates anyway.
//!
//! # Hints, search cost and out of memory (the policy)
//! A stream's hint names the slot where it last found room: a malloc that
//! succeeds elsewhere moves it there, and every free moves it to the slab
//! it freed into, with the block it freed (where the stream's next walk
//! there starts: `HINT_BLOCK_SHIFT`); a claim lost to another group
//! moves it to that slot, a claim refused and an exhausted search that
//! found nothing to the class's first slot. The scan starts at the hint
//! and goes on from it, so the class's full slabs behind the hint are not
//! walked again: as a class grows, a malloc looks at its hint (full, once
//! it fills) and the next slots, where the class's next slab is claimed — a
//! cost that does not grow with the class's slabs. Only a claim looks
//! behind the hint (`room_behind`): four rounds of one load a lane, at
//! most. Worst case: a full hint with every slot after it full or of
//! other classes: the scan walks the table once.
//!
//! When the provider refuses a slab, the heap is marked exhausted until
//! memory comes back (a large block freed, the host's `trim`; a generation
//! count makes a refusal that raced with such a return stale at once; a
//! slab that goes empty is seen through `empties`). A refusal that may have
//! been temporary on the host's side (its headroom check, a driver error,
//! an injected fault: memory another process frees may end it) the host
//! forgets before the next launch (`Heap::launch`, `Heap::forget_refusal`):
//! it clears the record, and the launch's first search for a new slab asks
//! again. While exhausted, a search asks the host nothing, claims no empty
//! slot (unless a slab went empty or the pool holds one) and looks at the
//! hint and the `EXHAUSTED_WINDOW` slots after it only; so an out-of-memory
//! malloc costs about what a successful one does. Worst case: room in a
//! slab of the class that is neither the hint nor in that window is not
//! found until memory comes back (a free into a full slab points the hint
//! at it).

use super::{
    DeviceHeap, HINT_BLOCK_MASK, HINT_BLOCK_SHIFT, HINT_ROOMY, HINT_SLOT_MASK, ROOMY_BLOCKS,
};
use crate::abi::ProviderKind;
use crate::event::{Event, record};
use crate::granule::Granule;
use crate::guard::{Creation, Lock, MAX_TRIES, Seen, admission, creation_tag};
use crate::index::{reduce, wrap};
use crate::simt;
use crate::size_class::{SLAB_SHIFT, SLAB_SIZE, geometry};
use crate::slab::Slab;
use crate::sync::Ordering;

/// A scan's FOUND word: `base << FIT_BITS | fit` (`fit` ≤ 32 lanes served,
/// `base` < a class's blocks ≤ 2^17).
const FIT_BITS: u32 = 6;
const FIT_MASK: u32 = (1 << FIT_BITS) - 1;
const _: () = assert!(simt::WARP_SIZE <= FIT_MASK);
/// A scan's result word holds its outcome in the top bits, above a slot
/// index or the FOUND word.
const OUTCOME_SHIFT: u32 = 29;
const WORD_MASK: u32 = (1 << OUTCOME_SHIFT) - 1;
const _: () = assert!(AGAIN < 1 << (32 - OUTCOME_SHIFT) && CLAIM < 1 << (32 - OUTCOME_SHIFT));
const _: () = assert!(super::MAX_SLOTS as u64 <= WORD_MASK as u64);
const _: () = assert!((crate::size_class::SLAB_SIZE >> 4) << FIT_BITS <= WORD_MASK as u64);

/// `create_alone`'s packed result: a slab's clean bitfield words (≤ 4 096)
/// below its slot index, both below the slab's alignment.
const CLEAN_BITS: u32 = 13;
const CLEAN_MASK: u32 = (1 << CLEAN_BITS) - 1;
const _: () = assert!(SLAB_SIZE >> 4 >> 5 <= CLEAN_MASK as u64);
const _: () = assert!(((super::MAX_SLOTS as u64) << CLEAN_BITS) <= 1 << 32);

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
/// Outcome: scan again (a slot being created was met, or a slab — a new one
/// included — had room for fewer lanes than the group).
const RETRY: u32 = 4;
/// Outcome of a scan: it met an empty slot (the slot in
/// `Found::reserved`) that it would claim; the group looks for an emptied
/// slab of its class first, then for room behind the hints
/// (`look_or_claim`), and claims the slot only if there is neither.
const LOOK: u32 = 5;
/// Outcome: scan again at once, with no wait — the lanes a slab had no
/// room for, a group sent to an emptied slab of its class or to room
/// behind the hints, or a group
/// whose claim another won (`look_or_claim`): nothing to wait for, unlike
/// RETRY's creation in flight. (With the wait, the drawn sleep of these rounds was most of the
/// sleep per pair in the contention test's warm launches: 10.7 of 15.6 ms
/// at 8 KiB.)
const AGAIN: u32 = 6;

/// Outcome of a scan: it met an empty slot (the slot in
/// `Found::reserved`) after a creation of its class that more lanes count
/// on than its slab will have room for — the class's demand is ahead of
/// its slabs: the group claims the slot at once, without looking for an
/// emptied slab of its class first (`look_or_claim`).
const CLAIM: u32 = 7;

/// A scan's hint word once the scan met a creation of its class that will
/// not have room for its group (its next empty slot is claimed at once:
/// CLAIM): a slot field no table reaches — the hint's slot was read before
/// — and `NEWCOMER`'s block field: a class whose demand is ahead of its
/// slabs leaves no headroom (`Seen::worth_a_lock`), and a newcomer's scan
/// stays one (keeping its own block field instead, `hinted |= CROWDED`,
/// cost sm_90 3 registers; ptxas, 2026-12-05). In that word, not in a
/// variable of its own, which cost the scan's loop a register (ptxas,
/// 2026-12-05: `malloc_free_once` 47 → 48 on sm_80).
const CROWDED: u32 = NEWCOMER | HINT_SLOT_MASK;
const _: () = assert!(super::MAX_SLOTS < HINT_SLOT_MASK as usize);

/// A scan's `limit` while the exhausted mark is unread and due at the next
/// look (`u32::MAX`: unread, read at a look only if it shows no room).
const MARK_DUE: u32 = u32::MAX - 1;
const _: () = assert!(super::MAX_SLOTS as u64 <= MARK_DUE as u64);

/// A hint word whose block field is all ones (no block a free names:
/// `free_small`): the stream's next scan is its last try before its lanes
/// get null (`search_from_first`), and takes any room it meets
/// (`Seen::worth_a_lock`'s `any_room`: no admission, no headroom). The
/// scan that finds room stores a hint without it.
const LAST_RESORT: u32 = HINT_BLOCK_MASK << HINT_BLOCK_SHIFT;
/// A scan's hint word when its stream has no hint of its own (the class's
/// or its start slot, `hint`): the block field's one but highest value,
/// which no free stores either. Such a stream has no slab to come back
/// to, nor room it freed to keep: its search wants room for its group
/// only, no headroom (`Seen::worth_a_lock`) — a launch of warps that each
/// malloc once, holding what they got, would otherwise leave a group's
/// room in many slabs (the README's memory pressure example, 2 048 blocks
/// of 8 KiB: 10 slabs, not 9, a sixth spilled to host memory). The scan
/// that finds room stores a hint of the stream's own (at the hint's slot
/// too, and with no block: this field is none).
const NEWCOMER: u32 = (HINT_BLOCK_MASK - 1) << HINT_BLOCK_SHIFT;
const _: () = assert!(NEWCOMER < CROWDED && CROWDED < LAST_RESORT);

/// `create_alone`'s word for "nothing to adopt, and the stream's hint now
/// names the class's first slot": the group searches once more from there
/// (`search_from_first`). Not a packed slab (its slab bits are 0), nor 0.
const RESTARTED: u64 = 1;

// A creation returns a slab or, below any slab's address, an outcome.
const _: () = assert!((RETRY as u64) < SLAB_SIZE && (NO_MEMORY as u64) < SLAB_SIZE);

/// Scans a lane's malloc may take before the simulator counts it as a long
/// search (`Event::LongSearch`): the contention test holds the share of
/// such mallocs to 1 %, the issue's "p99 of scans ≤ 4".
#[cfg(not(target_arch = "nvptx64"))]
const LONG_SEARCH: u32 = 4;

/// The most slots after a crowded creation of its class that a scan passes
/// (`crowded_past`: it claims none of them and counts on none of their
/// creations): a count inflated by lanes that only steer (a free's, a
/// blind lock's: guard.rs) passes at most this many, which later scans
/// fill.
const CROWD_PASS: u32 = 8;

/// Marks of `empties` a claim tries to take over once the provider refused
/// (a mark is stale when its slab's class took the slab again).
const TAKE_OVER_TRIES: u32 = 4;

/// Marks of `empties` a claim looks at for an empty slab of its own class
/// (a load of the slot's word each) before it asks the pool or the host,
/// which costs far more (`own_empty`).
const OWN_CLASS_CHECKS: u32 = 8;

/// Words of `empties` (32 slots each) a claim reads for those marks: the
/// claimed slot's and the one before, where the class's newest slabs lie
/// (a scan claims the first empty slot after its class's slabs).
const OWN_CLASS_WORDS: u32 = 2;

/// Slots an out-of-memory search looks at after the class's hint: the scan
/// is bounded, so a malloc that returns null because the heap is full costs
/// about what a successful one does. The price: while the heap is exhausted,
/// room in a slab of the class outside the hint and this window is not
/// found (a free into a full slab points the hint at it, see `free_small`).
pub(super) const EXHAUSTED_WINDOW: u32 = 32;

/// Polls `guard`, a slot being created that the caller counts on, until
/// the creation ends (true): published, or given up for want of memory. A
/// creation always ends (its creators wait for the host's answer, which
/// always comes), so the wait has no bound: a bound in polls (128, about
/// 100 µs on a GPU) meant nothing in the simulator, where a poll takes no
/// time, and a group whose wait ran out registered again, counted twice —
/// more slabs than the lanes needed, and under a limit a refusal that left
/// lanes null while memory sufficed (`an_emptied_slab_is_taken_over_...`
/// failed 9 times in 40 under load). It returns false only after
/// `u32::MAX` polls — about an hour at 1 µs each, which no creation takes:
/// the form without that check cost `malloc_only` 2 registers (ptxas,
/// 2026-12-04). Out of line: its loop's registers are not added to the
/// scan's.
#[inline(never)]
fn wait_for_creation(guard: &crate::guard::Guard) -> bool {
    let mut polls = 0u32;
    while guard.is_creating() {
        if polls == u32::MAX {
            return false;
        }
        simt::snooze_after(polls);
        polls += 1;
    }
    true
}

impl DeviceHeap {
    /// The caller's stream: which of its class's hints its search starts
    /// from — its warp slot modulo the heap's streams (a power of two), so
    /// that warps running at once spread over a class's slabs.
    #[inline(always)]
    pub(super) fn stream(&self) -> usize {
        (simt::warp_slot() & (self.streams() - 1)) as usize
    }
}

/// What a lane's scan or creation found: a slab and a reservation on it.
#[derive(Clone, Copy)]
pub(super) struct Found {
    /// The slab; in its low bits (below its alignment), the block its
    /// walk starts at plus one, or 0 (`HINT_BLOCK_MASK`).
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

/// Rounds of a claim's look back for room behind the hints (`room_behind`),
/// one slot a lane each, from the class's start slot: 128 slots for a
/// warp's group, and for a group of fewer than 4 lanes too few slots to
/// find `ROOM_BEHIND_SLABS` (it claims, as before the look back), so that
/// a lone lane's claim does not make 128 loads one after another.
const LOOK_BACK_ROUNDS: u32 = 4;
const _: () = assert!(LOOK_BACK_ROUNDS * simt::WARP_SIZE <= 128);
/// The room a look back wants in a slab: the group's three times over
/// (`guard::wanted`'s headroom 2).
const ROOM_BEHIND_HEADROOM: u32 = 2;
/// A slab with room for the group four times over is taken before the
/// first with room three times over, if the look back meets one.
const ROOMIEST_HEADROOM: u32 = 3;
/// Slabs with room three times over that a look back must find before it
/// sends the group back: fewer, and the class is growing (`room_behind`).
const ROOM_BEHIND_SLABS: u32 = 16;
/// `look_or_claim`'s word for "no emptied slab, the claimed slot is not the
/// class's start slot, and the stream has a slab of its own (a hint)":
/// above any slot plus one.
const OWN_HINT: u32 = u32::MAX;
const _: () = assert!((super::MAX_SLOTS as u64) < OWN_HINT as u64);

/// Classes with at least this many blocks a slab (up to 2 KiB blocks) lock
/// their hint's slot without a look at its word first: the stream's hint
/// names the slab its warp used last, which seldom fills between two of
/// its mallocs, so the look is a round trip the malloc waits for in vain.
/// In the contention test's warm launches (2026-12-05, 04:04 UTC) the path
/// went from 9 to 8 round trips per pair at 16 and 64 B and from 10 to 9 at
/// 1 KiB (guard RMWs per group-pair 3.01 → 3.06 there; cold, 3.7 → 4.2:
/// more locks of a full hint slab). At 8 KiB (255 blocks a slab, about 8
/// warps' groups) the hint slab is often full: locking it blind took 5.45
/// guard RMWs per group-pair warm, 0.6 locks of a full slab per
/// group-malloc, against 3.3 to 4.1 with the look.
///
/// What the look filtered, a blind lock meets as it is (all rare for a
/// stream's own hint, whose slot held the warp's last slab of the class):
/// a slab with room for part of the group only (the group takes none of
/// it while the heap may grow, and scans on: `at_home`; on an exhausted
/// heap the rest scan again at once), a creation (the group is counted
/// on it, as a free is — as a
/// waiter it is not: the creation's count is inflated by the group — and
/// the scan looks at the slot again, registering there), an empty slot
/// (the blind lock claims nothing: the scan looks at the slot again, and
/// claims it through `look_or_claim`).
///
/// Claiming nothing, the blind lock needs no exhausted mark (which says
/// whether a scan may claim): the scan reads the mark only after it
/// (`search_bounds`), off the path of a malloc that finds room at its
/// hint. In the contention test's warm launches (2026-12-05, 09:53 UTC,
/// three runs) the path went from 8 to 7 round trips per pair at 16 and 64
/// B and from 9 to 8 at 1 KiB; on a GPU the mark's load came after the
/// hint's (atomics are `asm` the compiler keeps in order, and the hint's
/// value picks between two loads), one more round trip in series. Cold,
/// guard RMWs per group-pair 3.27 → 3.74 at 16 and 64 B (10:21 UTC): a
/// class's first creation is met by blind locks, which count on it and
/// then register on it after a look.
/// ptxas: sm_75 `malloc_only` 40 → 42 and `malloc_free_once` 42 → 44
/// registers, within what costs a Turing SM no warp (`tests/ptx.rs`,
/// `FREE_UP_TO`); sm_80 and sm_90 unchanged.
///
/// In classes of fewer blocks, which look first, the mark is read only
/// once the look shows no slab of the class with room for the group: off
/// the path of a malloc that finds room at its hint (8 KiB: 9 → 8 round
/// trips per pair; ptxas: `malloc_only` 1 to 2 registers more, within its
/// target; BENCHMARKS.md, "A hint per freed block"). Locking the hint
/// blind at 8 KiB too (threshold 128) took the path to 7 but locked a
/// full slab 0.46 to 0.99 times per group-malloc (guard RMWs per
/// group-pair 4.9 to 6.7): at 7 groups of 32 a slab, a stream's slab
/// fills between its free and its next malloc, taken by warps displaced
/// from theirs. In those classes a hint is locked blind where its free
/// left room (`locks_blind`: a roomy hint).
const BLIND_LOCK_USABLE: u32 = 1024;

/// A hint word (as `hint` returns it) at or above this, and below
/// `NEWCOMER`, is roomy: the free that set it left the slab room for a
/// warp's group (`HINT_ROOMY`, `ROOMY_BLOCKS`).
const ROOMY: u32 = HINT_ROOMY << HINT_BLOCK_SHIFT;
const _: () = assert!(ROOMY < NEWCOMER);

/// How many slots after a creation of its class, on which `before` lanes
/// were counted before it (slabs of `usable` blocks), a scan passes — it
/// claims none of them and counts on none of their creations, but takes
/// a slab's room there: the lanes beyond the creation's room go on too,
/// and fill a slab each `usable` of them in the slots after it, in the
/// order they were counted, when a launch's groups reach the class's
/// frontier at once. At most `CROWD_PASS`.
#[inline(always)]
fn crowded_past(before: u32, usable: u32) -> u32 {
    (before / usable).saturating_sub(1).min(CROWD_PASS)
}

/// Whether a scan of `n` lanes in a class of `usable` blocks a slab,
/// starting at the hint word `hinted`, locks its hint's slot without a
/// look first: in classes of many blocks (`BLIND_LOCK_USABLE`); for a
/// group of at most a 32nd of a slab's blocks in the others — a group
/// that small seldom finds its stream's slab full; and where the hint is
/// roomy (`ROOMY`: its stream's last free there left room for a warp's
/// group, and a group served whole at home or not at all, `at_home`,
/// seldom finds that room gone at its next malloc). A caller about to
/// store a hint that is not roomy (the slot alone) passes 0.
///
/// The small groups: in the contention test's mixed launch, where most
/// groups are a lane or two, the path went from 9 to 8 round trips per
/// pair, warm (2026-12-05, 15:28-15:34 UTC, six runs; 8 KiB, whose groups
/// are 32, unchanged; ptxas unchanged).
///
/// The roomy hint: at 8 KiB (groups of 32, 255 blocks a slab), warm,
/// twenty-two runs (2026-12-06, 00:05-00:58 UTC), the path went from 8 to
/// 7 round trips per pair (7.25 in one run: only 37 % of those scans are
/// blind, and the path is the best warp's), their mean over the warps
/// from 9.0-9.4 to 8.5-9.2, guard RMWs per group-pair 3.08 to 3.18 (3.04
/// to 3.10 before), extra walk rounds per group-malloc 0.078 to 0.141
/// (0.069 to 0.117); ptxas unchanged. Room for a group two or three times
/// over (`ROOMY_BLOCKS` 64 or 96) made more scans blind (70 %, 54 %) but
/// took more guard RMWs and walk rounds (3.31-3.42 and 0.148-0.196;
/// 3.19-3.26 and 0.121-0.136). With every hint that names a block (a free's,
/// whatever room it left) locked blind, guard RMWs were 3.60 to 3.66
/// (2026-12-05): a crowded slab's lock fails or splits the group. With
/// the block stored only where the free left room (one field for both),
/// the frees that stored none sent two thirds of the walks to a look into
/// a crowded slab, where one in six collided (0.165 extra walk rounds
/// at four times over); with the room flagged apart, one in sixteen walks
/// from the hint's block collided. (All that with room four times over;
/// once over since 2026-12-06, night, after `at_home` and `headroom` had
/// changed who meets a stream's slab: `ROOMY_BLOCKS`.)
#[inline(always)]
fn locks_blind(usable: u32, n: u32, hinted: u32) -> bool {
    usable >= BLIND_LOCK_USABLE || n * 32 <= usable || (ROOMY..NEWCOMER).contains(&hinted)
}

/// Whether a scan at slot `offset` from the hint word `hinted` is at its
/// stream's own slab: the hint's slot (`offset` 0) of a hint of the
/// stream's own (below `NEWCOMER`).
///
/// # Whole at home
/// There, while the heap may grow (`may_grow`), a lock that finds room
/// for part of its group only (less than `admission`: a group of more
/// than half a slab takes any room) takes none: the group scans on,
/// whole. Once the heap is exhausted, the look at home that reads the
/// mark and sees room there for part of the group goes on as a last try
/// does (`LAST_RESORT`: any room) and takes it. (A blind lock comes
/// before the mark is read: on an exhausted heap it refuses, and the look
/// after it takes the room. Without that, the group passed its home and
/// reached it only on its last try, which starts at the class's first
/// slot and may not reach it: null with room there. Any room from home
/// on, in the whole exhausted window, split a group over slabs that a
/// search with admission passes: the test
/// `a_refused_claim_is_served_by_the_room_its_scan_passed` failed.)
/// Elsewhere, a group takes the room a lock finds, and its lanes beyond
/// it scan again.
///
/// A stream comes back to the slab it freed into. Where more streams come
/// back to one slab than it has room for whole groups of (8 KiB: 255
/// blocks, 7 groups of 32 and 31 blocks), the last to come took the 31
/// and sent a lane to scan again, round after round: that lane took a bit
/// of another slab's free word, whose group then met it (a second round of
/// its walk), and the split group's free pointed its hint at the crowded
/// slab again. Passed whole, the group finds a slab with room for it
/// twice or three times over (`headroom`) and its hint moves there. The crowded slab's 31
/// blocks stay for groups away from home and for an exhausted heap (slabs
/// of 224 blocks, tried first, gave 0.032 extra walk rounds in one run,
/// but cost every such slab its last 31 blocks).
///
/// In the contention test's warm launch at 8 KiB (2026-12-06, 04:47-05:03
/// UTC, the build machine): extra walk rounds per group-malloc 0.043 to
/// 0.094 in eighteen release runs and 0.055 to 0.071 in three debug runs,
/// against 0.101 to 0.126 in four runs of the code before (0.078 to 0.141
/// in twenty-two on 2026-12-06); guard RMWs per group-pair 3.03 to 3.08
/// against 3.11 to 3.13. A temporary count of the walks by how they
/// started (one run each, the first form: groups of 16 lanes or more):
/// from the stream's freed block 1 856 walks, 93 of them with a second
/// round, before; 1 827 and 61 after; split groups' walks 68 and 12
/// before, 6 and 2 after.
///
/// Test: `tests/alloc.rs`,
/// `a_group_back_at_its_slab_is_served_whole_or_takes_what_an_exhausted_heap_has`:
/// a roomy hint (a blind lock) at a slab with room for 31, the group
/// served whole in a new slab — with no refusal at home, 31 lanes there
/// and one elsewhere; on an exhausted heap, its first scan serves 31 at
/// home — with no last try from home once exhausted, the group scanned
/// the exhausted window and took the 31 on its own last try.
#[inline(always)]
fn at_home(offset: u32, hinted: u32) -> bool {
    offset == 0 && hinted < NEWCOMER
}

/// Whether a scan whose exhausted mark reads `limit` and `claim` may still
/// grow the heap: the mark unread (a blind lock's), or read with a tag to
/// claim with (not exhausted, or a slab at hand).
#[inline(always)]
fn may_grow(limit: u32, claim: u32) -> bool {
    limit >= MARK_DUE || claim != 0
}

/// Slots after the hint (offsets 1 to this) where a search away from its
/// stream's own slab wants room for its group three times over
/// (`headroom`); twice over beyond them.
const NEAR_SLOTS: u32 = 32;

/// Classes of more blocks a slab than this (8 KiB and smaller blocks: 255
/// at 8 KiB) want room three times over near the hint (`headroom`): three
/// warps' groups of 32 are under half such a slab (96 of 255 blocks). In a
/// class of fewer (170 blocks at 12 KiB, 146 at 14 KiB, 127 at 16 KiB) a
/// search wanting that much would pass most slabs near its hint and claim
/// a new one: twice over there.
const NEAR_USABLE: u32 = 254;
const _: () = assert!(3 * simt::WARP_SIZE <= NEAR_USABLE / 2 + 1);

/// A group of a whole warp's lanes wants room three times over near the
/// hint (`headroom`): the runs a warp's group frees and comes back for are
/// a word's worth. Smaller groups — the lanes of a diverged warp, or the
/// lanes a slab had no room for, which scan again with a hint of their
/// own — wanting four times over passed slabs they fit in and claimed
/// more: 10 slabs where 9 served 2 048 blocks of 8 KiB held at once (the
/// README's memory pressure example, `tests/heap.rs`, with every group
/// and, in a fresh clone's CI run, with groups of half a warp or more;
/// 2026-12-06).
const NEAR_LANES: u32 = simt::WARP_SIZE;

/// The headroom a scan at slot `offset` from the hint word `hinted` wants
/// (`Seen::worth_a_lock`, `guard::wanted`: 0 none, 1 twice over, 2 three
/// times over): none while it may not claim (the heap is exhausted) or its
/// stream has no slab of its own (`NEWCOMER`); three times over in the
/// `NEAR_SLOTS` after the hint; twice over at the hint's slot and beyond.
/// At the hint's slot that is the look again after a lock there found no
/// room: the first look at offset 0 comes before the exhausted mark is
/// read, with no claim allowed, so it wants no headroom (a review,
/// 2026-12-07: this said a hint that is not roomy wanted it too).
///
/// # Three times over near the hint
/// A group away from its stream's slab took the first slab with room for
/// it twice over. That room was mostly runs of blocks that the warps
/// homed there (their hints name the slab) had freed and were coming
/// back for — often a whole free word, which the look in a slab of few
/// words (`Slab::allocate`) picks first. The warp whose run was taken met
/// it at its next walk: a second round, its group's lanes spread over the
/// slab's other free bits, and often a move of its own to another slab,
/// where it took another warp's run. Room for the group twice over is
/// often one group's room and a run in the gap between its warp's free
/// and its next malloc; three times over leaves a group's room that is no
/// one's run. In classes where that is under half a slab
/// (`NEAR_USABLE`).
///
/// In the contention test's warm launches at 8 KiB (2026-12-06, the build
/// machine; 09:58-10:20 UTC, sixteen release runs of the growth test and
/// six debug runs of the whole file): extra walk rounds per group-malloc
/// 0.025 to 0.059, against 0.054 to 0.086 in fourteen release runs of the
/// code before (09:35-09:50 UTC); scans that met a creation 0 to 6 per
/// 1 000 group-mallocs (2 to 8); guard RMWs per group-pair 3.01 to 3.04
/// (3.03 to 3.07); round trips per pair (the mean over the warps) 8.1 to
/// 8.5 (8.4 to 8.8). The price: the cold launch at 8 KiB took 99 to 102
/// slabs from the host for a demand of 65 (94 to 97), the warm one 2 to 5
/// (3 to 5).
///
/// Four times over (the first form, tried and reverted that morning,
/// BENCHMARKS.md "Room four times over near the hint") took 0.022 to 0.038
/// extra walk rounds but 105 or 106 slabs cold, 4 to 6 warm, and scans
/// that met a creation up to 11 per 1 000 (a fresh clone's CI run failed
/// the bound of 10): a group near the class's newest slab passed slabs
/// with room for it two or three times over, met the empty slot after
/// them and claimed. The window (a temporary form of it that counted the
/// group twice, three runs each): the 8
/// slots after the hint, 0.042 to 0.065; 16, 0.040 to 0.050; 32, 0.026 to
/// 0.042 (nine runs); 64, 0.029 to 0.058; the whole table, 0.037 to 0.050
/// and a failed run. Sending a group that meets the empty slot back to
/// the nearest slab before it with room twice over (one load a lane) did
/// not lower the creations (2 to 11 per 1 000, eight runs): at the warm
/// launch's start, the 32 slabs before the newest had no such room — their
/// counts stood above the slab's blocks, groups' locks in flight.
///
/// ptxas: the sm_90 columns' `malloc_free_once` 46 → 47 and `alloc_free`
/// 58 → 57 registers (`tests/ptx.rs`), the headroom as the sum of two
/// flags; computed as a shift, or for groups of any size, `malloc_only`
/// took 3 or 4 more (with four times over).
#[inline(always)]
fn headroom(may_claim: bool, hinted: u32, offset: u32, usable: u32, n: u32) -> u32 {
    let base = may_claim & (hinted < NEWCOMER);
    u32::from(base)
        + u32::from(
            base & (offset.wrapping_sub(1) < NEAR_SLOTS)
                & (usable > NEAR_USABLE)
                & (n >= NEAR_LANES),
        )
}

/// Whether hint word `hint` names a slot of a table of `slot_count` (its
/// slot field is the slot plus one; 0, or a slot beyond a table the host
/// shrank, is no hint).
#[inline(always)]
fn names_a_slot(hint: u32, slot_count: u32) -> bool {
    (hint & HINT_SLOT_MASK).wrapping_sub(1) < slot_count
}

/// The slot a class's first scan starts from (its hint until it has one): a
/// hash of the class, spread over the table (murmur3's finaliser).
#[inline(always)]
pub(super) fn start_slot(class: usize, slot_count: u32) -> u32 {
    let mut x = class as u32 + 1;
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^= x >> 16;
    reduce(x, slot_count)
}

impl DeviceHeap {
    /// Where a search of `class` by the caller starts: its stream's hint,
    /// else the class's (stream 0's), else the class's start slot — the
    /// slot in the low `HINT_BLOCK_SHIFT` bits, the hint's block field (or
    /// 0) above; `NEWCOMER` above a hint not the stream's own. A hint
    /// beyond the table (the host shrank it) is no hint.
    #[inline(always)]
    fn hint(&self, class: usize, slot_count: u32) -> u32 {
        let own = self
            .class_hint(class, self.stream())
            .load(Ordering::Relaxed);
        // The slot's field is at least 1: subtracting 1 leaves the word's.
        if names_a_slot(own, slot_count) {
            return own - 1;
        }
        NEWCOMER
            | match self.class_hint(class, 0).load(Ordering::Relaxed) {
                // Another stream's block is not where this one freed.
                h if names_a_slot(h, slot_count) => (h - 1) & HINT_SLOT_MASK,
                _ => start_slot(class, slot_count),
            }
    }

    /// A block of class `class` for each lane of `lane_mask` (0: no
    /// memory): finds each lane a slab of the class with room and a
    /// reservation on it, then walks the slab's bitfield for a block.
    ///
    /// Rounds of a scan and the creations it asked for. The lanes of one
    /// class form a group whose leader scans alone for all of them (`scan`:
    /// one lock of the group's size per slot it tries, no collectives in
    /// its loop), then shares what it found. After the scan, outside its
    /// loop (so that the registers of the slow part do not add to it), a
    /// group that claimed an empty slot creates its slab there; a group
    /// that found nothing while a slab sits empty somewhere (a full slot
    /// table, or an exhausted heap's window) takes that slab over in its own
    /// slot. Lanes beyond the room a slab had, lanes whose claim found no
    /// memory (the heap is now marked exhausted), and lanes that met a slot
    /// being created and got no room from it (still untagged after its
    /// polls, or crowded: `CreationEnd`) scan again from the class's hint —
    /// which creators move to their new slab. The waits inside the scan
    /// (`wait_for_creation`, a takeover's untagged claim) poll another
    /// group's progress, which may be another class's group of the same
    /// warp: they rely on independent thread scheduling (sm_70 and later;
    /// the builds target sm_75 and sm_80) and, in the simulator, on a
    /// switch at every sleep.
    ///
    /// Inlined into the kernel: out of line, ptxas gives the kernel's own
    /// state (a loop's counters, say) registers above everything this
    /// touches; inlined, it can share them. Measured with the stress loop
    /// `alloc_free`: 55 registers out of line, 48 inlined (sm_90); see
    /// BENCHMARKS.md.
    #[inline(always)]
    pub(super) fn allocate_small(&self, lane_mask: u32, class: usize) -> u64 {
        let mut pending = lane_mask;
        // The heap and the class pass through `opaque` at each round, and
        // what the round computes from them is computed in it, not kept
        // live across the rounds (nor across the block's walk after them).
        let mut heap = self;
        let mut class = class;
        // The simulator's count of this lane's scans (LongSearch).
        #[cfg(not(target_arch = "nvptx64"))]
        let mut scans = 0u32;
        loop {
            #[cfg(not(target_arch = "nvptx64"))]
            {
                scans += 1;
            }
            heap = heap.opaque();
            class = simt::opaque_u32(class as u32) as usize;
            let group = simt::match_any_u32(pending, class as u32);
            let (mut found, mut outcome) = heap.scan(group, class);
            if outcome == LOOK || outcome == CLAIM {
                outcome = heap.look_or_claim(group, found.reserved, class, outcome == LOOK);
            }
            if outcome == CLAIMED || outcome == NOTHING {
                // Claimed: `found.reserved` is the claimed slot. Nothing:
                // the group takes an empty slab over in its slot. Either
                // way, the whole group.
                // The new slab (2 MiB aligned), or the outcome below it.
                let made = heap.create(group, found.reserved, class, outcome == NOTHING);
                let served = simt::ballot(group, made >= SLAB_SIZE);
                (found, outcome) = if made >= SLAB_SIZE {
                    // The group's first lanes, as many as the class's
                    // blocks: positions 1.. after the publication.
                    let rank = (group & simt::lanemask_lt()).count_ones();
                    let found = Found {
                        slab: made,
                        reserved: rank + 1,
                        uniform: served,
                    };
                    (found, FOUND)
                } else {
                    (Found::NONE, made as u32)
                };
            }
            let again = outcome == NO_MEMORY || outcome == RETRY || outcome == AGAIN;
            pending = simt::ballot(pending, again);
            if !again {
                #[cfg(not(target_arch = "nvptx64"))]
                if scans > LONG_SEARCH {
                    record(Event::LongSearch);
                }
                if found.slab == 0 {
                    heap.classes.refused(class);
                    return 0;
                }
                // SAFETY: every lane of `found.uniform` holds a reference
                // and a position ≤ usable on this live slab of class
                // `class`.
                return unsafe {
                    Slab(found.slab & !(SLAB_SIZE - 1)).allocate(
                        found.uniform,
                        found.reserved,
                        geometry(class),
                        found.slab as u32 & HINT_BLOCK_MASK,
                    )
                };
            }
            // The lanes of `pending`, all of them here. No memory: the next
            // scan looks at existing slabs only (the exhausted mark says
            // so). A drawn wait: no backoff state lives across the rounds.
            if outcome != AGAIN {
                simt::snooze_drawn(simt::draw());
            }
        }
    }

    /// One scan for the lanes of `group` (all of one class, all calling):
    /// the leader scans alone, then each lane gets its part. FOUND (a slab
    /// with room and a reservation: the group's first lanes, as many as the
    /// slab had room for; the others AGAIN), CLAIMED (`reserved` is a slot
    /// the group claimed: it must create the slab), LOOK or CLAIM
    /// (`reserved` is an empty slot the group would claim:
    /// `look_or_claim`), RETRY (a slot being created: scan again), or
    /// NOTHING.
    fn scan(&self, group: u32, class: usize) -> (Found, u32) {
        let leader = simt::leader(group);
        let (mut slab, mut packed) = (0u64, NOTHING << OUTCOME_SHIFT);
        if simt::lane_id() == leader {
            (slab, packed) = self.scan_alone(class, group.count_ones());
        }
        let packed = simt::shfl_u32(group, packed, leader);
        let (outcome, word) = (packed >> OUTCOME_SHIFT, packed & WORD_MASK);
        match outcome {
            FOUND => {
                let slab = simt::shfl_u64(group, slab, leader);
                // The leader took `fit` references on top of `base` for the
                // group's first `fit` lanes: their positions are base+1..
                let (base, fit) = (word >> FIT_BITS, word & FIT_MASK);
                let rank = (group & simt::lanemask_lt()).count_ones();
                let served = simt::ballot(group, rank < fit);
                if rank >= fit {
                    return (Found::NONE, AGAIN);
                }
                (
                    Found {
                        slab,
                        reserved: base + rank + 1,
                        uniform: served,
                    },
                    FOUND,
                )
            }
            CLAIMED | LOOK | CLAIM => (
                Found {
                    slab: 0,
                    reserved: word,
                    uniform: group,
                },
                outcome,
            ),
            _ => (Found::NONE, outcome),
        }
    }

    /// The scan of one lane (a group's leader) for `n` blocks of class
    /// `class`, from the class's hint (offset 0) on (offset `o`: the `o`-th
    /// slot after it), to the table's end or, while the heap is exhausted,
    /// the window's. Returns the slab (0 but for FOUND; found at the hint's
    /// slot of a hint of the stream's own, the hint's block in its low
    /// bits, without the roomy bit) and a word with the
    /// outcome above `OUTCOME_SHIFT`: FOUND with `base << FIT_BITS | fit`
    /// (`fit` references taken for the group's first lanes on top of
    /// `base`, the spare ones given back), CLAIMED, LOOK or CLAIM with the
    /// slot, RETRY or NOTHING. No collectives: the leaders of other
    /// classes' groups scan at the same time.
    fn scan_alone(&self, class: usize, n: u32) -> (u64, u32) {
        record(Event::Scan);
        let geo = geometry(class);
        let slot_count = self.slot_count();
        let mut hinted = self.hint(class, slot_count);
        let hint = hinted & HINT_SLOT_MASK;
        let mut offset = 0u32;
        let mut retries = 0u32;
        // The hint's slot is locked without a look first in classes of
        // many blocks a slab (`BLIND_LOCK_USABLE`), by small groups and
        // where the stream's last free left room (`locks_blind`), whose
        // hint slab is seldom full: the look's load off the path. The
        // exhausted mark is read only when a look shows no slab of ours
        // with room, or after a lock made without it found none (`limit`
        // is `u32::MAX`, then `MARK_DUE`, until then): off the path of a
        // malloc that finds room at its hint. Such a lock claims nothing
        // (an empty slot is passed, and looked at again).
        let mut blind = locks_blind(geo.usable, n, hinted);
        let (mut limit, mut claim) = (u32::MAX, 0);
        // Slots still to pass after a crowded creation (`crowded_past`):
        // their room is taken, but they are not claimed nor counted on.
        let mut passing = 0u32;
        while offset <= limit {
            // The hint, then the slots after it: a class's full slabs
            // before its hint are not walked again, so the cost of finding
            // room does not grow with the class's slabs.
            let index = wrap(hint, offset, slot_count);
            let guard = self.slot(index);
            // Locked at once (the hint's slot in a class of many blocks,
            // `blind`), or after one load of the slot's word (pointer,
            // count and class) says it is worth it: a full slab (or one
            // with room for part of the group), another class's slab or
            // creation and one with no room for us are passed (see
            // "Spreading" above). An empty slot, a creation with room for
            // us, a slab being taken over or an empty slab are worth a
            // lock only to claim it, to count on its creation, or to find
            // the empty slab ours.
            let worth = blind || {
                let seen = guard.look();
                // The exhausted mark only once a look shows no slab of
                // ours with room: off the path of a malloc that finds
                // room at its hint.
                if limit >= MARK_DUE
                    && (limit == MARK_DUE
                        || !seen.worth_a_lock(class as u32, geo.usable, n, false, 0, false))
                {
                    let bounds = self.search_bounds(class, n, slot_count);
                    (limit, claim) = ((bounds >> 32) as u32, bounds as u32);
                    // Exhausted, at a home with room for part of the
                    // group: taken, as a last try takes room (`at_home`).
                    if at_home(offset, hinted)
                        && !may_grow(limit, claim)
                        && seen.worth_a_lock(class as u32, geo.usable, n, false, 0, true)
                    {
                        hinted = LAST_RESORT;
                    }
                }
                // A slot passed after a crowded creation: the lanes
                // counted before ours claim it or count on it.
                let passed = passing != 0;
                passing -= u32::from(passed);
                let may_claim = claim != 0 && !passed;
                if seen.is_crowded_creation(class as u32, n, geo.usable) {
                    hinted = CROWDED;
                }
                // An empty slot, about to be claimed: first the class's
                // emptied slabs elsewhere are looked at (LOOK, out of the
                // loop: `look_or_claim`).
                if may_claim && seen.is_empty() {
                    let outcome = if hinted == CROWDED { CLAIM } else { LOOK };
                    return (0, (outcome << OUTCOME_SHIFT) | index);
                }
                // Headroom while the search may claim, unless its stream
                // has no slab of its own to come back to (`NEWCOMER`);
                // any room on its last try (`LAST_RESORT`), which a scan
                // becomes at a home with room for part of the group once
                // the heap is exhausted (`at_home`).
                seen.worth_a_lock(
                    class as u32,
                    geo.usable,
                    n,
                    may_claim,
                    headroom(may_claim, hinted, offset, geo.usable, n),
                    hinted >= LAST_RESORT,
                )
            };
            blind = false;
            if worth {
                record(Event::SlotLock);
                match guard.lock(n, claim) {
                    Lock::Acquired {
                        slab,
                        count,
                        class: of,
                    } => {
                        // `count` is after our `n`: the slab had `base`.
                        let base = count.saturating_sub(n);
                        // The counter names the slab's class.
                        let ours = of == class as u32;
                        let room = if ours && base < geo.usable {
                            geo.usable - base
                        } else {
                            0
                        };
                        // Whole at home: at its stream's own slab, a group
                        // that would be split takes nothing while the heap
                        // may grow (`at_home`).
                        let fit = if at_home(offset, hinted)
                            && may_grow(limit, claim)
                            && room < admission(n, geo.usable)
                        {
                            0
                        } else {
                            room.min(n)
                        };
                        if fit < n {
                            // Room for part of the group: split, or (at
                            // home, `at_home`) passed whole.
                            record(if room == 0 {
                                Event::FullLock
                            } else {
                                Event::PartialFit
                            });
                        }
                        if fit < n {
                            // Wrong class, or more lanes than room: give
                            // the spare references back.
                            self.release_slot(index, n - fit);
                        }
                        if fit > 0 {
                            if base == 0 {
                                // An empty slab of ours put back to use (a
                                // new slab's come from `create`).
                                self.counters.slabs_revived.add(1);
                            }
                            // The hint's block, where the walk starts,
                            // if the slab is the hint's; in the slab's
                            // low bits, which its alignment leaves 0.
                            let mut block = (hinted >> HINT_BLOCK_SHIFT) & (HINT_ROOMY - 1);
                            if offset != 0 || hinted >= NEWCOMER {
                                self.class_hint(class, self.stream())
                                    .store(index + 1, Ordering::Relaxed);
                                block = 0;
                            } else if hinted >= ROOMY && count + ROOMY_BLOCKS > geo.usable {
                                // The hint's slab is roomy no more: the
                                // stream's next malloc looks first.
                                self.class_hint(class, self.stream())
                                    .store((hinted - ROOMY) + 1, Ordering::Relaxed);
                            }
                            return (
                                slab | u64::from(block),
                                (FOUND << OUTCOME_SHIFT) | (base << FIT_BITS) | fit,
                            );
                        }
                    }
                    Lock::Claimed => {
                        // Empty at the lock (emptied since the look):
                        // claimed at once.
                        record(Event::Claim);
                        return (0, (CLAIMED << OUTCOME_SHIFT) | index);
                    }
                    Lock::Creating { waiting } => match Creation::of(waiting) {
                        // A takeover's rebuild (not tagged: our addition
                        // did not count), a slot claimed by another as we
                        // met it empty, or a creation met by a search that
                        // may not claim (the heap is exhausted): the slot
                        // again, soon, and then a whole new scan — not
                        // past it: its slab may be the room an exhausted
                        // heap has left.
                        None if retries < MAX_TRIES => {
                            // Polled with loads while a takeover rebuilds
                            // it: locking it again would add our lanes
                            // again, one RMW a poll on a word that other
                            // groups hit too.
                            while guard.is_untagged_claim() {
                                simt::snooze_after(retries);
                            }
                            retries += 1;
                            continue;
                        }
                        None => {
                            record(Event::CreationWait);
                            record(Event::CreationEnd);
                            return (0, RETRY << OUTCOME_SHIFT);
                        }
                        // A creation of our class that will have room for
                        // us as well as for the lanes counted on it before
                        // (our addition counted us): wait for it, polling
                        // the slot with one load — not registering again —
                        // then lock it. Its creators are never in our
                        // call (a call's lanes of one class are one group)
                        // and no collective of theirs names us; lanes of
                        // our warp in another, divergent call run while we
                        // wait (independent thread scheduling, sm_70 on;
                        // in the simulator a poll's sleep is a switch).
                        Some(c)
                            if c.class == class as u32
                                && c.lanes <= geo.usable
                                && retries < MAX_TRIES =>
                        {
                            record(Event::Registration);
                            record(Event::CreationWait);
                            if !wait_for_creation(guard) {
                                record(Event::CreationEnd);
                                return (0, RETRY << OUTCOME_SHIFT);
                            }
                            retries += 1;
                            continue;
                        }
                        // Another class's creation, or one of ours that
                        // enough lanes count on: go on, and claim a slot of
                        // our own if no room comes first — the class grows
                        // by as many slabs at once as its waiting lanes
                        // need.
                        Some(c) => {
                            // Crowded: of our class, with no room for us
                            // (not one that would serve us, passed after
                            // `MAX_TRIES` waits).
                            if c.class == class as u32 && c.lanes > geo.usable {
                                hinted = CROWDED;
                                // Past the empty slots and creations that
                                // the lanes counted before ours will fill:
                                // our place in the creation's count is our
                                // place in line.
                                passing = crowded_past(c.lanes - n, geo.usable);
                            }
                            record(Event::Registration)
                        }
                    },
                    // Being taken over (by another warp): it will be empty
                    // (claimable) soon.
                    Lock::Busy if retries < MAX_TRIES => {
                        simt::snooze_after(retries);
                        retries += 1;
                        continue;
                    }
                    Lock::Busy | Lock::Empty => {}
                }
            }
            retries = 0;
            // A lock before the mark was read (the blind lock, or one after
            // a look that showed room) found none: the same slot again,
            // looked at, with the mark read whatever the look shows
            // (`MARK_DUE`) — an empty hint slot, which such a lock passes
            // (it claims nothing), is claimed there through
            // `look_or_claim`, as a scan that read the mark first would;
            // and no slot is locked more than twice.
            offset += u32::from(limit < MARK_DUE);
            limit = limit.min(MARK_DUE);
        }
        // Every slot once, no room: nothing — unless a crowded creation
        // of the class was met, whose lanes may have passed slots
        // (`crowded_past`) that no one filled: the scan again, after a
        // wait, not a takeover or null while they may be empty.
        let outcome = if hinted == CROWDED {
            record(Event::CreationEnd);
            RETRY
        } else {
            NOTHING
        };
        (0, outcome << OUTCOME_SHIFT)
    }

    /// How far a scan of `n` lanes of `class` goes and what it may claim
    /// with, as `limit << 32 | claim`: out of memory (the provider refused
    /// a slab, none came back since), it claims no empty slot (`claim` 0)
    /// unless a slab went empty or the pool has one, and looks at the hint
    /// and a bounded window only; else the whole table, claiming with a
    /// creation tag. Out of line: read once a scan, at its first look that
    /// shows no slab of the class with room, or after a lock made without
    /// it found none (the hint's blind lock, say).
    #[inline(never)]
    fn search_bounds(&self, class: usize, n: u32, slot_count: u32) -> u64 {
        let probe = self.is_exhausted() && !self.slab_at_hand();
        let (limit, claim) = if probe {
            (EXHAUSTED_WINDOW.min(slot_count), 0)
        } else {
            (slot_count, creation_tag(class, n))
        };
        u64::from(limit) << 32 | u64::from(claim)
    }

    /// The scan of `group` (all calling) met empty slot `index`, which it
    /// would claim for `class`. Before it does (with `look`: LOOK, not
    /// CLAIM), its leader looks for an emptied slab of the class among the
    /// `empties` marks (`own_empty`); if none, and its stream has a slab of
    /// its own, the group looks back at the class's slabs for room
    /// (`room_behind`). One found, the caller's stream's hint names it and
    /// the group scans again from there at once (AGAIN), putting it back
    /// to use; none, the leader claims the slot (CLAIMED: the group creates
    /// a slab in it) or, if another group took it first, points its
    /// stream's hint at the slot and scans again from there at once
    /// (AGAIN). (RETRY before: a drawn wait and a scan from the hint, past
    /// the class's full slabs; see "Growth to the demand".)
    ///
    /// Out of the scan's loop, so that its registers are not the loop's
    /// (inside it, `alloc_free` spilled on sm_80; ptxas, 2026-12-05). Before
    /// this, a scan claimed the slot first and `create_alone` looked after:
    /// the claim gave up for the slab it found, but groups of the class had
    /// registered on it meanwhile and waited for nothing — in the
    /// contention test's warm launch at 8 KiB, 316 claims given up and
    /// 13 070 registrations (6.4 guard RMWs per warp-pair).
    fn look_or_claim(&self, group: u32, index: u32, class: usize, look: bool) -> u32 {
        let leader = simt::leader(group);
        // The slot to scan again from, plus one (0: none); `OWN_HINT`
        // until the look back, which a stream with no hint of its own does
        // not make: its group is new demand (a rising one: in the
        // contention test's `rising`, whose second launch at 8 KiB, looking
        // back for every stream, grew to 92 to 96 slabs, not 103 to 106,
        // and whose path went to 7.25 round trips per pair, bound 7, in 3
        // of 8 debug runs; 2026-12-06). Nor does a claim of the class's
        // start slot, with nothing behind it: there the hint's load lies
        // on the path of the race for the class's first slab, and the
        // contention test's cold launch at 16 B, where every warp waits
        // for that slab, took 12 to 16.5 round trips per pair on the path
        // with it (six release runs) and 9 to 9.75 without (sixteen). The
        // code before, with no such load, took 13 to 18: why this form
        // races better than it is not known (BENCHMARKS.md).
        let mut again = 0;
        if look && simt::lane_id() == leader {
            let slots = self.slot_count();
            again = match self.own_empty(class, index) {
                Some(empty) => empty + 1,
                None if index != start_slot(class, slots)
                    && names_a_slot(
                        self.class_hint(class, self.stream())
                            .load(Ordering::Relaxed),
                        slots,
                    ) =>
                {
                    OWN_HINT
                }
                None => 0,
            };
        }
        if look {
            again = simt::shfl_u32(group, again, leader);
            if again == OWN_HINT {
                again = self.room_behind(group, class, index);
            }
        }
        let mut outcome = RETRY;
        if simt::lane_id() == leader {
            outcome = match again {
                // Claimed only if still empty: a slot claimed or
                // published since is the next scan's to meet (locking it
                // here, as a scan does, registered the group on a creation
                // that its next scan registered it on again).
                0 if self
                    .slot(index)
                    .claim(creation_tag(class, group.count_ones())) =>
                {
                    record(Event::Claim);
                    CLAIMED
                }
                // Claimed by another group since the look: the stream's
                // next scan starts there at once (AGAIN), where it counts
                // on that creation if it will have room, or goes on and
                // claims the next empty slot — not from its hint again,
                // after a wait, past the class's full slabs.
                //
                // Not where the next scan would lock its hint's slot blind
                // (`locks_blind`): a blind lock of a creation adds the
                // group to its count unregistered, and the look after it
                // registers the group again — counted twice, the creation
                // looks crowded early and more slabs are claimed. Those
                // scan again from their own hint.
                0 => {
                    if !locks_blind(geometry(class).usable, group.count_ones(), 0) {
                        self.class_hint(class, self.stream())
                            .store(index + 1, Ordering::Relaxed);
                    }
                    AGAIN
                }
                // An emptied slab of the class, or room behind the hints.
                slot => {
                    record(Event::Redirect);
                    self.class_hint(class, self.stream())
                        .store(slot, Ordering::Relaxed);
                    AGAIN
                }
            };
        }
        simt::shfl_u32(group, outcome, leader)
    }

    /// Before a claim of slot `index` (no emptied slab of the class near
    /// it: `own_empty`), the group (all calling) looks back at the slots
    /// from the class's start slot up to `index`, a slot per lane in each
    /// of at most `LOOK_BACK_ROUNDS` rounds: once `ROOM_BEHIND_SLABS` slabs
    /// of the class have room for the group three times over, the first
    /// slab it met with room four times over (up to the round that found
    /// the last of them), else the first with room three times over (its
    /// slot plus one: 0 for none). Not in a class where three times the
    /// group is more than a slab holds: a group of more than half a slab
    /// wants 3 blocks there (`guard::admission`), which most slabs have, and
    /// would be split. The room behind the hints: a scan walks from its
    /// stream's hint to the first empty slot, so a group whose hint names
    /// one of the class's newest slabs, crowded at a launch's peak, claimed
    /// a new slot while older slabs had room.
    ///
    /// Temporary traces of the contention test at 8 KiB (2026-12-06, the
    /// build machine; BENCHMARKS.md "A look back at the claim, for a class
    /// with room"): at the warm launch's claims (the code before), 101 to
    /// 104 slabs of the class lay behind, 27 to 68 with room three times over; its scans
    /// that met those creations failed the bound of 10 per 1 000
    /// group-mallocs about one run in thirty. While the cold launch grew to
    /// its demand of 65 slabs, at most 5 had that room at a claim, and at
    /// most 16 until it had 95. Taking the first slab with room (twice or
    /// four times over) starved that growth in some runs (a debug build's
    /// cold launch 87 slabs, its warm launch's walk then 0.127 extra rounds
    /// per group-malloc, bound 0.1): only a class with room in several
    /// slabs sends its groups back.
    ///
    /// A slot per lane, not the leader alone: up to 128 loads a claim, on a
    /// GPU each a round trip if made one after another; a warp's group
    /// makes them in four rounds.
    fn room_behind(&self, group: u32, class: usize, index: u32) -> u32 {
        let slots = self.slot_count();
        let start = start_slot(class, slots);
        let geo = geometry(class);
        let n = group.count_ones();
        let rank = (group & simt::lanemask_lt()).count_ones();
        // The slots from the start slot to `index`, around the table's end;
        // none where three times the group is more than a slab holds.
        let span = if n * (1 + ROOM_BEHIND_HEADROOM) <= geo.usable {
            ((index + slots - start) % slots).min(LOOK_BACK_ROUNDS * n)
        } else {
            0
        };
        // Slots plus one (0: none yet).
        let (mut base, mut roomy, mut first, mut roomiest) = (0, 0, 0, 0);
        while base < span {
            let (mut three, mut four) = (false, false);
            if base + rank < span {
                let seen = self.slot(wrap(start, base + rank, slots)).look();
                let room = |headroom| {
                    seen.worth_a_lock(class as u32, geo.usable, n, false, headroom, false)
                };
                (three, four) = (room(ROOM_BEHIND_HEADROOM), room(ROOMIEST_HEADROOM));
            }
            // The slot of the group's lowest lane in `lanes`, plus one.
            let lowest = |lanes: u32| {
                let below = group & ((1u32 << simt::leader(lanes)) - 1);
                wrap(start, base + below.count_ones(), slots) + 1
            };
            let threes = simt::ballot(group, three);
            let fours = simt::ballot(group, four);
            if first == 0 && threes != 0 {
                first = lowest(threes);
            }
            if roomiest == 0 && fours != 0 {
                roomiest = lowest(fours);
            }
            roomy += threes.count_ones();
            if roomy >= ROOM_BEHIND_SLABS {
                return if roomiest != 0 { roomiest } else { first };
            }
            base += n;
        }
        0
    }

    /// The lanes of `group` (all calling) claimed slot `index`: they get a
    /// slab (an empty one taken over, the pool's, or the host's), zero its
    /// bitfield together and publish it with a reservation each. Returns
    /// the slab (FOUND: the lane's position is its rank in the group plus
    /// one), or NO_MEMORY (the claim given up, the heap marked exhausted)
    /// as a number below any slab's address: one word, which a call
    /// returns in a register (a `Found` and an outcome went through the
    /// stack).
    ///
    /// With `adopt`, the group found nothing and claimed no slot (a full
    /// slot table, or an exhausted heap's window): it takes over an empty
    /// slab that `empties` names, keeping it in its slot (which then shows
    /// "being created"), and builds its own slab there from it. The slab,
    /// or NOTHING when no empty slab could be had.
    fn create(&self, group: u32, index: u32, class: usize, adopt: bool) -> u64 {
        let leader = simt::leader(group);
        let mut got = 0u64;
        if simt::lane_id() == leader {
            got = self.create_alone(index, class, adopt);
        }
        let got = simt::shfl_u64(group, got, leader);
        let slab = (got >> 32) << SLAB_SHIFT;
        if slab == 0 {
            return u64::from(if got == RESTARTED {
                RETRY
            } else if adopt {
                NOTHING
            } else {
                NO_MEMORY
            });
        }
        let index = (got as u32) >> CLEAN_BITS;
        let clean_words = got as u32 & CLEAN_MASK;
        self.build(group, index, class, slab, clean_words)
    }

    /// The leader's part of [`DeviceHeap::create`]: the slab,
    /// in slab units in the high word, the slot it is to go in and the
    /// bitfield words known to be zero in the low (`index << CLEAN_BITS |
    /// clean_words`); or 0.
    #[inline(always)]
    fn create_alone(&self, index: u32, class: usize, adopt: bool) -> u64 {
        let pack = |slot: u32, slab: u64, clean: u32| {
            (slab >> SLAB_SHIFT) << 32 | u64::from(slot << CLEAN_BITS | clean)
        };
        if adopt {
            return match self.take_over_empty(false) {
                Some((from, slab, clean)) => pack(from, slab, clean),
                None => self.search_from_first(class),
            };
        }
        // No second look for an emptied slab of the class here: the scan's
        // claim came after one (`look_or_claim`), or after a creation of the
        // class that more lanes count on than it has room for (CLAIM), where
        // one is pointless, or (rare) at a lock that met the slot emptied
        // since its look (`Lock::Claimed`); a look here cost every claim up
        // to 11 round trips more, and gave up claims that other groups had
        // counted on.
        let generation = self.memory_generation();
        match self.obtain_slab(generation) {
            Some((slab, clean)) => pack(index, slab, clean),
            None => {
                self.slot(index).abandon();
                // No memory: the exhausted heap's searches look at a window
                // after their hint only. The stream's next one looks at
                // the window that ends at the refused slot, where its scan
                // just passed slabs of the class — with room for the group,
                // but not twice or three times over (`headroom`), say; its
                // last try, at the
                // class's start slot (`search_from_first`). The class's
                // hint goes there: its slabs begin at its start slot (its
                // first claim's), and the newest, which the hints name,
                // may be full while older ones have room. (In that order:
                // stream 0's hint is the class's.)
                let slots = self.slot_count();
                let back = (EXHAUSTED_WINDOW - 1).min(slots - 1);
                self.class_hint(class, 0)
                    .store(self.first_hint(class), Ordering::Relaxed);
                self.class_hint(class, self.stream())
                    .store(wrap(index, slots - back, slots) + 1, Ordering::Relaxed);
                0
            }
        }
    }

    /// The hint word that names `class`'s start slot (its first claim's,
    /// where its oldest slabs lie), with no block.
    #[inline(always)]
    fn first_hint(&self, class: usize) -> u32 {
        start_slot(class, self.slot_count()) + 1
    }

    /// A group found nothing in an exhausted heap's window (or a full
    /// slot table) and no empty slab to take over: before its lanes get
    /// null, its stream's hint moves to the class's first slot (its first
    /// claim's), where its older slabs lie, and it searches once more from
    /// there (RESTARTED), taking any room it meets (`LAST_RESORT`) —
    /// unless the stream's hint says a last try was made already (0:
    /// null), by this group or by another of the stream's; a free or a
    /// found slab of the stream clears it. A stream's hint may name a slot
    /// far from the class's slabs with room: a claim it lost
    /// (`look_or_claim`) whose creation the host then refused, say. And
    /// the scans before passed room that a search able to claim leaves to
    /// others (headroom), or that holds only part of the group
    /// (`admission`): in a full slot table, that room is all there is.
    ///
    /// Limits: the last try, like any search of an exhausted heap, looks
    /// at a window of slots only. Room that a scan passed for headroom
    /// before the host refused its claim lies, mostly, in the window that
    /// ends at the refused slot, where the refusal points the stream's
    /// hint (`create_alone`; `a_refused_claim_is_served_by_the_room_its_
    /// scan_passed`); room it passed further back is found only once
    /// memory comes back or a free points a hint at it — and with `spill`
    /// the claim gets a slab of host memory instead. A crowded creation met
    /// during the last try ends its any room (`CROWDED` replaces the
    /// word). The flag, left on a stream's hint by a null, makes that
    /// stream's next search (in a later launch, say) one that takes any
    /// room, splitting its group over a gap.
    fn search_from_first(&self, class: usize) -> u64 {
        let hint = self.class_hint(class, self.stream());
        if hint.load(Ordering::Relaxed) >= LAST_RESORT {
            return 0;
        }
        hint.store(self.first_hint(class) | LAST_RESORT, Ordering::Relaxed);
        RESTARTED
    }

    /// The lanes of `group` (all calling) own slot `index` (claimed, or
    /// kept by a takeover) and `slab`: they zero its bitfield from
    /// `clean_words` on, the leader names the slot in the granule table,
    /// points the class's hint at it and publishes it with a reservation
    /// per lane. The slab, or RETRY for the lanes beyond the class's blocks.
    fn build(&self, group: u32, index: u32, class: usize, slab: u64, clean_words: u32) -> u64 {
        let leader = simt::leader(group);
        // SAFETY: the group owns the slot's new slab exclusively.
        unsafe { Slab(slab).init(group, geometry(class), index, clean_words) };
        let n = group.count_ones();
        if simt::lane_id() == leader {
            if let Some(granule) = self.granule_of(slab) {
                self.granules.set(granule, Granule::Slab { slot: index });
            }
            self.slot(index).publish(slab, class, n);
            // The creators' stream and the class: a stream with no hint of
            // its own starts at the class's newest slab.
            self.class_hint(class, self.stream())
                .store(index + 1, Ordering::Relaxed);
            self.class_hint(class, 0)
                .store(index + 1, Ordering::Relaxed);
        }
        // The count is `n` after the publication: the lanes' positions are
        // 1..=n. A group larger than the class's blocks (the largest
        // classes) keeps what fits; the others give their references back
        // and search again.
        let reserved = (group & simt::lanemask_lt()).count_ones() + 1;
        let fits = reserved <= geometry(class).usable;
        let spare = simt::ballot(group, !fits);
        if spare != 0 && simt::is_leader(spare) {
            self.release_slot(index, spare.count_ones());
        }
        if !fits {
            return u64::from(RETRY);
        }
        slab
    }

    /// Whether a slab can be had without the host: a slot is marked empty,
    /// or the pool holds one (checked, in O(1), when the heap is exhausted:
    /// a slab emptied while a refusal was in flight must not be stranded).
    fn slab_at_hand(&self) -> bool {
        self.empties.count() != 0 || (self.provider() != ProviderKind::Rpc && !self.pool.is_empty())
    }

    /// A slab for a claimed slot, in the order that lets a class grow to
    /// its demand: the pool's (pool mode) or the host's (RPC mode, or a pool
    /// with fallback once it is dry; not while the heap is exhausted: the
    /// host refused already), and only when they have none, an
    /// empty slab of another slot taken over. Taking over first would keep
    /// the heap's size flat under churn — a takeover moves a slab and
    /// empties the slot it left — while every class's emptied slabs stay
    /// with it (revived in place by its searches) until memory runs short
    /// or the host trims. A refusal is remembered (`refused`, against
    /// `generation`, read before asking) even when a takeover then serves
    /// the claim. Returns the slab with the number of bitfield words known
    /// to be zero.
    fn obtain_slab(&self, generation: u32) -> Option<(u64, u32)> {
        let provider = self.provider();
        let mut slab = 0;
        if provider != ProviderKind::Rpc {
            slab = self.pool_pop().unwrap_or(0);
        }
        // The host: in RPC mode, or once a pool with fallback is dry.
        if slab == 0 && provider != ProviderKind::Pool && !self.is_exhausted() {
            slab = self.system_allocate(SLAB_SIZE, SLAB_SIZE);
        }
        if slab != 0 && self.granule_of(slab).is_none() {
            // Outside the region the heap cannot vouch for it on free.
            self.system_deallocate(slab, SLAB_SIZE);
        } else if slab != 0 {
            self.counters.slabs_from_provider.add(1);
            return Some((slab, 0));
        }
        // The provider refused: remember it until memory comes back (stale
        // at once if it came back while we asked).
        self.refused(generation);
        self.take_over_empty(true)
            .map(|(_, slab, clean)| (slab, clean))
    }

    /// A slot marked in `empties` whose slab is of `class` and empty now,
    /// among the marks of the `OWN_CLASS_WORDS` words up to `frontier`'s
    /// (the empty slot the claim met, after the class's newest slabs),
    /// `OWN_CLASS_CHECKS` of them at most: one load of the count, one a
    /// word and one a mark asked about (the slot's word: count and class),
    /// so at most 11 round trips. Read without a reference, so a hint: the
    /// search that follows locks the slab and checks again. `None` when
    /// none of them is. An emptied slab beyond those words stays marked:
    /// a takeover finds it once the provider refuses, and `trim` gives it
    /// back. (Starting at the class's start slot instead, a hash of the
    /// class, cost `malloc_free_once` a register on sm_80; ptxas,
    /// 2026-12-05.)
    ///
    /// Empty ones only. With any room (the slabs a class put back to use
    /// keep their marks), a claim was given up for a slab whose room the
    /// next free had made and the next malloc took: in the contention
    /// test's rising demand at 8 KiB the class grew by 0 or 1 slabs to 0.6
    /// to 0.75 of its demand, its warps walking its slabs for that room
    /// (2026-12-05, BENCHMARKS.md "Growth when demand rises"). An empty
    /// slab of the class that this finds is still taken before a new one:
    /// revived in place, no host (`classes_keep_their_emptied_slabs_while_
    /// the_host_has_memory`) — but a claim after a crowded creation (CLAIM)
    /// does not look, nor does a lock that met a slot emptied since its look
    /// (`Lock::Claimed`, rare).
    fn own_empty(&self, class: usize, frontier: u32) -> Option<u32> {
        self.empties.find(
            self.slot_count(),
            frontier.saturating_sub(32 * (OWN_CLASS_WORDS - 1)),
            OWN_CLASS_WORDS,
            OWN_CLASS_CHECKS,
            |slot| {
                let seen = self.slot(slot).look();
                seen.class() == Some(class as u32) && seen.count() == 0
            },
        )
    }

    /// Takes over an empty slab that `empties` names: a few marks are tried
    /// (a mark is stale when the slab's class took it again), each costing
    /// a load and two atomics. Returns the slot it was in, the slab, and the
    /// bitfield words known to be zero. With `vacate`, the slot is emptied (the slab goes
    /// to a slot the caller claimed); without, the caller keeps the slot,
    /// "being created", and must publish in it.
    pub(super) fn take_over_empty(&self, vacate: bool) -> Option<(u32, u64, u32)> {
        let taken = self.take_empty_slab(vacate);
        if taken.is_some() {
            self.counters.slabs_reclaimed.add(1);
        }
        taken
    }

    /// [`DeviceHeap::take_over_empty`] without counting it as a takeover:
    /// for a slab that goes back to the host (`give_back_empties`, counted
    /// there as given back).
    pub(super) fn take_empty_slab(&self, vacate: bool) -> Option<(u32, u64, u32)> {
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
            // count is dead. The granule table still names its old slot
            // until our publication names the new one: a stale free finds
            // that slot empty, being created or holding another slab, and
            // counts a double free — unless the slab is taken over in
            // place (`take_over`: the slot publishes it again, maybe for
            // another class), where a stale free of a block handed out
            // again is the reuse no allocator without a tag per allocation
            // can tell (`api`'s table).
            if vacate {
                guard.vacate();
            }
            // SAFETY: a published slab is mapped, with its header; a zero
            // count means every bit is clear (`count ≥ set bits`).
            let words = unsafe { Slab(slab).header() }.words;
            return Some((from, slab, words));
        }
        None
    }

    /// Gives back `n` references to slot `index` (one lane); returns the
    /// slot as the release left it (the count after, the slab's class). A
    /// release to zero marks the slot's slab empty; it stays published.
    pub(super) fn release_slot(&self, index: u32, n: u32) -> Seen {
        let after = self.slot(index).release(n);
        if after.count() == 0 {
            self.empties.mark(index);
        }
        after
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::HINT_BLOCKS;
    use super::*;

    /// A hint word as `DeviceHeap::hint` returns it for the stream's own
    /// hint: the slot (7), and the block field `field` above it.
    fn own(field: u32) -> u32 {
        (field << HINT_BLOCK_SHIFT) | 7
    }

    #[test]
    fn a_scan_passes_the_slabs_the_lanes_counted_before_it_will_fill() {
        // 8 KiB: 255 blocks a slab. Counted within the creation's room, or
        // past it by less than a slab: the next slot, as before.
        let usable = 255;
        assert_eq!(crowded_past(0, usable), 0);
        assert_eq!(crowded_past(254, usable), 0);
        assert_eq!(crowded_past(2 * usable - 1, usable), 0);
        // A slab's worth beyond the creation's room: that slab's slot is
        // passed too; three: three.
        assert_eq!(crowded_past(2 * usable, usable), 1);
        assert_eq!(crowded_past(4 * usable + 7, usable), 3);
        // A count inflated by lanes that only steer passes no more than
        // `CROWD_PASS` slots.
        assert_eq!(crowded_past(1 << 23, usable), CROWD_PASS);
        assert_eq!(crowded_past(u32::MAX, 1), CROWD_PASS);
    }

    #[test]
    fn a_roomy_hint_is_locked_blind_and_no_sentinel_is_roomy() {
        // 8 KiB: 255 blocks a slab, a group of 32 looks first...
        let (usable, n) = (255, 32);
        assert!(!locks_blind(usable, n, own(0)));
        assert!(!locks_blind(usable, n, own(5)));
        // ...unless its stream's hint is roomy, with a block or without,
        // up to the most a free stores.
        assert!(locks_blind(usable, n, own(HINT_ROOMY)));
        assert!(locks_blind(usable, n, own(HINT_ROOMY | 5)));
        assert!(locks_blind(usable, n, own(HINT_ROOMY | HINT_BLOCKS)));
        // The sentinels are no roomy hints: another stream's hint, a
        // crowded creation met, a last try.
        assert!(!locks_blind(usable, n, NEWCOMER | 7));
        assert!(!locks_blind(usable, n, CROWDED));
        assert!(!locks_blind(usable, n, LAST_RESORT | 7));
        // Small groups, and classes of many blocks, lock blind anyway.
        assert!(locks_blind(usable, 7, own(5)));
        assert!(locks_blind(BLIND_LOCK_USABLE, n, own(5)));
        assert!(!locks_blind(usable, 8, own(5)));
    }

    #[test]
    fn a_search_away_from_home_wants_three_times_the_room_near_its_hint() {
        // 8 KiB (255 blocks): none, twice, three times over.
        let usable = 255;
        // Away from home in the 32 slots after the hint: three times over.
        assert_eq!(headroom(true, own(5), 1, usable, 32), 2);
        assert_eq!(headroom(true, own(5), NEAR_SLOTS, usable, 32), 2);
        // At the hint's slot and beyond the near slots: twice over.
        assert_eq!(headroom(true, own(5), 0, usable, 32), 1);
        assert_eq!(headroom(true, own(5), NEAR_SLOTS + 1, usable, 32), 1);
        // Classes of fewer blocks a slab (12 KiB: 170, 16 KiB: 127), and a
        // group of fewer than a warp's lanes: twice over near it too.
        assert_eq!(headroom(true, own(5), 1, 170, 32), 1);
        assert_eq!(headroom(true, own(5), 1, 127, 32), 1);
        assert_eq!(headroom(true, own(5), 1, usable, 31), 1);
        // No headroom for a stream with no slab of its own, after a
        // crowded creation, on a last try, or once the heap is exhausted.
        assert_eq!(headroom(true, NEWCOMER | 7, 1, usable, 32), 0);
        assert_eq!(headroom(true, CROWDED, 1, usable, 32), 0);
        assert_eq!(headroom(true, LAST_RESORT | 7, 1, usable, 32), 0);
        assert_eq!(headroom(false, own(5), 1, usable, 32), 0);
        // What each asks of a slab for a group of 32: 32, 64, 96 blocks.
        let wants = |h| crate::guard::wanted(32, usable, h);
        assert_eq!((wants(0), wants(1), wants(2)), (32, 64, 96));
    }

    #[test]
    fn a_group_at_home_is_served_whole_while_the_heap_may_grow() {
        // Home: the hint's slot of a hint of the stream's own, roomy or
        // not, naming a block or not.
        assert!(at_home(0, own(0)));
        assert!(at_home(0, own(5)));
        assert!(at_home(0, own(HINT_ROOMY | HINT_BLOCKS)));
        // Away: past the hint's slot, a hint not the stream's own, a
        // crowded creation met, a last try.
        assert!(!at_home(1, own(5)));
        assert!(!at_home(0, NEWCOMER | 7));
        assert!(!at_home(0, CROWDED));
        assert!(!at_home(0, LAST_RESORT | 7));
        // The heap may grow while the mark is unread (a blind lock) or
        // read with a tag to claim with; not once it is exhausted.
        let tag = creation_tag(3, 32);
        assert!(may_grow(u32::MAX, 0));
        assert!(may_grow(MARK_DUE, 0));
        assert!(may_grow(100, tag));
        assert!(!may_grow(100, 0));
        // What "whole" asks of a slab: a group of 32 at 8 KiB all its
        // lanes; one of more than half a slab (64 KiB: 31 blocks) any.
        assert_eq!(admission(32, 255), 32);
        assert_eq!(admission(32, 31), 1);
    }
}
