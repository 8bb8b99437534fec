//! The device heap: all allocator state in one value, and the malloc and
//! free front end over it.
//!
//! ```text
//!   DeviceHeap (repr(C); abi.rs has the layout the host checks)
//!   ├── config      slot count, provider, region                (host-written)
//!   ├── errors      double / invalid frees, OOM count; the first bad free's
//!   │               address, block, thread, launch and kernel name
//!   ├── counters    slabs from the provider, reclaimed, given back; large
//!   ├── mailbox     where the host's RPC ports are, and their lock bits
//!   ├── pool        slabs mapped before launch (pool mode), a lock-free stack
//!   ├── slots[]     32 768 guards (8 B: slab word, count) → slabs (64 GiB)
//!   ├── (hints)     the address of a table beside the heap, per size class
//!   │               and stream (warp slot % streams): the slot that
//!   │               served or took a free from that stream last, and the
//!   │               block it freed there
//!   ├── granules[]  per 2 MiB granule of the region (≤ 512 GiB): Unused | Slab(slot) |
//!   │               Large(granules) | Freed — what `free` may touch
//!   └── empties     slots whose slab went empty (a bitmap): where a claim
//!                   finds its class's emptied slabs, and what it takes
//!                   over once the provider refuses
//! ```
//!
//! The heap lives in device memory that the host's `Heap` allocated; each
//! module that allocates from it holds its address in the module global
//! `WARPALLOC_HEAP` (a link, `abi::HeapLink`). On the GPU kernels read the
//! link; in the simulator each launch binds the linked heap to its lanes
//! (`LaunchConfig::binding`). The host configures,
//! fills, inspects and drains it with this type's own methods, on a copy it
//! reads and writes back through its device interface.
//!
//! # malloc, for the lanes of `lane_mask`
//! 1. `place`: a size class, a large block, or nothing (null).
//! 2. `allocate_small` (search.rs): the lanes of one class form a group
//!    whose leader scans for a slab with room and reserves a block in it for
//!    each lane (or claims an empty slot, where the group creates a slab);
//! 3. then `Slab::allocate`: the group's random walk over the bitfield.
//!
//! # free
//! The granule table says whether the pointer's granule is a live slab or the
//! head of a large block; anything else is a double or invalid free, counted
//! and otherwise ignored. Lanes freeing into one slab take one reference for
//! the group (so the slab cannot die under them), clear their bits — a bit
//! already clear is a double free, counted, nothing changed — and give back
//! the group's references plus one per block freed. The release that reaches
//! zero leaves the slab published, empty, and marks its slot in `empties`:
//! its class's next malloc takes it as it is (the freeing stream's hint
//! points at it), a claim of its class is sent to it, and once the provider
//! refuses, a claim of a new slab (any class) takes it over; `trim` or a
//! refused large block gives it back. The free path never disposes of a
//! slab, so it never talks to the host.
//!
//! Invariants (`check` verifies the first four when the heap is quiescent):
//! * a published slot's slab has `header.slot == index`, its granule entry is
//!   `Slab(index)`, and `refs ≥ set bits`; no bit at or above `usable` is set;
//! * a published slab with a zero count has every bit clear (it is empty)
//!   and its slot is marked in `empties` (else no other class could take it
//!   over);
//! * `empties.count` = the marked slots;
//! * no slot is left being created;
//! * every granule the provider handed out is exactly one of: a published
//!   slab, a pooled slab, a slab being created or taken over, a live large
//!   block (the host's region accounting, not `check`, watches this one).

mod check;
mod search;

pub use check::{Census, ClassCensus, SlabMemory};

use crate::abi::{
    ClassCounters, ClassCounts, ConfigValues, Counters, DeviceConfig, ErrorRecord, Errors, Layout,
    ProviderKind, Traffic,
};
use crate::empty::EmptySlots;
use crate::granule::{Granule, GranuleTable};
use crate::guard::{Guard, Lock};
use crate::pool::SlabPool;
use crate::rpc::Mailbox;
use crate::simt::{self, Scope};
use crate::size_class::{
    CLASS_COUNT, Geometry, Placement, SLAB_SHIFT, SLAB_SIZE, WORD_BITS, geometry, place,
};
use crate::slab::Slab;
use crate::sync::{AtomicU32, Ordering, SharedArray, fence};

/// The most search streams per size class. A class keeps one hint per
/// stream, and a warp's stream is its warp slot (`%smid`, `%warpid` on the
/// GPU) modulo the heap's stream count, so that warps that run at once
/// start their searches at different slabs of a class once it has several,
/// rather than every warp locking one slab's guard (Gallatin spreads warps
/// over a size's blocks by SM). Stream 0's hint is also the class's:
/// creations move it (and so do stream 0's own mallocs and frees), and a
/// stream with no hint of its own starts at its slot.
pub const MAX_STREAMS: usize = 8192;
const _: () = assert!(MAX_STREAMS.is_power_of_two() && MAX_STREAMS <= 1 << 16);
/// Resident warps per stream, by default: a hint per warp. Warps that
/// share a hint arrive at its slab together and race for its room: in the
/// contention test's warm launches (2026-12-05, 512 resident warps), 8 warps
/// a stream took 0.98 to 1.33 locks of a full slab per warp-malloc at 8 KiB
/// and 4.8 to 5.9 guard RMWs per warp-pair, one warp a stream 0.13 to 0.47
/// and 3.9 to 5.4; at 1 KiB, 3.5 against 3.0 (BENCHMARKS.md). The price is
/// the hints' memory: 46 classes × 8 192 × 4 B, 1.5 MiB beside the device
/// heap on an H200 (a table the host sizes to the streams: 5.9 KiB for the
/// emulated device's 32), which the host does not copy when it reads the
/// heap.
pub const WARPS_PER_STREAM: u64 = 1;

/// The search streams for a device of `resident_warps`: one per
/// [`WARPS_PER_STREAM`], rounded up to a power of two, 1..=[`MAX_STREAMS`]
/// (an H200's 8 448 resident warps: 8 192; the emulated device's 32: 32).
pub const fn stream_count_for(resident_warps: u64) -> u32 {
    let want = resident_warps.div_ceil(WARPS_PER_STREAM);
    let want = if want == 0 { 1 } else { want };
    let pow = want.next_power_of_two();
    if pow > MAX_STREAMS as u64 {
        MAX_STREAMS as u32
    } else {
        pow as u32
    }
}
/// Bytes of the hint table for `streams` streams (a `u32` per class and
/// stream), which the host allocates, zeroed, beside the heap.
pub const fn hint_table_bytes(streams: u32) -> u64 {
    (CLASS_COUNT as u64) * (streams as u64) * 4
}

const _: () = assert!(stream_count_for(0) == 1 && stream_count_for(8448) == 8192);
const _: () = assert!(stream_count_for(512) == 512 && stream_count_for(32) == 32);

/// Slots in the table: 32 768 × 2 MiB = 64 GiB of slabs.
pub const MAX_SLOTS: usize = 32_768;

