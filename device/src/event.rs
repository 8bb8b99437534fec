//! What the allocator counts about itself: a search's rounds, the locks
//! it took and what they found, its claims, the bitfield walk's extra
//! rounds, the slabs a free touched. Each [`Event`] is an index into the
//! counters: in the simulator the launch's (`LaunchStats::events`); on the
//! GPU, in a build with the `gpu-events` feature, the module global
//! `WARPALLOC_EVENTS` (a row per SM, which `warpalloc bench --events`
//! reads); in any other GPU build and under loom, [`record`] compiles to
//! nothing.
//!
//! These are the contention test's proxies (tests/contention.rs): what a
//! warp-malloc costs in searches and probes is deterministic in kind, if
//! not in number, and the simulator sees it where a GPU's profiler does
//! not — and the events build counts the same on the GPU, to check the
//! proxies against it.

/// An allocator event the simulator (and a `gpu-events` build) counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// A group's scan of the slot table (one round of a malloc's search).
    Scan = 0,
    /// A slot a scan locked (its guard's counter took the group's lanes).
    SlotLock = 1,
    /// A lock of a slab with no room for the group (given back at once).
    FullLock = 2,
    /// A lock of a slab with room for part of the group only (split
    /// there, or passed whole at its stream's own slab).
    PartialFit = 3,
    /// A lock that registered the group on a slot being created.
    Registration = 4,
    /// A scan that met a creation it counts on and waited for it, or gave
    /// up at one (and scans again).
    CreationWait = 5,
    /// A slot claimed for a new slab.
    Claim = 6,
    /// A group about to claim sent to an emptied slab of its class, or to
    /// room behind the hints, instead (`look_or_claim`).
    Redirect = 7,
    /// A round of the bitfield walk beyond a group's first: lanes whose
    /// word was taken probe again.
    ExtraProbe = 8,
    /// A slab that a free's lanes touched (one group per slab).
    FreeGroup = 9,
    /// A lane's malloc that took more than 4 scans (its search's rounds).
    LongSearch = 10,
    /// A scan that a slot being created ended (RETRY: the group scans
    /// again): a wait for a creation that gave up; a takeover's rebuild
    /// still untagged after `MAX_TRIES` polls; or a scan that met a
    /// crowded creation of its class and then the end of what it may scan
    /// (the table's end, or an exhausted heap's window) with no room (the
    /// issue's "scans ended by a creating slot"). A wait that then locks
    /// the new slab (`CreationWait` alone) ends nothing.
    CreationEnd = 11,
    /// A round of loads of bitfield words in a slab of few words
    /// (`Slab::roomy_start`: before the walk, or after a round that lost
    /// its word and found no room in it): a probe of the bitfield, one
    /// round trip, as a walk round is.
    Look = 12,
}

/// Events there are (≤ the simulator's counters).
pub const EVENTS: usize = 13;

#[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
const _: () = assert!(EVENTS <= warpalloc_sim::EVENTS);

// Every event indexes the counters.
const _: () = assert!(Event::Look as usize + 1 == EVENTS);

/// Rows of `WARPALLOC_EVENTS`: a warp counts in row `%smid %
/// EVENT_ROWS`, so that the warps of different SMs (132 on an H200) do not
/// meet on one word per event.
pub const EVENT_ROWS: usize = 256;
/// Counters a row of `WARPALLOC_EVENTS` holds: the events, padded to 128
/// bytes (a cache line), so that two SMs' rows share no line.
pub const EVENT_STRIDE: usize = 16;
const _: () = assert!(EVENTS <= EVENT_STRIDE && EVENT_STRIDE * 8 == 128);

/// A row of `WARPALLOC_EVENTS`, aligned to its 128 bytes: an array of
/// bare counters was aligned to 8 only (its PTX `.align 8`), so each row
/// straddled two cache lines and the SMs' rows shared them (a review,
/// 2026-12-08).
#[repr(C, align(128))]
pub struct EventRow(pub [crate::sync::AtomicU64; EVENT_STRIDE]);
const _: () = assert!(
    core::mem::size_of::<EventRow>() == EVENT_STRIDE * 8
        && core::mem::align_of::<EventRow>() == EVENT_STRIDE * 8
);
/// The module global of a `gpu-events` build: `EVENT_ROWS` rows of
/// `EVENT_STRIDE` counters (`u64`, row-major; the first `EVENTS` of a row
/// are the events, by [`Event`]), which the host sums (`warpalloc bench
/// --events`).
pub const EVENTS_SYMBOL: &str = "WARPALLOC_EVENTS";

/// On the GPU, in a build with the `gpu-events` feature: the allocator's
/// events since the module was loaded, a row per SM ([`EVENT_ROWS`]).
/// Each [`record`] is one relaxed reduction (`red.global.add.u64`) that no
/// path waits for — but it is memory traffic the allocator does not
/// otherwise make, which moves its timing and so may move what it counts
/// (a walk round lost to a warp that came a little later or sooner): a
/// build for counting, not for timing.
#[cfg(all(target_arch = "nvptx64", feature = "gpu-events"))]
#[unsafe(no_mangle)]
pub static WARPALLOC_EVENTS: [EventRow; EVENT_ROWS] =
    [const { EventRow([const { crate::sync::AtomicU64::new(0) }; EVENT_STRIDE]) }; EVENT_ROWS];

/// Counts `event` for the running launch: in the simulator; on the GPU
/// in a `gpu-events` build (`WARPALLOC_EVENTS`); else nowhere.
#[inline(always)]
pub fn record(event: Event) {
    #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
    warpalloc_sim::count_event(event as usize);
    #[cfg(all(target_arch = "nvptx64", feature = "gpu-events"))]
    WARPALLOC_EVENTS[crate::simt::sm_id() as usize % EVENT_ROWS].0[event as usize].add(1);
    #[cfg(any(all(target_arch = "nvptx64", not(feature = "gpu-events")), loom))]
    let _ = event;
}