/// A class's hint for a stream, one 32-bit word: where the stream's next
/// search of the class starts. Below `HINT_BLOCK_SHIFT`, the slot where the
/// stream last found room or freed (or lost a claim, or its class's first
/// slot: heap/search.rs), plus one (0: no hint); above it, the
/// block it last freed there, plus one (0: none; a block the field cannot
/// hold, in the classes of the smallest blocks, is none), and whether that
/// free left the slab room for a warp's group
/// (`HINT_ROOMY`, `ROOMY_BLOCKS`; a malloc at the hint that leaves less
/// clears it): a malloc of the stream that finds room at the hint's slot
/// starts its walk there if its group has half a word of lanes or more
/// (`Slab::allocate`), and a roomy hint's slot is locked without a look
/// first (`locks_blind`, heap/search.rs). A free sets the field; a scan
/// that finds room elsewhere clears it (so does one at the hint's slot
/// whose word carries a sentinel below). All ones in the field (no free
/// stores it: `HINT_BLOCKS`) says the stream's next scan is its last try
/// before null and takes any room (`LAST_RESORT`, heap/search.rs);
/// `0xfffe`, which no hint holds, is what a scan that starts from another
/// stream's hint carries in its copy (`NEWCOMER`).
///
/// ```text
///   31  30 ........... 16  15 ................... 0
///  ┌───┬──────────────────┬────────────────────────┐
///  │ r │ block + 1        │ slot + 1 (0: no hint)  │
///  │   │ (0: none)        │                        │
///  └───┴──────────────────┴────────────────────────┘
///   r: roomy (`HINT_ROOMY`). 0xffff in bits 16..32: last try
///   (`LAST_RESORT`); 0xfffe: not the stream's own (`NEWCOMER`, only
///   in a scan's copy)
/// ```
pub(crate) const HINT_BLOCK_SHIFT: u32 = 16;
/// The slot's field of a hint.
pub(crate) const HINT_SLOT_MASK: u32 = (1 << HINT_BLOCK_SHIFT) - 1;
/// The block's field of a hint, shifted down, with its roomy bit; a scan
/// hands the block (the bits below `HINT_ROOMY`) to the walk in the low
/// bits of the slab's address (aligned to `SLAB_SIZE`).
pub(crate) const HINT_BLOCK_MASK: u32 = (1 << (32 - HINT_BLOCK_SHIFT)) - 1;
/// The block field's top bit (shifted down): the free that set the hint
/// left its slab room for a warp's group (`ROOMY_BLOCKS`).
pub(crate) const HINT_ROOMY: u32 = 1 << (31 - HINT_BLOCK_SHIFT);
/// Free blocks a release must leave for the freeing stream's hint to be
/// roomy: a warp's group, whatever the freeing group's size — a lane's
/// free must not send its warp's next group of 32 blind into a slab with
/// room for a few. A malloc at the hint that leaves less clears the bit.
///
/// Once over, not four times (128, until 2026-12-06, night). A whole
/// warp's free leaves its own group's room, so its hint is roomy whatever
/// else the slab holds (unless locks in flight overfill the count), and
/// its stream's next malloc locks the slab without a look (a pair of 7
/// round trips, not 8: the test
/// `a_warp_back_at_a_half_full_slab_locks_it_without_a_look`); a free of
/// fewer lanes still asks for the rest of a group's room. Four times over
/// had kept the walk's collisions down while a stream's slab filled
/// between its free and its next malloc with warps displaced from
/// theirs; since a group is served whole or not at all at home
/// (`at_home`) and a group away from home wants room three times over
/// near its hint (`headroom`), a blind lock at home seldom meets a full
/// slab. In the contention test's launches at 8 KiB (2026-12-06, 22:34–
/// 22:51 UTC, the build machine; release runs, four times over against
/// once over; BENCHMARKS.md, "A roomy hint at room for one group"):
/// * warm, three runs of the whole file each: round trips per pair (the
///   mean over the warps) 8.5 against 7.8 to 8.0; full locks per
///   group-malloc 0.003 to 0.005 against 0.012 to 0.022; guard RMWs per
///   group-pair 3.02 to 3.03 against 3.07 to 3.10; extra walk rounds
///   0.049 to 0.062 against 0.040 to 0.046;
/// * timed warm, eight runs each: 5 102 to 5 232 cycles per warp-pair
///   against 4 897 to 5 040, 8.2 to 8.5 round trips against 7.6 to 7.9,
///   guard RMWs 3.07 to 3.10 against 3.08 to 3.14, extra walk rounds
///   0.044 to 0.071 against 0.042 to 0.073;
/// * the path 7 in all.
///
/// Twice and three times over fell between (8.0 to 8.4 round trips warm,
/// three runs each of the 8 KiB case alone), and any room at all (1) was
/// no better than once over.
pub(crate) const ROOMY_BLOCKS: u32 = simt::WARP_SIZE;
/// Blocks a hint names: a free of block `i ≥ HINT_BLOCKS` stores none, so
/// that no field a free stores, roomy or not, is one of the two sentinels
/// (`0xfffe` and `0xffff`: the field's highest values).
pub(crate) const HINT_BLOCKS: u32 = HINT_ROOMY - 3;
const _: () = assert!(MAX_SLOTS <= HINT_SLOT_MASK as usize);
const _: () = assert!((HINT_BLOCK_MASK as u64) < SLAB_SIZE);
const _: () = assert!(HINT_ROOMY == (HINT_BLOCK_MASK >> 1) + 1);
// The most a free stores: block `HINT_BLOCKS - 1`, plus one, roomy.
const _: () = assert!((HINT_BLOCKS | HINT_ROOMY) == HINT_BLOCK_MASK - 2);
// 64 B blocks and larger: a slab's blocks fit the field.
const _: () = assert!(geometry(3).block == 64 && geometry(3).usable <= HINT_BLOCKS);

/// Emptied slabs a refused large block gives back to the host at most
/// before it asks again.
const GIVE_BACK: u32 = 64;

/// The largest region a heap can manage: 512 GiB, so that the host's
/// default reservation — twice the device's memory — is never cut below
/// it on any GPU of up to 256 GiB (an H200 has 141 GB: a 64 GiB region ran
/// out of address space while the device had memory). Its price is the
/// granule table's and the pool's links, 4 bytes each per granule (2 MiB
/// of device memory in all); address space itself costs nothing until
/// mapped.
pub const MAX_REGION: u64 = 512 << 30;
/// Granule-table entries: one per 2 MiB of the largest region.
pub const REGION_GRANULES: usize = (MAX_REGION >> SLAB_SHIFT) as usize;

// Slabs are at most a slot each; the rest of a region is large blocks.
const _: () = assert!(REGION_GRANULES >= MAX_SLOTS);
const _: () = assert!(MAX_SLOTS.is_power_of_two() && MAX_SLOTS <= 1 << 30);
const _: () = assert!(REGION_GRANULES.is_power_of_two());

/// All allocator state of one heap. `repr(C)`, every field atomic (but the
/// error record's kernel name, plain bytes with one writer:
/// `abi::NameBytes`), all-zero
/// is [`DeviceHeap::new`]: zeroed device memory is an unbound heap, and a
/// host can copy the bytes.
#[repr(C)]
pub struct DeviceHeap {
    config: DeviceConfig,
    errors: ErrorRecord,
    counters: Counters,
    classes: ClassCounters,
    mailbox: Mailbox,
    pool: SlabPool<REGION_GRANULES>,
    slots: SharedArray<Guard, MAX_SLOTS>,
    granules: GranuleTable<REGION_GRANULES>,
    empties: EmptySlots<{ MAX_SLOTS / 32 }>,
    /// Set when the provider refused a slab, to the memory generation the
    /// request was made in, plus one: the heap is exhausted while that is
    /// still `memory_generation + 1` — until memory comes back (a large
    /// block freed, the host's `trim`; an emptied slab is seen through
    /// `empties` instead), or until the host clears it (0) between
    /// launches because its refusal may have been temporary
    /// (`Layout::refusal`). A refusal that
    /// raced with memory coming back is stale at once. While exhausted,
    /// a search claims no empty slot and scans a bounded window
    /// (`search.rs`), so an out-of-memory malloc costs about what a
    /// successful one does.
    exhausted: AtomicU32,
    /// Bumped by 2 whenever memory comes back: even, so that a mark
    /// (`exhausted`: a generation plus one) is odd and never 0, "no mark".
    /// Bumped by 1, a refusal in generation `u32::MAX` marked 0 and the
    /// heap never counted as exhausted in it (a review, 2026-12-07).
    ///
    /// Invariant: `memory_generation % 2 == 0`; `exhausted == 0 ||
    /// exhausted % 2 == 1`.
    memory_generation: AtomicU32,
}

/// The layout of [`DeviceHeap`] as this build compiles it.
pub const LAYOUT: Layout = Layout {
    size: core::mem::size_of::<DeviceHeap>() as u64,
    align: core::mem::align_of::<DeviceHeap>() as u64,
    config: core::mem::offset_of!(DeviceHeap, config) as u64,
    errors: core::mem::offset_of!(DeviceHeap, errors) as u64,
    counters: core::mem::offset_of!(DeviceHeap, counters) as u64,
    mailbox: core::mem::offset_of!(DeviceHeap, mailbox) as u64,
    pool: core::mem::offset_of!(DeviceHeap, pool) as u64,
    slots: core::mem::offset_of!(DeviceHeap, slots) as u64,
    hints: (core::mem::offset_of!(DeviceHeap, config) + core::mem::offset_of!(DeviceConfig, hints))
        as u64,
    granules: core::mem::offset_of!(DeviceHeap, granules) as u64,
    empties: core::mem::offset_of!(DeviceHeap, empties) as u64,
    refusal: core::mem::offset_of!(DeviceHeap, exhausted) as u64,
    port_size: core::mem::size_of::<crate::rpc::wire::Port>() as u64,
    slab_size: SLAB_SIZE,
};

const _: () = assert!(core::mem::size_of::<Guard>() == 8);
// The host clears the refusal record with a 4-byte write of 0.
const _: () = assert!(core::mem::size_of::<AtomicU32>() == 4);
const _: () = assert!(core::mem::size_of::<Counters>() == 7 * 8);
// What the host allocates, copies to read (`stats`, `check`) and writes
// back (`trim`): about 2.25 MiB (2 364 344 bytes on 2026-12-08), most of it
// the granule table and the pool's links of a 512 GiB region (1 MiB each)
// and the slot table (256 KiB); the hint table lies beside it.
const _: () = assert!(core::mem::size_of::<DeviceHeap>() < (3 << 20));

/// Where a pointer given to `free` points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Null,
    Slab { granule: u32, slot: u32 },
    Large { granule: u32, granules: u32 },
    DoubleFree,
    Invalid,
}

impl DeviceHeap {
    // Panic-free accessors for the hot paths: indices are in range by
    // construction (slot indices are reduced modulo the slot count, granule
    // indices come from a region of at most MAX_REGION, class indices from
    // `place`), and masking or clamping them keeps the PTX free of bounds
    // checks and their formatting machinery.

    /// This heap, through [`simt::opaque_u64`]: the slow paths' loops
    /// take it at each round, so that addresses within the heap are
    /// computed where they are used rather than kept live across the loop.
    #[inline(always)]
    fn opaque(&self) -> &Self {
        let at = (self as *const Self).map_addr(|a| simt::opaque_u64(a as u64) as usize);
        // SAFETY: the same address, with the same provenance.
        unsafe { &*at }
    }

    #[inline(always)]
    fn slot(&self, index: u32) -> &Guard {
        self.slots.get(index as usize)
    }

    /// The hint of `class`'s stream `stream` (a warp slot, taken modulo the
    /// streams, a power of two; 0: the class's own), in the hint table beside the heap. Only a bound
    /// heap's allocations call this, and a bound heap has a table
    /// (`ConfigValues::clamped`).
    #[inline(always)]
    fn class_hint(&self, class: usize, stream: usize) -> &AtomicU32 {
        // In 32 bits (a register each, not a pair): below 46 × 8 192.
        let streams = self.streams();
        let index = (class as u32 * streams + (stream as u32 & (streams - 1)))
            .min(CLASS_COUNT as u32 * streams - 1) as usize;
        let table = self.config.hints.load_config();
        // SAFETY: the host allocated `hint_table_bytes(streams)` bytes of
        // zeroed, 4-byte aligned device memory at `table` and keeps them
        // while the heap is bound (only a bound heap's allocations get
        // here); `index` is below `CLASS_COUNT × streams`. Hints are only
        // ever accessed atomically.
        unsafe { AtomicU32::from_ptr((table as usize as *mut u32).wrapping_add(index)) }
    }

    /// An unbound heap: every allocation returns null until the host binds a
    /// region and a provider. All zeroes, so it can be a zero-initialised GPU
    /// global.
    pub const fn new() -> Self {
        DeviceHeap {
            config: DeviceConfig::new(),
            errors: ErrorRecord::new(),
            counters: Counters::new(),
            classes: ClassCounters::new(),
            mailbox: Mailbox::new(),
            pool: SlabPool::new(),
            slots: SharedArray::new([const { Guard::new() }; MAX_SLOTS]),
            granules: GranuleTable::new(),
            empties: EmptySlots::new(),
            exhausted: AtomicU32::new(0),
            memory_generation: AtomicU32::new(0),
        }
    }

    /// Whether the provider refused a slab and no memory came back since.
    #[inline(always)]
    fn is_exhausted(&self) -> bool {
        let mark = self.exhausted.load(Ordering::Relaxed);
        mark != 0
            && mark
                == self
                    .memory_generation
                    .load(Ordering::Relaxed)
                    .wrapping_add(1)
    }

    /// The memory generation now (read before asking the provider).
    #[inline(always)]
    fn memory_generation(&self) -> u32 {
        // ORDERING: acquire (gpu): pairs with the release fence in
        // `memory_returned`: the free that returned the memory (its
        // request's flip) happens-before this lane's request that follows,
        // so the host, which acquires that request, sees the free pending
        // and serves it before it refuses (`server::serve_frees`).
        self.memory_generation.load(Ordering::Acquire)
    }

    /// The provider refused a request made in `generation`: the mark
    /// moves to it unless it holds a newer one. A refusal answered late
    /// (its request made before memory came back) must not erase the mark
    /// of a refusal made after: the heap would forget it is exhausted, and
    /// every search would claim slots and ask the host again until the next
    /// refusal (a review, 2026-12-07). Newer is by wrapping distance, as the
    /// generation wraps after 2³² returns; 0 (no mark) is older than any.
    /// Out of line: a refusal is rare, and its loop's registers stay off
    /// the search's.
    #[inline(never)]
    fn refused(&self, generation: u32) {
        let mark = generation.wrapping_add(1);
        let mut seen = self.exhausted.load(Ordering::Relaxed);
        while seen == 0 || (mark.wrapping_sub(seen) as i32) > 0 {
            match self.exhausted.compare_exchange(seen, mark) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
    }

    /// Memory came back (a large block was freed; the host trimmed): new
    /// slabs may be had again.
    #[inline(always)]
    fn memory_returned(&self) {
        // ORDERING: release (gpu): the frees this lane sent (their flips)
        // happen-before a request of a lane that reads the new generation;
        // pairs with the acquire load in `memory_generation`.
        fence(Ordering::Release, Scope::Gpu);
        self.memory_generation.fetch_add(2);
    }

    // ----------------------------------------------------------------------
    // Configuration (host side, when no kernel runs)
    // ----------------------------------------------------------------------

    #[inline(always)]
    fn slot_count(&self) -> u32 {
        self.config.slot_count.load_config()
    }

    /// Search streams per class (a power of two; 1 for an unbound heap).
    #[inline(always)]
    fn streams(&self) -> u32 {
        self.config.streams.load_config().max(1)
    }

    #[inline(always)]
    fn provider(&self) -> ProviderKind {
        ProviderKind::from_raw(self.config.provider.load_config())
    }

    /// Writes a whole configuration (clamped, see
    /// [`ConfigValues::clamped`]) and binds the mailbox it names. Host side,
    /// when no kernel runs.
    pub fn configure(&self, values: ConfigValues) {
        let v = values.clamped();
        let c = &self.config;
        c.provider.store(v.provider, Ordering::Relaxed);
        c.region_base.store(v.region_base, Ordering::Relaxed);
        c.region_len.store(v.region_len, Ordering::Relaxed);
        c.slot_count.store(v.slot_count, Ordering::Relaxed);
        c.streams.store(v.streams, Ordering::Relaxed);
        c.hints.store(v.hints, Ordering::Relaxed);
        self.mailbox.bind(v.mailbox, v.port_count);
    }

    /// The configuration now.
    pub fn config_values(&self) -> ConfigValues {
        let c = &self.config;
        let (mailbox, port_count) = self.mailbox.ports();
        ConfigValues {
            slot_count: c.slot_count.load(Ordering::Relaxed),
            provider: c.provider.load(Ordering::Relaxed),
            port_count,
            region_base: c.region_base.load(Ordering::Relaxed),
            region_len: c.region_len.load(Ordering::Relaxed),
            mailbox,
            streams: c.streams.load(Ordering::Relaxed),
            hints: c.hints.load(Ordering::Relaxed),
        }
    }

    /// The region this heap manages: (base, length).
    pub fn region(&self) -> (u64, u64) {
        (
            self.config.region_base.load_config(),
            self.config.region_len.load_config(),
        )
    }

    /// [`DeviceHeap::region`] without simulator switch points (host builds:
    /// the registry reads it under a lock).
    #[cfg(not(target_arch = "nvptx64"))]
    pub(crate) fn region_unhooked(&self) -> (u64, u64) {
        (
            self.config.region_base.load_unhooked(),
            self.config.region_len.load_unhooked(),
        )
    }

    /// The mailbox binding (the host reads its lock bits between launches).
    pub fn mailbox(&self) -> &Mailbox {
        &self.mailbox
    }

    /// The granule index of `addr`, if it lies in the region.
    #[inline(always)]
    fn granule_of(&self, addr: u64) -> Option<u32> {
        let (base, len) = self.region();
        let offset = addr.checked_sub(base)?;
        (offset < len).then_some((offset >> SLAB_SHIFT) as u32)
    }

    /// The address of granule `index`.
    #[inline(always)]
    fn granule_addr(&self, index: u32) -> u64 {
        self.config.region_base.load_config() + (u64::from(index) << SLAB_SHIFT)
    }

    // ----------------------------------------------------------------------
    // System memory: the host over RPC, or the pool
    // ----------------------------------------------------------------------

    /// System memory: `bytes` aligned to `align`, or 0. One lane calls it.
    fn system_allocate(&self, bytes: u64, align: u64) -> u64 {
        match (self.provider(), self.mailbox.client()) {
            (ProviderKind::Rpc | ProviderKind::Pool | ProviderKind::PoolThenRpc, Some(client)) => {
                client.alloc_alone(bytes, align).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// Gives system memory back (one lane, not waiting for the host): a
    /// one-lane send with no collectives, which on sm_7x cost the caller
    /// registers (ptxas's divergent-warp fallbacks) and elsewhere gain
    /// nothing for a request that is one lane's anyway.
    fn system_deallocate(&self, addr: u64, bytes: u64) {
        if let (ProviderKind::Rpc | ProviderKind::Pool | ProviderKind::PoolThenRpc, Some(client)) =
            (self.provider(), self.mailbox.client())
        {
            client.free_alone(addr, bytes);
        }
    }

    /// Puts the mapped, zeroed slab at `slab` in the pool (host side, pool
    /// mode, before launches). `false` if it is not a slab of the region.
    pub fn pool_push(&self, slab: u64) -> bool {
        match self.granule_of(slab) {
            Some(granule) if slab.is_multiple_of(SLAB_SIZE) => {
                self.pool.push(granule);
                true
            }
            _ => false,
        }
    }

    /// A slab from the pool, if any.
    fn pool_pop(&self) -> Option<u64> {
        self.pool.pop().map(|g| self.granule_addr(g))
    }

    // ----------------------------------------------------------------------
    // malloc
    // ----------------------------------------------------------------------

    /// Allocates `bytes` aligned to `align` for each lane of `lane_mask` (all
    /// of which call this together). Null for a zero or impossible size, a
    /// non-power-of-two alignment, or no memory.
    #[inline(always)]
    pub fn allocate(&self, lane_mask: u32, bytes: u64, align: u64) -> *mut u8 {
        self.allocate_as::<false>(lane_mask, bytes, align)
    }

    /// [`DeviceHeap::allocate`] for a shrink that keeps its block when this
    /// returns null (`realloc`'s, C's and `WarpAlloc`'s): a large block is
    /// asked of the provider without giving the classes' emptied slabs back
    /// first (`give_back_empties`). A refusal costs such a shrink nothing,
    /// and a flush of up to `GIVE_BACK` kept slabs to shrink a block that
    /// then stayed put cost the classes their slabs (a review,
    /// 2026-12-07). A null is counted as `allocate` counts it
    /// (`forgive_null` takes it back).
    #[inline(always)]
    pub(crate) fn allocate_to_shrink(&self, lane_mask: u32, bytes: u64, align: u64) -> *mut u8 {
        self.allocate_as::<true>(lane_mask, bytes, align)
    }

    /// `allocate`, and with `SHRINK` `allocate_to_shrink`.
    #[inline(always)]
    fn allocate_as<const SHRINK: bool>(&self, lane_mask: u32, bytes: u64, align: u64) -> *mut u8 {
        let bound = self.slot_count() != 0;
        let placement = if bound {
            place(bytes, align)
        } else {
            Placement::Invalid
        };
        let small = matches!(placement, Placement::Slab { .. });
        let slab_lanes = simt::ballot(lane_mask, small);
        let addr = match placement {
            Placement::Slab { class } => {
                let block = self.allocate_small(slab_lanes, class);
                if block == 0 {
                    0
                } else {
                    // `align` is a power of two (`place` checked).
                    (block + align - 1) & !(align - 1)
                }
            }
            Placement::Large { bytes, align } if SHRINK => {
                self.allocate_large_keeping(bytes, align)
            }
            Placement::Large { bytes, align } => self.allocate_large(bytes, align),
            Placement::Invalid => return core::ptr::null_mut(),
        };
        if addr == 0 {
            self.errors.out_of_memory.add(1);
            return core::ptr::null_mut();
        }
        core::ptr::with_exposed_provenance_mut(addr as usize)
    }

    /// A null of `allocate(_, bytes, align)` that its caller does not hand
    /// out: `realloc`'s shrink that found no memory to move to keeps its
    /// block in place, and no kernel saw the null, so the counts of nulls
    /// (`out_of_memory`, the class's) that the snapshots and stats report
    /// take it back. (The heap stays marked out of memory: it is.)
    pub(crate) fn forgive_null(&self, bytes: u64, align: u64) {
        self.errors.out_of_memory.fetch_sub(1);
        if let Placement::Slab { class } = place(bytes, align) {
            self.classes.forgive(class);
        }
    }

    /// A large block straight from the provider (one lane).
    #[cold]
    #[inline(never)]
    fn allocate_large(&self, bytes: u64, align: u64) -> u64 {
        self.large_block(bytes, align, true)
    }

    /// [`DeviceHeap::allocate_large`] that gives no emptied slab back.
    #[cold]
    #[inline(never)]
    fn allocate_large_keeping(&self, bytes: u64, align: u64) -> u64 {
        self.large_block(bytes, align, false)
    }

    /// A large block from the provider (one lane); when it refuses and
    /// `give_back`, the classes' emptied slabs go back to it first.
    #[inline(always)]
    fn large_block(&self, bytes: u64, align: u64, give_back: bool) -> u64 {
        let mut addr = self.system_allocate(bytes, align);
        if addr == 0 && give_back && self.give_back_empties(bytes, align) != 0 {
            // Memory pressure: the classes' emptied slabs went back to the
            // host, which may now have the run it lacked.
            addr = self.system_allocate(bytes, align);
        }
        if addr == 0 {
            return 0;
        }
        let Some(granule) = self.granule_of(addr) else {
            // Outside the region the heap cannot vouch for it on free.
            self.system_deallocate(addr, bytes);
            return 0;
        };
        self.granules.set(
            granule,
            Granule::Large {
                granules: (bytes >> SLAB_SHIFT) as u32,
            },
        );
        self.counters.large_allocations.add(1);
        self.classes.large(bytes);
        addr
    }

    /// A slab taken over to go back to the provider: the granule table
    /// forgets it (a stale free of it is a double free) and it is counted
    /// as given back.
    fn forget_slab(&self, slab: u64) {
        if let Some(granule) = self.granule_of(slab) {
            self.granules.set(granule, Granule::Freed);
        }
        self.counters.slabs_to_provider.add(1);
    }

    /// Gives emptied slabs back to the host (one lane; a large block of
    /// `bytes` was refused): classes keep their emptied slabs while memory
    /// lasts, and this is where they stop keeping them. At most `GIVE_BACK`
    /// slabs, as `trim` would: the granule table forgets each, its slot is
    /// emptied. Returns how many went back: none for a block that no
    /// place of the region holds at its alignment, for which no slab given
    /// back makes room (`malloc(1 << 50)` once flushed the classes' kept
    /// slabs, and so did `aligned_alloc(1 << 40, 16)`, whose 2 MiB fit
    /// but not at a 1 TiB boundary; it still asked the host, which records
    /// the refusal and its advice).
    #[cold]
    fn give_back_empties(&self, bytes: u64, align: u64) -> u32 {
        // With no mailbox nothing reaches the provider: the slabs taken
        // would be lost, not given back (a review, 2026-12-07).
        if self.mailbox.client().is_none() {
            return 0;
        }
        let (base, len) = self.region();
        // The region's first place at `align` (a power of two), and whether
        // the block ends inside the region from there.
        let first = base.checked_next_multiple_of(align);
        let fits = first
            .and_then(|at| at.checked_add(bytes))
            .is_some_and(|end| end <= base.saturating_add(len));
        if !fits {
            return 0;
        }
        let mut given = 0;
        while given < GIVE_BACK {
            let Some((_, slab, _)) = self.take_empty_slab(true) else {
                break;
            };
            self.forget_slab(slab);
            self.system_deallocate(slab, SLAB_SIZE);
            given += 1;
        }
        if given != 0 {
            self.counters.slabs_given_back.add(u64::from(given));
            self.memory_returned();
        }
        given
    }

    // ----------------------------------------------------------------------
    // free
    // ----------------------------------------------------------------------

    /// Where `addr` points, from the granule table.
    #[inline(always)]
    fn target(&self, addr: u64) -> Target {
        if addr == 0 {
            return Target::Null;
        }
        let Some(granule) = self.granule_of(addr) else {
            return Target::Invalid;
        };
        let aligned = addr.is_multiple_of(SLAB_SIZE);
        match self.granules.get(granule) {
            // Ours once, freed since: a stale pointer.
            Granule::Freed => Target::DoubleFree,
            Granule::Slab { slot } if !aligned => Target::Slab { granule, slot },
            Granule::Large { granules } if aligned => Target::Large { granule, granules },
            // Never ours, a slab's header, or inside a large block.
            _ => Target::Invalid,
        }
    }

    /// Frees `ptr` for each lane of `lane_mask` (all of which call this
    /// together). Null is a no-op; a double or invalid free changes nothing
    /// and is counted — a pointer into a block's middle (not its start nor
    /// its start aligned up, `Slab::freeable_index_of`), or into a large
    /// block past its first byte, is an invalid free.
    #[inline(never)]
    pub fn deallocate(&self, lane_mask: u32, ptr: *mut u8) {
        let addr = ptr.expose_provenance() as u64;
        let target = self.target(addr);
        let slab_lanes = simt::ballot(lane_mask, matches!(target, Target::Slab { .. }));
        match target {
            Target::Null => {}
            Target::Invalid => self.errors.record(&self.errors.invalid_frees, addr),
            Target::DoubleFree => self.errors.record(&self.errors.double_frees, addr),
            Target::Large { granule, granules } => self.free_large(granule, granules, addr),
            Target::Slab { granule, slot } => self.free_small(slab_lanes, granule, slot, addr),
        }
    }

    /// The calling lane's kernel, `name`, ends: the error record takes the
    /// name if the lane made the first bad free it keeps
    /// ([`crate::kernel_ended`]).
    #[inline(always)]
    pub fn kernel_ended(&self, name: &str) {
        self.errors.kernel_ended(name);
    }

    /// Counts `ptr` as an invalid free (a `realloc` of a pointer the heap
    /// never handed out).
    pub fn note_invalid_free(&self, ptr: *mut u8) {
        self.errors
            .record(&self.errors.invalid_frees, ptr.expose_provenance() as u64);
    }

    /// Gives a large block back (one lane). Inlined into `deallocate`,
    /// which is itself out of line: a call made from a called function
    /// stacks both functions' registers on the kernel's count.
    #[inline(always)]
    fn free_large(&self, granule: u32, granules: u32, addr: u64) {
        // Exactly one free of a block wins the entry; a racing or later one
        // sees Freed.
        let head = Granule::Large { granules };
        if !self.granules.replace(granule, head, Granule::Freed) {
            self.errors.record(&self.errors.double_frees, addr);
            return;
        }
        self.counters.large_frees.add(1);
        self.classes.large_freed(u64::from(granules) << SLAB_SHIFT);
        self.system_deallocate(addr, u64::from(granules) << SLAB_SHIFT);
        self.memory_returned();
    }

    /// Frees blocks of slabs for the lanes of `lane_mask`.
    fn free_small(&self, lane_mask: u32, granule: u32, slot: u32, addr: u64) {
        // One group per slab: its granule names it (32 bits to match).
        let uniform = simt::match_any_u32(lane_mask, granule);
        let base = Slab::containing(addr).0;
        let leader = simt::leader(uniform);
        let n = uniform.count_ones();
        let slot_ok = (slot as usize) < MAX_SLOTS;
        // The class of the slab the group holds, plus one; 0 for none.
        let mut held = 0u32;
        if simt::lane_id() == leader && slot_ok {
            crate::event::record(crate::event::Event::FreeGroup);
            match self.slot(slot).lock(n, 0) {
                Lock::Acquired { slab, class, .. }
                    if slab == base && (class as usize) < CLASS_COUNT =>
                {
                    held = class + 1
                }
                Lock::Acquired { .. } => {
                    // The slot now holds another slab: the pointer's slab is
                    // gone (or a counter with no class, which no publication
                    // makes). Give the references back.
                    self.release_slot(slot, n);
                }
                _ => {}
            }
        }
        let held = simt::shfl_u32(uniform, held, leader);
        if held == 0 {
            self.errors.record(&self.errors.double_frees, addr);
            return;
        }
        // The group holds n references: the slab stays put, of the class
        // its counter names (no header read).
        let geo = class_geometry(held - 1);
        // Only a pointer the block could have been handed out as (its
        // start, or its start aligned up): `free(p + 8)` frees nothing (an
        // invalid free), so the later `free(p)` is not a double free.
        let index = geo.and_then(|g| Slab(base).freeable_index_of(addr, g));
        // SAFETY: a referenced live slab; `index_of` gives `i < usable`.
        let freed = unsafe { Slab(base).deallocate(uniform, index) };
        // The heads' clears happen-before the leader's release below (and so
        // before a reuse of the slab that trusts its words to be clear, with
        // no zeroing): `bar.warp.sync` orders memory among the lanes it
        // synchronises, a ballot does not (PTX ISA).
        simt::syncwarp(uniform);
        let blocks_freed = simt::ballot(uniform, freed).count_ones();
        if simt::lane_id() == leader {
            // The release's word: the count after it and the slab's class
            // (kept through the clearing, the class cost a register).
            let seen = self.release_slot(slot, n + blocks_freed);
            let after = seen.count();
            // Every free leaves room where it freed: point this stream's
            // hint at the slab and the leader's block, so that the
            // stream's next malloc of the class (and an exhausted heap's
            // bounded search) goes back there and, for a group of half a
            // word or more, starts its walk at the run the stream freed
            // with no look (`Slab::allocate`) — a warp that mallocs and
            // frees keeps to its blocks, and an emptied slab is put back
            // to use in place, not left behind the hints for a claim to
            // take over. A store with no load before it: nothing waits
            // for it. (Before, only a free into a full slab or one that
            // emptied it moved the hint, and a walk at 1 KiB and larger
            // looked first: BENCHMARKS.md, "A hint per freed block".)
            if let Some(class) = seen.class()
                && let Some(g) = class_geometry(class)
                && after < g.usable
            {
                // The block, if the field names it (`HINT_BLOCKS`: no
                // field a free stores is one of its two highest values,
                // which say "a stream's last try" and "no hint of its
                // own"); the roomy bit where the slab has room for a
                // warp's group (`ROOMY_BLOCKS`), so that
                // the stream's next malloc locks it without a look
                // (`locks_blind`).
                let block = index.filter(|&i| i < HINT_BLOCKS).map_or(0, |i| i + 1)
                    | if after + ROOMY_BLOCKS <= g.usable {
                        HINT_ROOMY
                    } else {
                        0
                    };
                self.class_hint(class as usize, self.stream())
                    .store((slot + 1) | (block << HINT_BLOCK_SHIFT), Ordering::Relaxed);
            }
        }
        // Counted last, when little else is live.
        if !freed {
            let counter = if index.is_some() {
                &self.errors.double_frees
            } else {
                &self.errors.invalid_frees
            };
            self.errors.record(counter, addr);
        }
    }

    // ----------------------------------------------------------------------
    // Queries
    // ----------------------------------------------------------------------

    /// The bytes usable at `ptr` (from `ptr` to the end of its block), or 0
    /// if it is not a live allocation's address (never handed out, or a
    /// block of a live slab that was freed: its bit is checked).
    pub fn usable_size(&self, ptr: *const u8) -> u64 {
        let addr = ptr.expose_provenance() as u64;
        match self.target(addr) {
            Target::Slab { .. } => {
                let base = Slab::containing(addr).0;
                // SAFETY: the caller owns the allocation at `ptr`, so the slab
                // is live.
                let Some(geo) = (unsafe { Slab(base).geometry() }) else {
                    return 0;
                };
                // A pointer into a block's middle is no allocation (as for
                // `free`): 0, and `realloc` refuses it rather than moving
                // the block and failing to free it.
                match Slab(base).freeable_index_of(addr, geo) {
                    // SAFETY: as above; it gives `i < usable`. A
                    // block whose bit is clear was freed: not live.
                    Some(i) if unsafe { Slab(base).is_allocated(i) } => {
                        Slab(base).block_addr(i, geo) + u64::from(geo.block) - addr
                    }
                    _ => 0,
                }
            }
            Target::Large { granules, .. } => u64::from(granules) << SLAB_SHIFT,
            _ => 0,
        }
    }

    /// The size class of the slab a slot publishes at `addr` (a granule's
    /// address), or `None` when no slab lies there (a large block, a free
    /// granule, a pooled slab): for the host's count of spilled slabs
    /// (quiescent heap).
    pub fn slab_class_at(&self, addr: u64) -> Option<usize> {
        match self.granules.get(self.granule_of(addr)?) {
            Granule::Slab { slot } if self.slot(slot).peek() == Some(addr) => {
                self.slot(slot).look().class().map(|c| c as usize)
            }
            _ => None,
        }
    }

    /// The device's counts by size class (slabs now, from the slot table;
    /// nulls) and of large blocks' bytes (quiescent heap: no kernel
    /// running).
    pub fn class_counts(&self) -> ClassCounts {
        let mut slabs = [0u32; CLASS_COUNT];
        for guard in self.slots.iter(self.slot_count() as usize) {
            if let Some(class) = guard.look().class()
                && let Some(n) = slabs.get_mut(class as usize)
            {
                *n += 1;
            }
        }
        self.classes.snapshot(slabs)
    }

    /// The device's error counters.
    pub fn errors(&self) -> Errors {
        self.errors.snapshot()
    }

    /// The device's slab and block traffic.
    pub fn traffic(&self) -> Traffic {
        self.counters.snapshot()
    }

    /// Slots that publish a slab now, empty ones included (quiescent
    /// heap).
    pub fn published_slabs(&self) -> usize {
        self.slots
            .iter(self.slot_count() as usize)
            .filter(|g| g.peek().is_some())
            .count()
    }

    /// Slabs in the pool now (quiescent heap).
    pub fn pool_len(&self) -> usize {
        self.pool.len()
    }

    /// Gives up every slot left being created (host side, no kernel
    /// running): a launch that failed (a lane's panic, the simulator's
    /// watchdog) can stop a lane between its claim and its publish, and
    /// the next launch's searches that met the slot waited on it for ever
    /// (a review, 2026-12-07; reproduced: a launch after a panic amid
    /// growth, stopped by its watchdog). The slab the creation was making
    /// is not returned (its memory stays mapped until the heap is
    /// dropped): a leak in place of a hang. Returns how many.
    pub fn abandon_creations(&self) -> u32 {
        let mut n = 0;
        for index in 0..self.slot_count().min(MAX_SLOTS as u32) {
            let guard = self.slot(index);
            if guard.is_creating() {
                guard.abandon();
                n += 1;
            }
        }
        n
    }

    /// Takes over the empty published slabs (host side, no kernel
    /// running: a trim) but `keep` of each class, handing each it takes to
    /// `f`: the granule table forgets it, its slot is emptied and unmarked.
    /// Returns how many it took.
    ///
    /// `hints` is a copy of the hint table (`hint_table_bytes` of the
    /// heap's streams, class-major; a shorter one is not used). A class keeps first the
    /// empty slabs its streams' hints name, then others in slot order; the
    /// kept ones stay published and marked in `empties`. Every hint of a
    /// class that kept slabs and that names no slab of the class with live
    /// blocks now names one of the kept (`aim_hints`: the streams in turn,
    /// a word of the slab each; the hints' own slabs decide only which
    /// slabs are kept), so the class's next
    /// launch starts its searches at the slabs it kept — without, they
    /// would start at slots this emptied and claim them anew, the kept
    /// slabs idle beside the new ones (2026-12-06: 8 to 10 new slabs of 8
    /// KiB after a trim that kept 3 of 9, as after one that kept none).
    pub fn take_empty(&self, keep: u32, hints: &mut [u32], mut f: impl FnMut(u64)) -> usize {
        const _: () = assert!(MAX_SLOTS <= 1 << 16);
        let slots = self.slot_count().min(MAX_SLOTS as u32);
        let streams = self.streams() as usize;
        let hints = hints.get_mut(..CLASS_COUNT * streams).unwrap_or(&mut []);
        let mut is_kept = [0u32; MAX_SLOTS / 32];
        let mut kept = [0u32; CLASS_COUNT];
        let mut keep_at = |index: u32, class: u32| {
            let (word, bit) = ((index / 32) as usize, 1 << (index % 32));
            if kept[class as usize] < keep && is_kept[word] & bit == 0 {
                kept[class as usize] += 1;
                is_kept[word] |= bit;
            }
        };
        // The slabs the streams' hints name first, then the others.
        for (i, &hint) in hints.iter().enumerate() {
            let class = (i / streams) as u32;
            if let Some(index) = (hint & HINT_SLOT_MASK).checked_sub(1)
                && index < slots
                && self.empty_class(index) == Some(class)
            {
                keep_at(index, class);
            }
        }
        for index in 0..slots {
            if let Some(class) = self.empty_class(index) {
                keep_at(index, class);
            }
        }
        let kept_at = |index: u32| is_kept[(index / 32) as usize] & (1 << (index % 32)) != 0;
        let mut n = 0;
        // The kept slabs are the empty ones left: `aim_hints` below.
        for index in 0..slots {
            if kept_at(index) || self.empty_class(index).is_none() {
                continue;
            }
            let guard = self.slot(index);
            if let Some(slab) = guard.reclaim() {
                self.empties.clear(index);
                guard.vacate();
                self.forget_slab(slab);
                f(slab);
                n += 1;
            }
        }
        self.aim_hints(hints);
        // The slabs went back: new slabs may be had again.
        self.memory_returned();
        n
    }

    /// Points the hints that name no slab of their class with live blocks
    /// at the class's empty published slabs, the streams in turn over them
    /// (host side, no kernel running; `hints` is a copy of the hint table
    /// as for [`DeviceHeap::take_empty`], which calls this, and a shorter
    /// one is not used). The k-th stream sent to a slab gets word k as its
    /// block (modulo the words a hint names), and the roomy mark while the
    /// k streams before it, a warp's group each, would leave the slab room
    /// for a warp's group (`ROOMY_BLOCKS`): its first malloc
    /// locks blind and walks from its own word. A hint that names a
    /// slab of its class with live blocks stays. Classes with no empty
    /// slab are left alone.
    ///
    /// Measured in the contention test (2026-12-06, 03:19–03:21 UTC): a
    /// warm launch after this (`Heap::spread`) took 0.030 to 0.065 extra
    /// walk rounds per group-malloc at 8 KiB and 7.9 to 8.2 round trips per
    /// pair, where the same launch after the cold one alone took 0.08 to
    /// 0.14 and 8.5 to 9.2 — the cold launch's growth leaves streams whose
    /// hints name one word.
    pub fn aim_hints(&self, hints: &mut [u32]) {
        const _: () = assert!(MAX_SLOTS <= 1 << 16);
        let slots = self.slot_count().min(MAX_SLOTS as u32);
        let streams = self.streams() as usize;
        let Some(hints) = hints.get_mut(..CLASS_COUNT * streams) else {
            return;
        };
        // A class's empty slots, listed by one pass of the table a class.
        let mut list = [0u16; MAX_SLOTS];
        for class in 0..CLASS_COUNT as u32 {
            let mut len = 0;
            for index in 0..slots {
                if self.empty_class(index) == Some(class) {
                    list[len] = index as u16;
                    len += 1;
                }
            }
            if len == 0 {
                continue;
            }
            // The k-th stream sent to a slab starts its walk at word k, as
            // if it had freed a warp's blocks there (its block field).
            let usable = geometry(class as usize).usable;
            // Whole words a hint's block field names: past them, the
            // streams sent to a slab start at its words again, in turn.
            let words = usable.min(HINT_BLOCKS) / WORD_BITS;
            let class_hints = &mut hints[class as usize * streams..][..streams];
            let (mut turn, mut round) = (0, 0u32);
            for hint in class_hints.iter_mut() {
                let names = (*hint & HINT_SLOT_MASK)
                    .checked_sub(1)
                    .filter(|&i| i < slots);
                if names.is_some_and(|i| {
                    let seen = self.slot(i).look();
                    seen.class() == Some(class) && seen.count() != 0
                }) {
                    continue;
                }
                let field = if words > 0 {
                    (round % words) * WORD_BITS + 1
                } else {
                    0
                };
                // Roomy (locked blind) while the streams before it on the
                // slab, a group each, would leave it room for a warp's
                // group — as a free marks it.
                let before = round.saturating_mul(WORD_BITS);
                let roomy = if before.saturating_add(ROOMY_BLOCKS) <= usable {
                    HINT_ROOMY
                } else {
                    0
                };
                let field = field | roomy;
                *hint = (u32::from(list[turn]) + 1) | field << HINT_BLOCK_SHIFT;
                turn += 1;
                if turn == len {
                    (turn, round) = (0, round + 1);
                }
            }
        }
    }

    /// The class of the empty slab that slot `index` publishes, if it
    /// publishes one (quiescent heap: `take_empty`, `aim_hints`).
    fn empty_class(&self, index: u32) -> Option<u32> {
        let guard = self.slot(index);
        let seen = guard.look();
        (guard.peek().is_some() && seen.count() == 0)
            .then(|| seen.class())
            .flatten()
            .filter(|&class| (class as usize) < CLASS_COUNT)
    }

    /// A slab from the pool (host side, no kernel running), if any.
    pub fn pool_take(&self) -> Option<u64> {
        self.pool_pop()
    }

    /// Publishes `slab` (mapped, a slab of the region) as an empty slab of
    /// `class` in the first empty slot from the class's start slot on —
    /// the slot its first claim takes (host side, no kernel running:
    /// `Heap::warm_up`). It is left as a launch leaves a slab it emptied:
    /// published with a count of 0, marked in `empties`, its granule entry
    /// naming the slot; counted as a slab from the provider. The caller
    /// writes the slab's header ([`crate::slab::Header::new`] for the
    /// returned slot) and zeroes its bitfield before the next launch.
    /// `None` (nothing changed) when no slot is empty, or `slab` is not a
    /// slab of the region, or its granule holds a live slab or large block.
    pub fn publish_empty(&self, class: usize, slab: u64) -> Option<u32> {
        let granule = self
            .granule_of(slab)
            .filter(|_| slab.is_multiple_of(SLAB_SIZE))?;
        let slots = self.slot_count();
        // Not a live slab's or large block's granule.
        let free = matches!(self.granules.get(granule), Granule::Unused | Granule::Freed);
        if class >= CLASS_COUNT || slots == 0 || !free {
            return None;
        }
        let start = search::start_slot(class, slots);
        let index = (0..slots)
            .map(|i| crate::index::wrap(start, i, slots))
            .find(|&i| self.slot(i).raw_ptr() == 0)?;
        self.granules.set(granule, Granule::Slab { slot: index });
        self.slot(index).publish(slab, class, 0);
        self.empties.mark(index);
        // From the provider, as a creation's: a trim counts it back.
        self.counters.slabs_from_provider.add(1);
        Some(index)
    }
}

impl Default for DeviceHeap {
    fn default() -> Self {
        Self::new()
    }
}

/// The geometry of class `class` as a slot's counter names it (`None` for
/// no class: a counter's class field is its publication's, always one).
#[inline(always)]
fn class_geometry(class: u32) -> Option<Geometry> {
    ((class as usize) < CLASS_COUNT).then(|| geometry(class as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::boxed::Box;

    /// A zeroed heap (an unbound one, as the host's zeroed device memory
    /// is), on the host's heap: its atomics alone are used.
    fn zeroed() -> Box<DeviceHeap> {
        // SAFETY: every field of `DeviceHeap` is atomics and arrays of
        // them, for which all-zero bytes are a valid value.
        unsafe { Box::<DeviceHeap>::new_zeroed().assume_init() }
    }

    /// A slot left being created (a claim whose lane a failed launch
    /// stopped) is given up, and only such slots: the next claim of it
    /// succeeds.
    #[test]
    fn creations_left_by_a_failed_launch_are_given_up() {
        let heap = zeroed();
        heap.config.slot_count.store(8, Ordering::Relaxed);
        assert!(heap.slot(3).claim(0) && heap.slot(5).claim(7));
        assert_eq!(heap.abandon_creations(), 2);
        assert!(!heap.slot(3).is_creating() && !heap.slot(5).is_creating());
        assert_eq!(heap.abandon_creations(), 0);
        assert!(heap.slot(3).claim(0), "the slot is empty again");
    }

    /// A refusal answered after a newer one keeps the heap exhausted: lane
    /// A asks in generation 0, memory comes back (generation 1), lane B
    /// asks and is refused, then A's refusal arrives. The mark stayed B's.
    #[test]
    fn a_late_refusal_keeps_a_newer_ones_mark() {
        let heap = zeroed();
        let a = heap.memory_generation();
        heap.memory_returned();
        let b = heap.memory_generation();
        assert!(!heap.is_exhausted());
        heap.refused(b);
        assert!(heap.is_exhausted());
        heap.refused(a);
        assert!(heap.is_exhausted(), "A's late refusal erased B's mark");
        // Memory back again: the mark is stale; a refusal made now marks.
        heap.memory_returned();
        assert!(!heap.is_exhausted());
        heap.refused(heap.memory_generation());
        assert!(heap.is_exhausted());
    }

    /// Newer is by wrapping distance: a refusal made after the generation
    /// wrapped past `u32::MAX` marks over one made before; and a refusal
    /// in each generation near the wrap marks (in the last one it marked
    /// 0, "no mark", while the generation went up by 1).
    #[test]
    fn a_refusal_after_the_generation_wraps_marks() {
        let heap = zeroed();
        heap.memory_generation
            .store(u32::MAX - 3, Ordering::Relaxed);
        for _ in 0..4 {
            let generation = heap.memory_generation();
            heap.refused(generation);
            assert!(heap.is_exhausted(), "generation {generation:#x}");
            heap.memory_returned();
            assert!(!heap.is_exhausted(), "generation {generation:#x} + 1");
        }
        assert_eq!(heap.memory_generation(), 4);
    }
}
