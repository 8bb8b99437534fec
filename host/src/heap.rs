//! `Heap`: a device heap in the device's memory, configured, served by the
//! RPC server and backed by device memory — through the device interface, so
//! that the one code path here runs on a GPU and, in CI, on the emulated
//! device.
//!
//! ```text
//!   Heap::attach(&ctx, config)        ctx: the user's cudarc CudaContext,
//!     │                               the emulated one, or a Device
//!     ├─ the DeviceHeap: device memory (alloc_zeroed), configured on a
//!     │  host copy (region, mailbox, mode; the pool in pool mode), written
//!     ├─ Region over device.backing(): one reserved range, granules mapped
//!     │  on demand (CudaVmm | HostEmulated)
//!     └─ mailbox: device.mapped_host(), registered with the RPC server
//!   heap.link(&module)                checks the module's
//!                                     WARPALLOC_HEAP_LAYOUT against this
//!                                     program's DeviceHeap, then writes the
//!                                     heap's address into its WARPALLOC_HEAP
//!                                     (several modules may share one heap)
//!   … the user launches the module's kernels on any stream; the server
//!     serves their requests while they run …
//!   heap.stats() / check() / trim()   synchronise the context first, then
//!                                     work on a copy
//!   heap.mark_phase(name) /           the same; a phase's snapshots at its
//!     snapshots()                     peak and first out-of-memory null
//!                                     (snapshot.rs)
//!   drop(heap)                        synchronises, unlinks every module,
//!                                     stops serving, frees the memory
//! ```
//!
//! The host operates the device heap only through `DeviceHeap`'s own methods:
//! it reads the whole heap into a host copy (`HeapCopy`), calls the method
//! — `configure`, `pool_push`, `errors`, `traffic`, `take_empty`, `check`,
//! `census` — and writes the copy back when it changed something. Slab
//! memory that `check` and `census` read goes through the device interface
//! too, and only where the region has mapped granules.
//!
//! # Synchronisation
//! `stats`, `check`, `trim`, `link`, `mark_phase`, `snapshots` and dropping
//! the heap need no kernel of
//! the context to run: each first waits for every stream of the context
//! (`Device::synchronize`, which is `cuCtxSynchronize` on a GPU) and for the
//! server to take the requests the kernels left. So they are safe, and they
//! block while kernels run: call them after your launches, not from inside a
//! stream callback. A kernel that never ends blocks them, as it would block
//! `cuCtxSynchronize`.
//!
//! They wait for the kernels that run when they start, not for one that
//! starts while they run: no thread may launch a kernel that uses the heap
//! until the call returns. `trim`, `warm_up`, `spread` and
//! `forget_refusal` write the device heap back after reading it, and a
//! kernel launched in between would have its slots and counts overwritten
//! (and `trim` would unmap a slab it took); the drop unlinks the modules
//! and frees the heap's memory under it. A program that launches from
//! several threads calls these where no launch can overlap them, as it
//! would order `cuCtxSynchronize` with its launches.
//!
//! # Which mode
//! * [`Mode::Rpc`] (default): slabs and large blocks are mapped when the device
//!   first asks, so memory follows demand. Each new slab costs one RPC round
//!   trip to the host (microseconds over PCIe) the first time; freed slabs stay
//!   mapped and are reused without the host.
//! * [`Mode::Pool`]: the slabs are mapped before launch and handed out on the
//!   device from a lock-free stack, with no RPC on the slab path: the fast
//!   first touch, and the mode that cannot deadlock on the host even if
//!   mapping memory while a kernel runs turned out not to work on some driver.
//!   It costs the pool's memory up front. Large blocks (≥ 1 MiB) still go to
//!   the server.
//!
//! Either mode may spill (`HeapConfig::spill`): what the device's memory
//! has no room for is backed by host memory mapped into the region
//! (backing/mod.rs, "Spill") instead of answered with null.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use warpalloc_device::abi::{
    ConfigValues, Errors, HEAP_SYMBOL, LAYOUT_SYMBOL, LAYOUT_WORDS, Layout, OUT_OF_MEMORY_OFFSET,
    ProviderKind, Traffic,
};
use warpalloc_device::heap::{
    Census, LAYOUT, MAX_REGION, MAX_SLOTS, MAX_STREAMS, SlabMemory, hint_table_bytes,
    stream_count_for,
};
use warpalloc_device::registry;
use warpalloc_device::rpc::wire::{self, Port, Reply, Request};
use warpalloc_device::size_class::{CLASS_COUNT, HEADER_BYTES, geometry};
use warpalloc_device::slab::Header;
use warpalloc_device::{ClassCounts, DeviceHeap};

use crate::backing::{Backing, GRANULE, Refusal, Region, RegionConfig, RegionStats};
use crate::device::{
    Allocation, AsDevice, AsModule, Device, Global, GlobalRead, HostMapping, Launch, LaunchReport,
    Module, read_global,
};
use crate::server::{self, Registration};
use crate::snapshot::{Moment, Reading, RefusalRecord, Snapshot};
use crate::{HostError, Launcher};

/// How slabs reach the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// On demand, over RPC (see the module docs).
    Rpc,
    /// From `slabs` slabs mapped before launch (see the module docs).
    Pool {
        /// Slabs to map up front (2 MiB each).
        slabs: u32,
    },
}

/// A heap's settings.
#[derive(Clone, Copy, Debug)]
pub struct HeapConfig {
    /// How slabs reach the device.
    pub mode: Mode,
    /// Address space to reserve (default: twice the device memory, at most
    /// 512 GiB: `warpalloc_device::heap::MAX_REGION`).
    pub reserve: Option<u64>,
    /// The most device memory the heap maps (default: no limit but the
    /// device's).
    pub limit: Option<u64>,
    /// Device memory to leave free, checked before each mapping.
    pub headroom: u64,
    /// Slots of the slot table (1..=32 768).
    pub slots: u32,
    /// RPC ports (default: one per resident warp of the device, at most
    /// 4096; 32 on the emulated device).
    pub ports: Option<u32>,
    /// Search streams per size class, a power of two up to 8 192: each
    /// class keeps a hint (the slab it last found room in or freed into)
    /// per stream, and
    /// a warp searches from its stream's (its warp slot modulo the
    /// streams), so that warps running at once start at different slabs.
    /// Default: one per resident warp of the device (8 192 on an H200; 32
    /// on the emulated device).
    pub streams: Option<u32>,
    /// Spill to host memory (default off): a slab or large block that the
    /// device's memory has no room for — the `limit` or `headroom` reached,
    /// or the driver out of device memory — is backed by pinned host
    /// memory mapped into the heap's region, so kernels go on (slower:
    /// each access crosses the bus) instead of getting null. A spill is
    /// refused while it would leave the host less than a tenth of its
    /// memory (at least 4 GiB) free. Spilled bytes are counted apart
    /// (`HeapStats::spill`) and given back first by `trim`. Attach fails
    /// with `HostError::SpillUnsupported` where the driver cannot map host
    /// memory so.
    pub spill: bool,
    /// In pool mode, ask the host for a slab once the pool is dry (as RPC
    /// mode does) instead of returning null (default off: a dry pool's
    /// mallocs get null, and `HeapStats`'s report names the classes short).
    /// Refused in RPC mode, which asks the host anyway.
    pub pool_fallback: bool,
    /// Empty slabs each size class keeps through [`Heap::trim`] (default 0:
    /// a trim gives every empty slab back). Between launches that allocate
    /// alike, a keep of a class's slabs lets the next launch revive them in
    /// place instead of asking the host again (a warm launch); a trim still
    /// gives back the rest, and the empty slabs of classes the next phase
    /// no longer uses beyond the keep. Within a launch a class keeps all of
    /// its emptied slabs until the host refuses memory.
    pub keep: u32,
}

impl HeapConfig {
    /// `Ok` if every field is in its range, else the first that is not,
    /// with the range: [`Heap::attach`] and [`Heap::new`] refuse such a
    /// configuration (nothing is clamped: a slot table of 0 would fail
    /// every malloc, one of 40 000 would quietly be 32 768).
    pub fn validate(&self) -> Result<(), HostError> {
        let bad = |what: String| Err(HostError::Config(what));
        if self.slots == 0 || self.slots as usize > MAX_SLOTS {
            return bad(format!(
                "slots is {}; it must be 1..={MAX_SLOTS} (the default is {MAX_SLOTS})",
                self.slots
            ));
        }
        if let Some(ports) = self.ports
            && (ports == 0 || ports as usize > wire::MAX_PORTS)
        {
            return bad(format!(
                "ports is {ports}; it must be 1..={} (None: one per resident warp)",
                wire::MAX_PORTS
            ));
        }
        if let Some(streams) = self.streams
            && (!streams.is_power_of_two() || streams as usize > MAX_STREAMS)
        {
            return bad(format!(
                "streams is {streams}; it must be a power of two, 1..={MAX_STREAMS} (None: one \
                 per resident warp)"
            ));
        }
        if let Some(reserve) = self.reserve
            && !(GRANULE..=MAX_REGION).contains(&reserve)
        {
            return bad(format!(
                "reserve is {reserve} bytes; it must be {GRANULE}..={MAX_REGION} (one 2 MiB \
                 granule to 512 GiB; None: twice the device's memory)"
            ));
        }
        if let Some(limit) = self.limit
            && limit < GRANULE
        {
            return bad(format!(
                "limit is {limit} bytes; it must be at least {GRANULE} (one 2 MiB granule: no \
                 slab fits in less; None: no limit but the device's)"
            ));
        }
        if self.pool_fallback && self.mode == Mode::Rpc {
            return bad(
                "pool_fallback is for Mode::Pool (a pool that asks the host once it is dry); \
                 Mode::Rpc asks the host for every slab anyway"
                    .into(),
            );
        }
        if self.mode == (Mode::Pool { slabs: 0 }) && !self.pool_fallback {
            return bad(
                "a pool of 0 slabs with no pool_fallback serves no small block (every malloc \
                 below 1 MiB would be null); give it slabs, or turn on pool_fallback"
                    .into(),
            );
        }
        if let Mode::Pool { slabs } = self.mode
            && slabs > self.slots
        {
            // Each pooled slab is published in a slot: the rest would stay
            // mapped and unused, and the nulls once the table filled would
            // advise a larger pool (a review, 2026-12-07).
            return bad(format!(
                "a pool of {slabs} slabs needs as many slots, more than slots ({})",
                self.slots
            ));
        }
        if let Mode::Pool { slabs } = self.mode {
            let room = self
                .limit
                .unwrap_or(u64::MAX)
                .min(self.reserve.unwrap_or(u64::MAX));
            if u64::from(slabs).saturating_mul(GRANULE) > room {
                return bad(format!(
                    "a pool of {slabs} slabs needs {} bytes, more than the reserve or limit \
                     ({room} bytes)",
                    u64::from(slabs) * GRANULE
                ));
            }
        }
        Ok(())
    }
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            mode: Mode::Rpc,
            reserve: None,
            limit: None,
            headroom: 0,
            slots: MAX_SLOTS as u32,
            ports: None,
            streams: None,
            spill: false,
            pool_fallback: false,
            keep: 0,
        }
    }
}

/// What the server answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcCounts {
    /// `Alloc` requests (one per lane).
    pub allocs: u64,
    /// `Free` requests.
    pub frees: u64,
    /// `Ping` requests.
    pub pings: u64,
}

pub use crate::profile::{ClassPeak, HeapProfile};

/// A heap's figures, between launches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// The backing: mapped bytes and peak, granules, live runs (slabs and
    /// large blocks), refusals by reason, driver calls.
    pub region: RegionStats,
    /// The device's error record: double and invalid frees, out-of-memory
    /// nulls, the first bad address.
    pub device: Errors,
    /// The device's slab and large-block traffic.
    pub traffic: Traffic,
    /// What is live on the device: slabs, blocks and bytes allocated, large
    /// blocks, empty and pooled slabs.
    pub live: Census,
    /// Requests the RPC server answered for this heap.
    pub rpc: RpcCounts,
    /// The device's counts by size class — slabs each holds now, lanes
    /// given null — and of large blocks' bytes, now and at most (what
    /// [`Heap::profile`] reads).
    pub classes: ClassCounts,
    /// The pool's slabs in pool mode (`None` in RPC mode).
    pub pool: Option<u32>,
    /// Whether a dry pool asks the host (`HeapConfig::pool_fallback`):
    /// then a null is the host's refusal, not the pool's shortfall.
    pub pool_fallback: bool,
    /// What lies in host memory (`HeapConfig::spill`).
    pub spill: SpillCounts,
}

/// What a heap that spills holds in host memory (`HeapStats::spill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpillCounts {
    /// Bytes of host memory mapped now (in use or free until `trim`).
    pub bytes: u64,
    /// The most mapped at once (since the peaks were last reset).
    pub peak_bytes: u64,
    /// Spilled slabs in use, by size class (indexed as
    /// [`geometry`]).
    pub slabs: [u32; CLASS_COUNT],
    /// Bytes of spilled large blocks in use.
    pub large_bytes: u64,
    /// Spilled slabs in the pool (pool mode), of no class yet.
    pub pool_slabs: u32,
    /// Spills refused for want of host memory.
    pub refused: u64,
}

impl Default for SpillCounts {
    fn default() -> Self {
        SpillCounts {
            bytes: 0,
            peak_bytes: 0,
            slabs: [0; CLASS_COUNT],
            large_bytes: 0,
            pool_slabs: 0,
            refused: 0,
        }
    }
}

/// A class that a dry pool left short: what [`HeapStats::pool_shortfall`]
/// gives and `HeapStats`'s `Display` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The class's block size, in bytes.
    pub block: u32,
    /// Lanes whose malloc of the class got null.
    pub nulls: u32,
    /// Slabs of the class those lanes would have filled: their nulls ÷ the
    /// class's blocks a slab, rounded up. An upper bound: a lane that asks
    /// again after a null counts again.
    pub slabs: u32,
}

/// "class 8.0 KiB needed up to 3 more slabs (514 nulls)": one class of a
/// dry pool's report (`HeapStats`'s `Display`, `warpalloc stress`).
impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "class {} needed up to {} more slab{} ({} nulls)",
            bytes(u64::from(self.block)),
            self.slabs,
            if self.slabs == 1 { "" } else { "s" },
            self.nulls
        )
    }
}

impl HeapStats {
    /// In pool mode, the classes whose mallocs got null, with the slabs
    /// they lacked (largest shortfall first); empty in RPC mode, with
    /// `pool_fallback`, or when no malloc got null.
    pub fn pool_shortfall(&self) -> Vec<Shortfall> {
        // With a fallback, a dry pool asked the host: its nulls are the
        // host's refusals (the report says which), and raising the pool or
        // turning on the fallback is no advice (a review, 2026-12-07).
        if self.pool.is_none() || self.pool_fallback {
            return Vec::new();
        }
        shortfall(&self.classes.nulls)
    }
}

/// The class whose blocks are `block` bytes, if one is (`class_index` takes
/// a class's block size only: any other is no class's).
pub(crate) fn class_of_block(block: u32) -> Option<usize> {
    (0..CLASS_COUNT).find(|&c| geometry(c).block == block)
}

/// The sum of `counts`, at most `u32::MAX`: counts read from the device or
/// from a user's file may be anything.
pub(crate) fn saturating_sum(counts: impl IntoIterator<Item = u32>) -> u32 {
    counts.into_iter().fold(0, u32::saturating_add)
}

/// The slabs a dry pool of `pool` needs to serve what `short` lacked (its
/// advice: "raise the pool to …").
pub(crate) fn raised_pool(pool: u32, short: &[Shortfall]) -> u32 {
    pool.saturating_add(saturating_sum(short.iter().map(|s| s.slabs)))
}

/// The classes whose mallocs got null (`nulls`, by class index), with the
/// slabs they lacked, largest shortfall first.
pub(crate) fn shortfall(nulls: &[u32; CLASS_COUNT]) -> Vec<Shortfall> {
    let mut short: Vec<Shortfall> = nulls
        .iter()
        .enumerate()
        .filter(|&(_, &nulls)| nulls != 0)
        .map(|(class, &nulls)| {
            let geo = geometry(class);
            Shortfall {
                block: geo.block,
                nulls,
                slabs: nulls.div_ceil(geo.usable.max(1)),
            }
        })
        .collect();
    short.sort_by_key(|s| std::cmp::Reverse(s.slabs));
    short
}

/// What a program whose global allocator is not `WarpAlloc` is told, once,
/// when it links a module on the emulated device.
pub const NOT_WARPALLOC: &str = "warpalloc: this program's #[global_allocator] is not \
     warpalloc::WarpAlloc, so in the simulator its kernels' Vec, Box and String take host memory \
     instead of the heap's (on a GPU they use the heap). If the kernels use them, add these two \
     lines to the host program:\n    #[global_allocator]\n    static GLOBAL: warpalloc::WarpAlloc = \
     warpalloc::WarpAlloc;";

/// Says [`NOT_WARPALLOC`] on stderr, once a process, unless the program's
/// global allocator is `WarpAlloc`.
fn warn_if_not_warpalloc() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if !warpalloc_device::is_global_allocator() {
        WARNED.call_once(|| eprintln!("{NOT_WARPALLOC}"));
    }
}

/// Bytes for people: B, then KiB, MiB, GiB or TiB with one decimal ("8.0
/// MiB"): how every report of the heap's, and the `warpalloc` tool's
/// tables, write sizes.
///
/// ```
/// use warpalloc_host::heap::bytes;
/// assert_eq!(bytes(1023), "1023 B");
/// assert_eq!(bytes(8 << 20), "8.0 MiB");
/// assert_eq!(bytes(3 << 39), "1.5 TiB");
/// ```
pub fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    UNITS.iter().find(|&&(_, size)| n >= size).map_or_else(
        || format!("{n} B"),
        |&(unit, size)| format!("{:.1} {unit}", n as f64 / size as f64),
    )
}

/// A report a person can read: every figure with its name, refusals by
/// reason, sizes in bytes units.
impl std::fmt::Display for HeapStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, l, t, d) = (&self.region, &self.live, &self.traffic, &self.device);
        writeln!(
            f,
            "memory: {} mapped (peak {}), {} handed out to slabs and large blocks (peak {}), \
             {} granules mapped and free, {} moved, {} old addresses awaiting trim",
            bytes(r.mapped_bytes),
            bytes(r.peak_mapped_bytes),
            bytes(r.in_use_bytes),
            bytes(r.peak_in_use_bytes),
            r.free_mapped_granules,
            r.relocations,
            r.retired_granules
        )?;
        if self.spill.peak_bytes != 0 || self.spill.refused != 0 {
            let slabs: u32 = self.spill.slabs.iter().sum();
            writeln!(
                f,
                "spill: {} of host memory mapped (peak {}): {} slabs and {} of large blocks in \
                 use there; {} spills refused for want of host memory",
                bytes(self.spill.bytes),
                bytes(self.spill.peak_bytes),
                slabs,
                bytes(self.spill.large_bytes),
                self.spill.refused
            )?;
        }
        writeln!(
            f,
            "live: {} blocks ({}) in {} slabs, {} empty slabs, {} pooled; {} large blocks ({})",
            l.live_blocks,
            bytes(l.live_block_bytes),
            l.live_slabs,
            l.empty_slabs,
            l.pool_slabs,
            l.large_blocks,
            bytes(l.large_bytes)
        )?;
        writeln!(
            f,
            "traffic: {} slabs from the provider, {} revived in place, {} taken over by \
             another class, {} given back ({} by the device for a large block); {} large \
             blocks allocated, {} freed",
            t.slabs_from_provider,
            t.slabs_revived,
            t.slabs_reclaimed,
            t.slabs_to_provider,
            t.slabs_given_back,
            t.large_allocations,
            t.large_frees
        )?;
        let refused: Vec<String> = Refusal::ALL
            .iter()
            .filter(|&&why| r.refused(why) != 0)
            .map(|&why| format!("{} by {}", r.refused(why), why.name()))
            .collect();
        writeln!(
            f,
            "refusals: {}",
            if refused.is_empty() {
                "none".to_string()
            } else {
                refused.join(", ")
            }
        )?;
        writeln!(
            f,
            "errors: {} out-of-memory nulls, {} double frees, {} invalid frees{}",
            d.out_of_memory,
            d.double_frees,
            d.invalid_frees,
            if d.first_bad_address != 0 {
                format!(
                    " (the first of {:#x}, by block {} thread {}{})",
                    d.first_bad_address,
                    d.first_bad_block,
                    d.first_bad_thread,
                    d.first_bad_kernel
                        .map(|k| format!(" of kernel `{k}`"))
                        .unwrap_or_default()
                )
            } else {
                String::new()
            }
        )?;
        write!(
            f,
            "rpc: {} allocations, {} frees, {} pings served",
            self.rpc.allocs, self.rpc.frees, self.rpc.pings
        )?;
        let short = self.pool_shortfall();
        if let (Some(pool), false) = (self.pool, short.is_empty()) {
            let classes: Vec<String> = short.iter().map(Shortfall::to_string).collect();
            let raised = raised_pool(pool, &short);
            write!(
                f,
                "\npool exhausted: {}; raise the pool to {} slabs (`Mode::Pool {{ slabs: {} }}`, or \
                 `HeapConfig::pool_from(&heap.profile()?)` after a run in RPC mode), let it ask \
                 the host once dry (`HeapConfig::pool_fallback`), or use `Mode::Rpc`",
                classes.join(", "),
                raised,
                raised
            )?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    frees: AtomicU64,
    pings: AtomicU64,
    /// Set when the region refused a slab or block for a reason that may
    /// pass (its headroom check, a driver error, an injected fault); taken
    /// by [`Heap::forget_refusal`].
    temporary_refusal: AtomicBool,
    /// The phase's first refusal, as the server saw it (taken by
    /// [`Heap::mark_phase`]).
    first_refusal: Mutex<Option<RefusalRecord>>,
}

/// The phase the heap is in, and the snapshots of the phases before.
struct Phases {
    /// The phase's name.
    name: String,
    /// The device's nulls per class when the phase began.
    base_nulls: [u32; CLASS_COUNT],
    /// Its out-of-memory count then.
    base_out_of_memory: u64,
    /// The phase's first-out-of-memory snapshot, once taken.
    out_of_memory: Option<Snapshot>,
    /// Its peak snapshot, replaced while the peak grows.
    peak: Option<Snapshot>,
    /// The ended phases' snapshots.
    done: Vec<Snapshot>,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            name: "start".into(),
            base_nulls: [0; CLASS_COUNT],
            base_out_of_memory: 0,
            out_of_memory: None,
            peak: None,
            done: Vec::new(),
        }
    }

    /// The phase's snapshots: its first out-of-memory, then its peak.
    fn current(&self) -> impl Iterator<Item = &Snapshot> {
        self.out_of_memory.iter().chain(self.peak.iter())
    }
}

type SharedRegion = Arc<Mutex<Region<Box<dyn Backing>>>>;

fn lock(region: &SharedRegion) -> MutexGuard<'_, Region<Box<dyn Backing>>> {
    region.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long the heap waits for the server to take a kernel's last requests.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(30);

/// A host copy of a device heap: made zeroed (every byte initialised,
/// padding included), so that it can be viewed as bytes to copy from and to
/// the device.
struct HeapCopy(Box<DeviceHeap>);

impl HeapCopy {
    /// An unbound heap (all zero, as `DeviceHeap::new()`).
    fn zeroed() -> HeapCopy {
        // SAFETY: every field of `DeviceHeap` is an atomic integer, for
        // which all-zero bytes are valid.
        HeapCopy(unsafe { Box::<DeviceHeap>::new_zeroed().assume_init() })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the box holds `size_of::<DeviceHeap>()` initialised bytes
        // (zeroed at creation; since then written only as integers or as
        // whole bytes), valid for reads while `self` is borrowed.
        unsafe {
            std::slice::from_raw_parts((&raw const *self.0).cast::<u8>(), size_of::<DeviceHeap>())
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; any bytes are a valid `DeviceHeap` (plain
        // integers), and the borrow is exclusive.
        unsafe {
            std::slice::from_raw_parts_mut((&raw mut *self.0).cast::<u8>(), size_of::<DeviceHeap>())
        }
    }
}

impl std::ops::Deref for HeapCopy {
    type Target = DeviceHeap;
    fn deref(&self) -> &DeviceHeap {
        &self.0
    }
}

/// A warpalloc heap (see the module docs).
pub struct Heap {
    // Field order is drop order, after `Drop::drop` has unlinked the
    // modules: stop serving, unregister from WarpAlloc's registry, free the
    // device heap, the mailbox, unmap the region, then the launcher and the
    // device.
    /// Stops serving the mailbox when dropped, first.
    registration: Registration,
    /// The modules linked to this heap (unlinked on drop).
    links: Mutex<Vec<Arc<dyn Module>>>,
    /// The heap in `WarpAlloc`'s registry (emulated device only).
    _registered: Option<registry::Registration>,
    /// The `DeviceHeap`, in device memory.
    state: Box<dyn Allocation>,
    /// Its hint table (`hint_table_bytes` of its streams), in device
    /// memory beside it: the device reads and writes it, the host only in
    /// a trim that keeps slabs (`Heap::trim_keeping`).
    hints: Box<dyn Allocation>,
    mailbox: Box<dyn HostMapping>,
    region: SharedRegion,
    counters: Arc<Counters>,
    phases: Mutex<Phases>,
    mode: Mode,
    pool_fallback: bool,
    /// Empty slabs per class that `trim` leaves (`HeapConfig::keep`).
    keep: u32,
    launcher: Option<Launcher>,
    /// The device's failed launches when the heap last repaired itself
    /// (`Device::failed_launches`, `Heap::quiesce`).
    failures_seen: AtomicU64,
    device: Arc<dyn Device>,
}

/// The server's handler for one heap: the region answers `Alloc` and `Free`.
/// A refusal is recorded, the phase's first with what it needed and what
/// was mapped (`limit` and `headroom`: the heap's settings, for its
/// report).
fn handler(
    region: SharedRegion,
    counters: Arc<Counters>,
    limit: Option<u64>,
    headroom: u64,
    spill: bool,
) -> Arc<server::Handler> {
    Arc::new(
        move |request: Request, frees: &mut dyn FnMut() -> bool| match request {
            Request::Alloc { bytes, align } => {
                counters.allocs.fetch_add(1, Ordering::Relaxed);
                let (mut result, refused) = {
                    let mut region = lock(&region);
                    let result = region.allocate(bytes, align);
                    (result, region.take_last_refusal())
                };
                // Before a refusal, the frees pending on other ports, which a
                // kernel may have sent before this request (`serve_frees`):
                // then the region again. One request counts one refusal at
                // most: the first try's is taken back, whether the second
                // try served the request or was refused (and counted that
                // one; a review, 2026-12-08: both were counted).
                if result.is_err() && frees() {
                    let mut region = lock(&region);
                    result = region.allocate(bytes, align);
                    if let Some(refused) = refused {
                        region.forgive(refused);
                    }
                    region.take_last_refusal();
                }
                Reply::Alloc(result.map_err(|why| {
                    let region = lock(&region);
                    if why.may_pass() {
                        counters.temporary_refusal.store(true, Ordering::Relaxed);
                    }
                    let mut first = counters
                        .first_refusal
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if first.is_none() {
                        *first = Some(RefusalRecord {
                            reason: why,
                            bytes,
                            mapped_bytes: region.stats().mapped_bytes,
                            limit,
                            headroom,
                            driver_error: region.driver_error_for(why).map(str::to_string),
                            spill,
                        });
                    }
                    why.status()
                }))
            }
            Request::Free { addr, bytes } => {
                counters.frees.fetch_add(1, Ordering::Relaxed);
                Reply::Free(lock(&region).free(addr, bytes).map_err(|why| why.status()))
            }
            Request::Ping { words } => {
                counters.pings.fetch_add(1, Ordering::Relaxed);
                Reply::Ping(words.map(|w| !w))
            }
        },
    )
}

/// What the region holds in host memory, the slabs among it by class (from
/// the device heap's granule table).
fn spill_counts(copy: &DeviceHeap, region: &Region<Box<dyn Backing>>) -> SpillCounts {
    let stats = region.stats();
    let mut counts = SpillCounts {
        bytes: stats.spilled_bytes,
        peak_bytes: stats.peak_spilled_bytes,
        refused: stats.spills_refused,
        ..SpillCounts::default()
    };
    let mut large = Vec::new();
    copy.for_each_large(|addr, bytes| large.push((addr, addr + bytes)));
    for addr in region.spilled_in_use() {
        // A class from the device's slot tag: a stray kernel write may have
        // made it any number, which counts nowhere.
        if let Some(class) = copy.slab_class_at(addr) {
            if let Some(slabs) = counts.slabs.get_mut(class) {
                *slabs += 1;
            }
        } else if large
            .iter()
            .any(|&(start, end)| (start..end).contains(&addr))
        {
            counts.large_bytes += GRANULE;
        } else {
            // Handed out by the region, of no class and no large block:
            // a pooled slab.
            counts.pool_slabs += 1;
        }
    }
    counts
}

/// Slab memory read through the device interface, only where the region
/// has mapped granules.
struct DeviceMemory<'a> {
    device: &'a dyn Device,
    region: &'a Region<Box<dyn Backing>>,
}

impl SlabMemory for DeviceMemory<'_> {
    fn read_words(&self, addr: u64, out: &mut [u32]) -> bool {
        if !self.region.is_mapped(addr, 4 * out.len() as u64) {
            return false;
        }
        // SAFETY: the range lies in mapped granules of this heap's region
        // (checked above; the region's lock is held, so none is unmapped
        // meanwhile), and no kernel runs (the caller synchronised).
        unsafe { self.device.read(addr, bytemuck::cast_slice_mut(out)) }.is_ok()
    }
}

/// Checks a module's heap link and layout against this program's.
fn check_layout(device: &dyn Device, module: &dyn Module) -> Result<Global, HostError> {
    let global = module.global(HEAP_SYMBOL)?;
    let mut words = [0u64; LAYOUT_WORDS];
    // SAFETY: the module is on `device` as far as its `as_module` could
    // tell (another device's is refused there; a cudarc module of another
    // context where the driver says so), and no kernel runs (the caller
    // synchronised).
    match unsafe { read_global(device, module, LAYOUT_SYMBOL, &mut words) }? {
        GlobalRead::Read => {}
        GlobalRead::Size(size) => {
            return Err(HostError::HeapLayout(format!(
                "{LAYOUT_SYMBOL} is {size} bytes, expected {}",
                8 * LAYOUT_WORDS
            )));
        }
        GlobalRead::Missing => {
            return Err(HostError::HeapLayout(format!(
                "the module has no {LAYOUT_SYMBOL}: it was built with another warpalloc"
            )));
        }
    }
    let theirs = Layout::from_words(&words).ok_or_else(|| {
        HostError::HeapLayout(format!(
            "{LAYOUT_SYMBOL} does not start with the layout magic"
        ))
    })?;
    if let Some((field, module_value, host_value)) = theirs.first_difference(&LAYOUT) {
        return Err(HostError::HeapLayout(format!(
            "{field}: {module_value} in the module, {host_value} here"
        )));
    }
    if global.size != 8 || global.addr % 8 != 0 {
        return Err(HostError::HeapLayout(format!(
            "{HEAP_SYMBOL} is {} bytes at {:#x}, expected a heap link of 8 bytes aligned to 8",
            global.size, global.addr
        )));
    }
    Ok(global)
}

/// Reads a module's heap link.
fn read_link(device: &dyn Device, global: Global) -> Result<u64, HostError> {
    let mut word = [0u8; 8];
    // SAFETY: an 8-byte module global (`check_layout`), read while no kernel
    // runs (the caller synchronised).
    unsafe { device.read(global.addr, &mut word) }?;
    Ok(u64::from_ne_bytes(word))
}

/// Writes a module's heap link.
fn write_link(device: &dyn Device, global: Global, heap: u64) -> Result<(), HostError> {
    // SAFETY: as in `read_link`.
    unsafe { device.write(global.addr, &heap.to_ne_bytes()) }
}

impl Heap {
    /// A heap on `ctx` (the user's `Arc<cudarc::driver::CudaContext>`, an
    /// emulated `CudaContext`, or a `Device`): its device heap in device
    /// memory, a region of the device's memory, a mapped mailbox served by
    /// the RPC server. Link the modules whose kernels allocate with
    /// [`Heap::link`].
    pub fn attach(ctx: &impl AsDevice, config: HeapConfig) -> Result<Heap, HostError> {
        Heap::on(ctx.as_device()?, config, None)
    }

    /// A heap for the kernels `launcher` runs: [`Heap::attach`] to its
    /// device, [`Heap::link`] its module, and [`Heap::launch`] through it.
    pub fn new(launcher: Launcher, config: HeapConfig) -> Result<Heap, HostError> {
        let device = Arc::clone(launcher.device());
        let module = Arc::clone(launcher.module());
        let heap = Heap::on(device, config, Some(launcher))?;
        heap.link(&module)?;
        Ok(heap)
    }

    fn on(
        device: Arc<dyn Device>,
        config: HeapConfig,
        launcher: Option<Launcher>,
    ) -> Result<Heap, HostError> {
        config.validate()?;
        if LAYOUT.align > 256 {
            // `alloc_zeroed` aligns to 256 bytes on both devices.
            return Err(HostError::HeapLayout(format!(
                "DeviceHeap needs {}-byte alignment, device memory gives 256",
                LAYOUT.align
            )));
        }
        let state = device.alloc_zeroed(size_of::<DeviceHeap>())?;
        let streams = config
            .streams
            .unwrap_or_else(|| stream_count_for(device.info().resident_warps()));
        let hints = device.alloc_zeroed(hint_table_bytes(streams) as usize)?;
        let ports = config
            .ports
            .unwrap_or_else(|| wire::port_count_for(device.info().resident_warps()));
        let mailbox = device.mapped_host(ports as usize * size_of::<Port>())?;
        let region: SharedRegion = Arc::new(Mutex::new(Region::new(
            device.backing()?,
            RegionConfig {
                reserve: config.reserve,
                limit: config.limit,
                headroom: config.headroom,
                spill: config.spill,
            },
        )?));
        if config.spill {
            lock(&region)
                .backing_mut()
                .probe_host()
                .map_err(HostError::SpillUnsupported)?;
        }
        let counters = Arc::new(Counters::default());

        let copy = HeapCopy::zeroed();
        let (base, len) = {
            let r = lock(&region);
            (r.base(), r.len())
        };
        copy.configure(ConfigValues {
            slot_count: config.slots,
            provider: match config.mode {
                Mode::Rpc => ProviderKind::Rpc,
                Mode::Pool { .. } if config.pool_fallback => ProviderKind::PoolThenRpc,
                Mode::Pool { .. } => ProviderKind::Pool,
            } as u32,
            port_count: ports,
            streams,
            hints: hints.addr(),
            region_base: base,
            region_len: len,
            mailbox: mailbox.device(),
        });
        if let Mode::Pool { slabs } = config.mode {
            let mut region = lock(&region);
            for mapped in 0..slabs {
                match region.allocate(GRANULE, GRANULE) {
                    Ok(slab) => {
                        // A slab the region just handed out is its own.
                        let pushed = copy.pool_push(slab);
                        debug_assert!(pushed, "a region slab outside the region");
                    }
                    Err(why) => {
                        // The driver's own words, where it refused: out of
                        // memory is not cured by a larger limit or reserve.
                        let driver = region
                            .driver_error_for(why)
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default();
                        // The advice the refusal's cause calls for (a review,
                        // 2026-12-08: every cause was told to raise the
                        // limit or the reserve).
                        let advice = match why {
                            Refusal::Limit => "ask for fewer, or raise HeapConfig::limit",
                            Refusal::NoAddressSpace => {
                                "ask for fewer, or raise HeapConfig::reserve"
                            }
                            _ => {
                                "the device has no memory for them: ask for fewer, or free device memory"
                            }
                        };
                        return Err(HostError::Config(format!(
                            "a pool of {slabs} slabs: the region mapped {mapped}, then refused \
                             ({why:?}{driver}); {advice}"
                        )));
                    }
                }
            }
        }
        // SAFETY: `state` is fresh device memory of `DeviceHeap`'s size that
        // no kernel can reach yet (no module links it).
        unsafe { device.write(state.addr(), copy.bytes()) }?;
        // SAFETY: `state` holds a configured `DeviceHeap` of this program's
        // layout, and is dropped after the registration (field order).
        let registered = unsafe { device.register_heap(state.addr()) }?;
        // SAFETY: `mailbox` holds `ports` zeroed (idle) ports and is dropped
        // after the registration (field order).
        let registration = unsafe {
            server::register(
                mailbox.host().cast::<Port>().cast_const(),
                ports,
                handler(
                    Arc::clone(&region),
                    Arc::clone(&counters),
                    config.limit,
                    config.headroom,
                    config.spill,
                ),
            )
        }
        .map_err(HostError::Server)?;
        Ok(Heap {
            registration,
            links: Mutex::new(Vec::new()),
            _registered: registered,
            state,
            hints,
            mailbox,
            region,
            counters,
            phases: Mutex::new(Phases::new()),
            mode: config.mode,
            pool_fallback: config.pool_fallback,
            keep: config.keep,
            launcher,
            failures_seen: AtomicU64::new(device.failed_launches()),
            device,
        })
    }

    /// Links `module` (the user's `Arc<cudarc::driver::CudaModule>`, an
    /// emulated `CudaModule`, or a `Module`) to this heap: checks its
    /// `WARPALLOC_HEAP_LAYOUT` against this program's `DeviceHeap`, then
    /// writes the heap's address into its `WARPALLOC_HEAP`. From then on its
    /// kernels allocate from this heap, on any stream, until the heap drops
    /// (which unlinks it). Several modules may share one heap, and a block
    /// one module's kernel allocated may be freed by another's. Linking a
    /// module twice does nothing; a module linked to another heap is
    /// refused. Synchronises the context first (see the module docs).
    pub fn link(&self, module: &impl AsModule) -> Result<(), HostError> {
        let module = module.as_module(&*self.device)?;
        self.quiesce()?;
        let global = check_layout(&*self.device, &*module)?;
        let mut links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        // One link's read and write at a time in the process: two heaps
        // linking one module from two threads cannot both find it free.
        let _linking = LINKING.lock().unwrap_or_else(PoisonError::into_inner);
        match read_link(&*self.device, global)? {
            0 => {}
            linked if linked == self.state.addr() => return Ok(()),
            other => return Err(HostError::LinkedElsewhere(other)),
        }
        write_link(&*self.device, global, self.state.addr())?;
        links.push(module);
        if self.device.info().emulated {
            warn_if_not_warpalloc();
        }
        Ok(())
    }

    /// Waits for every kernel of the context, then for the server to take
    /// the requests they left (a `Free` does not wait for its answer). A
    /// launch on a stream that failed since the last call (the emulated
    /// device; `Device::failed_launches`) left the heap as a failed
    /// `Heap::launch` leaves it, and the heap repairs itself as there
    /// (`Heap::repair`); the stream and the context report the failure (a
    /// review, 2026-12-08: only `Heap::launch` repaired, and a stream's
    /// next launch waited on the creations left until its watchdog).
    fn quiesce(&self) -> Result<(), HostError> {
        self.device.synchronize()?;
        self.wait_for_server()?;
        let failures = self.device.failed_launches();
        if self.failures_seen.swap(failures, Ordering::Relaxed) != failures {
            self.repair()?;
        }
        Ok(())
    }

    /// Waits for the server to take the requests the kernels left.
    fn wait_for_server(&self) -> Result<(), HostError> {
        self.registration
            .wait_idle(QUIESCE_TIMEOUT)
            .map_err(HostError::ServerTimeout)
    }

    /// A host copy of the device heap (the caller synchronised).
    fn read_device_heap(&self) -> Result<HeapCopy, HostError> {
        let mut copy = HeapCopy::zeroed();
        // SAFETY: the heap's own `DeviceHeap` in device memory, of the copy's
        // size; no kernel runs (the caller synchronised).
        unsafe { self.device.read(self.state.addr(), copy.bytes_mut()) }?;
        Ok(copy)
    }

    /// Writes a host copy back to the device heap (the caller synchronised).
    fn write_device_heap(&self, copy: &HeapCopy) -> Result<(), HostError> {
        // SAFETY: as in `read_device_heap`.
        unsafe { self.device.write(self.state.addr(), copy.bytes()) }
    }

    /// The device the heap is on.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The launcher of a heap made by [`Heap::new`] (for buffers:
    /// `alloc_zeroed`, `upload`, `read`); `None` for a heap made by
    /// [`Heap::attach`].
    pub fn launcher(&self) -> Option<&Launcher> {
        self.launcher.as_ref()
    }

    /// The launcher, to change its simulator settings (seed, workers).
    pub fn launcher_mut(&mut self) -> Option<&mut Launcher> {
        self.launcher.as_mut()
    }

    /// The heap's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Launches `args`' kernel through the heap's launcher on `grid` ×
    /// `block` and waits for it, and for the server to take the requests it
    /// left. First forgets a refusal that may have passed
    /// ([`Heap::forget_refusal`]). A heap made by [`Heap::attach`] has no launcher: launch with
    /// your own code instead (this returns `HostError::NoLauncher`).
    ///
    /// After the kernel it reads the heap's counts (for its snapshots) with
    /// no wait for the context's other streams: no other kernel that uses
    /// the heap may run meanwhile (its counts would be read half-written,
    /// which can report `HeapCorrupt` for a launch that ran well).
    ///
    /// # Safety
    /// As for `Kernel::run`: the parameters must be valid for the kernel.
    pub unsafe fn launch<K: Launch>(
        &mut self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: K,
    ) -> Result<LaunchReport, HostError> {
        let launcher = self.launcher.as_ref().ok_or(HostError::NoLauncher)?;
        self.forget_refusal()?;
        server::wake();
        // SAFETY: forwarded from the caller.
        let report = match unsafe { launcher.launch(grid, block, args) } {
            Ok(report) => report,
            Err(e) => {
                // The launch's error is what the caller needs; a repair
                // that fails too (a GPU context lost with the kernel) has
                // nothing to add to it.
                let _ = self.recover_from_failed_launch();
                return Err(e);
            }
        };
        self.wait_for_server()?;
        self.observe_out_of_memory()?;
        Ok(report)
    }

    /// After a launch that failed (a lane's panic, the simulator's
    /// watchdog): lanes stopped anywhere in the allocator may have left a
    /// slot being created, on which the next launch's searches waited for
    /// ever, and mailbox ports locked, which no lane will unlock. Gives up
    /// those creations (`DeviceHeap::abandon_creations`) and unlocks the
    /// ports, once the server has taken what the stopped lanes sent.
    /// What they held stays held: a leak, reported by [`Heap::check`], in
    /// place of a hang (reproduced on 2026-12-07: a launch after a panic
    /// amid growth ran until its watchdog).
    fn recover_from_failed_launch(&self) -> Result<(), HostError> {
        self.quiesce()?;
        self.repair()
    }

    /// [`Heap::recover_from_failed_launch`]'s repair, once the kernels
    /// ended and the server took their requests.
    fn repair(&self) -> Result<(), HostError> {
        let copy = self.read_device_heap()?;
        let abandoned = copy.abandon_creations();
        let locked = copy.mailbox().locked();
        if locked != 0 {
            // Bound again as it was: every port unlocked.
            let (ports, count) = copy.mailbox().ports();
            copy.mailbox().bind(ports, count);
        }
        if abandoned != 0 || locked != 0 {
            self.write_device_heap(&copy)?;
        }
        Ok(())
    }

    /// Clears the device's record of a refused slab when the host's last
    /// refusal may have been temporary (its headroom check, a driver
    /// error, an injected fault), so that the next malloc that needs a
    /// slab asks the host again instead of returning null at once. Returns
    /// whether there was such a refusal (and then synchronises the context
    /// first, see the module docs). [`Heap::launch`] calls this before each
    /// launch; on a heap whose kernels you launch yourself, call it before
    /// a launch. The device keeps one record, the last refusal's: when a
    /// temporary refusal came since the last call, it is cleared whatever
    /// refused last (a limit's too, which costs its next malloc one
    /// request to the host); with none, a refusal for the heap's limit or
    /// address space is kept — memory coming back (a large block freed, a
    /// slab emptied, `trim`) ends it on the device.
    ///
    /// On the emulated device it also repairs the heap after a launch on a
    /// stream that failed since (and then synchronises): such a launch's
    /// lanes, stopped anywhere in the allocator, may have left slab
    /// creations that the next launch would wait on until its watchdog
    /// (`Heap::launch` repairs after its own).
    pub fn forget_refusal(&self) -> Result<bool, HostError> {
        if self.device.failed_launches() != self.failures_seen.load(Ordering::Relaxed) {
            self.quiesce()?;
        }
        if !self
            .counters
            .temporary_refusal
            .swap(false, Ordering::Relaxed)
        {
            return Ok(false);
        }
        let forgotten = self.quiesce().and_then(|()| {
            // SAFETY: the 4-byte refusal record (`LAYOUT.refusal`, an
            // `AtomicU32`) of this heap's `DeviceHeap`, written while no
            // kernel runs (synchronised just now).
            unsafe {
                self.device
                    .write(self.state.addr() + LAYOUT.refusal, &0u32.to_ne_bytes())
            }
        });
        if forgotten.is_err() {
            // The device still holds the refusal: a later call tries again.
            self.counters
                .temporary_refusal
                .store(true, Ordering::Relaxed);
        }
        forgotten.map(|()| true)
    }

    /// Sets every `n`-th mapping to fail (0: none), for fault injection.
    pub fn fail_every(&self, n: u64) {
        lock(&self.region).fail_every(n);
    }

    /// The heap's figures, once every kernel of the context has ended
    /// (synchronises first; see the module docs).
    pub fn stats(&self) -> Result<HeapStats, HostError> {
        self.quiesce()?;
        let copy = self.read_device_heap()?;
        let region = lock(&self.region);
        self.observe(&copy, &region)?;
        let live = copy
            .census(&DeviceMemory {
                device: &*self.device,
                region: &region,
            })
            .map_err(|e| HostError::HeapCorrupt(e.to_string()))?;
        let device = copy.errors();
        Ok(HeapStats {
            region: region.stats(),
            device,
            traffic: copy.traffic(),
            live,
            rpc: RpcCounts {
                allocs: self.counters.allocs.load(Ordering::Relaxed),
                frees: self.counters.frees.load(Ordering::Relaxed),
                pings: self.counters.pings.load(Ordering::Relaxed),
            },
            classes: copy.class_counts(),
            pool: match self.mode {
                Mode::Pool { slabs } => Some(slabs),
                Mode::Rpc => None,
            },
            pool_fallback: self.pool_fallback,
            spill: spill_counts(&copy, &region),
        })
    }

    /// What the launches so far needed (synchronises first): the slabs
    /// each size class holds — the most it held at once, unless slabs were
    /// taken over (see [`HeapProfile`]); call it before a `trim` — and the
    /// most bytes of large blocks live at once. [`HeapConfig::pool_from`]
    /// turns it into a pool that serves the same launches with no RPC for
    /// a slab; with the `serde` feature it serialises, to be kept from one
    /// run for the next.
    pub fn profile(&self) -> Result<HeapProfile, HostError> {
        let stats = self.stats()?;
        // Slabs that left their class under memory pressure: taken over,
        // or given back by the device for a large block (a profile after a
        // give-back said 0 and under-counted the classes; a review,
        // 2026-12-07). A trim's are the caller's own doing.
        Ok(HeapProfile::from_counts(
            &stats.classes,
            stats
                .traffic
                .slabs_reclaimed
                .saturating_add(stats.traffic.slabs_given_back),
        ))
    }

    /// Checks the device heap's invariants (synchronises first): `Ok`, or
    /// the first violation.
    pub fn check(&self) -> Result<Result<(), &'static str>, HostError> {
        self.quiesce()?;
        let copy = self.read_device_heap()?;
        let region = lock(&self.region);
        Ok(copy.check(&DeviceMemory {
            device: &*self.device,
            region: &region,
        }))
    }

    /// Starts the peaks of the heap's memory over (`HeapStats::region`'s
    /// `peak_mapped_bytes` and `peak_in_use_bytes` become what is mapped
    /// and handed out now), so that the next ones are those of the launches
    /// that follow: a phase's, or a kernel's (`warpalloc stress` reports
    /// each kernel's peak beside the bytes its threads held).
    pub fn reset_peaks(&self) {
        lock(&self.region).reset_peaks();
    }

    /// Takes the device's empty slabs back (the slots that publish a slab
    /// with no live block), but the first [`HeapConfig::keep`] of each
    /// size class, and unmaps every mapped granule that is free
    /// (synchronises first). Returns the bytes unmapped. In pool mode the
    /// empty slabs go back to the pool: the pool's slabs stay mapped.
    pub fn trim(&mut self) -> Result<u64, HostError> {
        self.trim_keeping(self.keep)
    }

    /// [`Heap::trim`] with `keep` empty slabs kept per size class instead
    /// of [`HeapConfig::keep`] (0: every empty slab goes). The hints of a
    /// class that kept slabs, but for those that name a slab of the class
    /// with live blocks, name the kept slabs after it ([`Heap::spread`]),
    /// so that the class's next launch finds them first.
    pub fn trim_keeping(&mut self, keep: u32) -> Result<u64, HostError> {
        self.quiesce()?;
        let mut taken = Vec::new();
        let copy = self.read_device_heap()?;
        // The phase's peak, before its slabs go.
        self.observe(&copy, &lock(&self.region))?;
        // The hint table, read and written back only when slabs are kept.
        let mut hints = if keep == 0 {
            Vec::new()
        } else {
            self.read_hints()?
        };
        copy.take_empty(keep, &mut hints, |slab| taken.push(slab));
        if !hints.is_empty() {
            self.write_hints(&hints)?;
        }
        let mut region = lock(&self.region);
        if let Mode::Pool { slabs } = self.mode {
            // Back to the pool, up to its size (a pool with fallback
            // borrowed the rest from the host: they go back to it), device
            // memory first (spilled slabs go back to the host).
            taken.sort_by_key(|&slab| region.is_spilled(slab));
            let room = (slabs as usize).saturating_sub(copy.pool_len());
            let pooled: Vec<u64> = taken.drain(..room.min(taken.len())).collect();
            for slab in pooled {
                // One the pool refuses (no slab of the region: the device
                // heap is corrupt) goes to the region's refusal below, not
                // lost.
                if !copy.pool_push(slab) {
                    taken.push(slab);
                }
            }
        }
        self.write_device_heap(&copy)?;
        for slab in taken {
            // A refusal here would mean the device held a slab the region
            // never handed out; the region counts it.
            let _ = region.free(slab, GRANULE);
        }
        Ok(region.trim()?)
    }

    /// Spreads each size class's search streams over the class's empty
    /// slabs (synchronises first; nothing is given back): every stream
    /// whose hint names no slab of its class with live blocks is pointed at
    /// one of the class's empty slabs, the streams in turn, a word of the
    /// slab each — as [`Heap::warm_up`] and a trim that keeps slabs do.
    /// Between launches that allocate alike it undoes the crowding the
    /// last launch left (streams whose hints name one word of one slab):
    /// the next launch's groups meet less often.
    pub fn spread(&mut self) -> Result<(), HostError> {
        self.quiesce()?;
        let copy = self.read_device_heap()?;
        let mut hints = self.read_hints()?;
        copy.aim_hints(&mut hints);
        self.write_hints(&hints)
    }

    /// A copy of the hint table (the caller synchronised: no kernel runs).
    fn read_hints(&self) -> Result<Vec<u32>, HostError> {
        let mut hints = vec![0u32; self.hints.len() / 4];
        // SAFETY: the heap's hint table in device memory, of `hints`' size
        // in bytes; no kernel runs (the caller synchronised).
        unsafe {
            self.device
                .read(self.hints.addr(), bytemuck::cast_slice_mut(&mut hints))
        }?;
        Ok(hints)
    }

    /// Writes `hints` (from [`Heap::read_hints`]) back to the hint table.
    fn write_hints(&self, hints: &[u32]) -> Result<(), HostError> {
        // SAFETY: as in `read_hints`; `hints` is no longer than the table.
        unsafe {
            self.device.write(
                self.hints.addr(),
                bytemuck::cast_slice(&hints[..hints.len().min(self.hints.len() / 4)]),
            )
        }
    }

    /// Publishes, before a launch, the slabs `profile` (a run's
    /// [`Heap::profile`]) says each size class held, less those it holds
    /// now, as empty slabs of the class, and points the class's hints at
    /// them (synchronises first): the next launch finds them as a launch
    /// finds the slabs an earlier one emptied — put back to use in place,
    /// no slab created, no group waiting on a creation. The slabs come
    /// from the pool in pool mode (a dry pool asks the host only with
    /// `pool_fallback`), from the host in RPC mode. Stops at the first slab
    /// it cannot have (the pool dry, the host's refusal, a full slot
    /// table) and returns the slabs published: fewer than
    /// [`HeapProfile::slabs`] less those held says it stopped, and a
    /// refusal's reason (the limit, the headroom) is counted in
    /// [`HeapStats::region`] (`RegionStats::refused`). A driver that fails
    /// to map a slab (or a fault injected by [`Heap::fail_every`]) is an
    /// error, [`HostError::WarmUp`], with the slabs published before it
    /// left published (an `Ok` hid it: a review, 2026-12-07). A class
    /// the profile names with a block size that is no class's is passed
    /// over.
    pub fn warm_up(&mut self, profile: &HeapProfile) -> Result<u32, HostError> {
        self.quiesce()?;
        let copy = self.read_device_heap()?;
        let mut hints = self.read_hints()?;
        let mut now = copy.class_counts().slabs;
        let mut published = 0;
        let mut region = lock(&self.region);
        // The phase's state before the warm-up changes the heap (as `trim`
        // does): a first out-of-memory's snapshot and the peak are the
        // kernels', not the warm-up's slabs (a review, 2026-12-07).
        self.observe(&copy, &region)?;
        // Slabs the region hands out here: given back if a write fails, so
        // that the device heap (not written then) is left as it was.
        let mut fresh = Vec::new();
        // A driver's failure (or an injected one) that stopped it.
        let mut failed = None;
        let written = (|| -> Result<(), HostError> {
            'classes: for peak in &profile.classes {
                let Some(class) = class_of_block(peak.block) else {
                    continue;
                };
                // A class the profile names twice counts what it got.
                while now[class] < peak.slabs {
                    let pooled = match self.mode {
                        Mode::Pool { .. } => copy.pool_take(),
                        Mode::Rpc => None,
                    };
                    let slab = match pooled {
                        // The pool's links are the device's: a stray kernel
                        // write may name a granule the region never mapped,
                        // where the header write below would fault — or an
                        // address a run moved away from, mapped still but
                        // to memory that now serves another address (a live
                        // block's, say): only a live slab the region handed
                        // out (a review, 2026-12-07).
                        Some(slab) if !region.is_run(slab, GRANULE) => {
                            return Err(HostError::HeapCorrupt(format!(
                                "the slab pool names {slab:#x}, which is no slab the heap handed out"
                            )));
                        }
                        Some(slab) => slab,
                        None if self.mode == Mode::Rpc || self.pool_fallback => {
                            match region.allocate(GRANULE, GRANULE) {
                                Ok(slab) => {
                                    fresh.push(slab);
                                    slab
                                }
                                Err(why) => {
                                    failed = match why {
                                        Refusal::Driver => Some(
                                            region
                                                .driver_error_for(why)
                                                .unwrap_or("a driver call failed")
                                                .to_owned(),
                                        ),
                                        Refusal::InjectedFault => Some(
                                            "a fault injected on purpose (Heap::fail_every)"
                                                .to_owned(),
                                        ),
                                        _ => None,
                                    };
                                    break 'classes;
                                }
                            }
                        }
                        None => break 'classes,
                    };
                    let Some(slot) = copy.publish_empty(class, slab) else {
                        // No empty slot: the slab goes back where it came
                        // from.
                        if pooled.is_some() {
                            copy.pool_push(slab);
                        } else {
                            fresh.retain(|&s| s != slab);
                            let _ = region.free(slab, GRANULE);
                        }
                        break 'classes;
                    };
                    let geo = geometry(class);
                    let mut image = vec![0u8; HEADER_BYTES as usize + 4 * geo.words as usize];
                    image[..HEADER_BYTES as usize]
                        .copy_from_slice(&Header::new(geo, slot).to_bytes());
                    // SAFETY: the slab is mapped (the pool's, or the
                    // region's just now) and its header and bitfield lie in
                    // its first bytes; no kernel runs (synchronised above).
                    unsafe { self.device.write(slab, &image) }?;
                    now[class] += 1;
                    published += 1;
                }
            }
            copy.aim_hints(&mut hints);
            self.write_hints(&hints)?;
            self.write_device_heap(&copy)
        })();
        if let Err(e) = written {
            for slab in fresh {
                let _ = region.free(slab, GRANULE);
            }
            return Err(e);
        }
        match failed {
            Some(why) => Err(HostError::WarmUp { published, why }),
            None => Ok(published),
        }
    }

    /// Ends the current phase and begins one called `name` (synchronises
    /// first; see the module docs): the ended phase's snapshots are kept
    /// ([`Heap::snapshots`]), and the new phase's peaks, nulls and first
    /// refusal start from now — so each phase of a program (setup, a solver's
    /// steps, output) gets its own peak and its own first out-of-memory.
    /// The peaks of [`HeapStats::region`] start over too
    /// ([`Heap::reset_peaks`]). The first phase is called "start".
    pub fn mark_phase(&self, name: &str) -> Result<(), HostError> {
        self.quiesce()?;
        let copy = self.read_device_heap()?;
        let mut region = lock(&self.region);
        self.observe(&copy, &region)?;
        let mut phases = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
        let ended: Vec<Snapshot> = phases.current().cloned().collect();
        phases.done.extend(ended);
        phases.name = name.to_string();
        phases.base_nulls = copy.class_counts().nulls;
        phases.base_out_of_memory = copy.errors().out_of_memory;
        phases.out_of_memory = None;
        phases.peak = None;
        *self
            .counters
            .first_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        region.reset_peaks();
        Ok(())
    }

    /// The snapshots of every phase so far (synchronises first, and reads
    /// the heap: see [`crate::snapshot`]): for each phase, in order, the
    /// one at its first out-of-memory null (if it had one), then the one at
    /// its peak of mapped memory (if it mapped any). Each prints as a table
    /// with what ran out and what to do.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>, HostError> {
        self.quiesce()?;
        let copy = self.read_device_heap()?;
        self.observe(&copy, &lock(&self.region))?;
        let phases = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(phases
            .done
            .iter()
            .chain(phases.current())
            .cloned()
            .collect())
    }

    /// After a launch: reads the device's count of out-of-memory nulls (8
    /// bytes) and, when the phase had its first null, the whole heap for
    /// its snapshot — so `Heap::launch`'s users get the state right after
    /// the launch that ran out.
    fn observe_out_of_memory(&self) -> Result<(), HostError> {
        let base = {
            let phases = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
            if phases.out_of_memory.is_some() {
                return Ok(());
            }
            phases.base_out_of_memory
        };
        let mut word = [0u8; 8];
        // SAFETY: the error record's out-of-memory count, a `u64` of this
        // heap's `DeviceHeap`; the launch ended and the server is idle.
        unsafe {
            self.device.read(
                self.state.addr() + LAYOUT.errors + OUT_OF_MEMORY_OFFSET,
                &mut word,
            )
        }?;
        if u64::from_ne_bytes(word) == base {
            return Ok(());
        }
        let copy = self.read_device_heap()?;
        self.observe(&copy, &lock(&self.region))
    }

    /// Takes the phase's snapshots that are due from a read of the heap
    /// (`copy`, quiescent): the first out-of-memory one once the phase had
    /// a null, a peak one when its classes' slabs and live large blocks
    /// hold more than at the last.
    fn observe(&self, copy: &HeapCopy, region: &Region<Box<dyn Backing>>) -> Result<(), HostError> {
        let mut phases = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
        let stats = region.stats();
        let out_of_memory = copy
            .errors()
            .out_of_memory
            .saturating_sub(phases.base_out_of_memory);
        let counts = copy.class_counts();
        // Saturating: `large_bytes` is the device's count, which a stray
        // kernel write may have made anything.
        let held =
            (u64::from(saturating_sum(counts.slabs)) * GRANULE).saturating_add(counts.large_bytes);
        let oom_due = phases.out_of_memory.is_none() && out_of_memory != 0;
        let peak_due = held > phases.peak.as_ref().map_or(0, |p| p.held_bytes);
        if !oom_due && !peak_due {
            return Ok(());
        }
        let memory = DeviceMemory {
            device: &*self.device,
            region,
        };
        let classes = copy
            .class_census(&memory)
            .map_err(|e| HostError::HeapCorrupt(e.to_string()))?;
        // The device's null counts wrap (32 bits): the phase's are the
        // difference modulo 2^32, not 0 once a counter passed its base by
        // wrapping (a review, 2026-12-07).
        let nulls: [u32; CLASS_COUNT] =
            std::array::from_fn(|c| counts.nulls[c].wrapping_sub(phases.base_nulls[c]));
        let mut large = Vec::new();
        copy.for_each_large(|_, bytes| large.push(bytes));
        let refusal = self
            .counters
            .first_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let reading = Reading {
            phase: &phases.name,
            classes: &classes,
            nulls: &nulls,
            large: &large,
            pool_slabs: copy.pool_len() as u64,
            pool: match self.mode {
                Mode::Pool { slabs } => Some(slabs),
                Mode::Rpc => None,
            },
            pool_fallback: self.pool_fallback,
            held_bytes: held,
            region: &stats,
            out_of_memory,
            refusal,
        };
        let oom = oom_due.then(|| Snapshot::take(Moment::FirstOutOfMemory, &reading));
        let peak = peak_due.then(|| Snapshot::take(Moment::Peak, &reading));
        if oom.is_some() {
            phases.out_of_memory = oom;
        }
        if peak.is_some() {
            phases.peak = peak;
        }
        Ok(())
    }

    /// The region's base and length (where every device allocation lies).
    pub fn region(&self) -> (u64, u64) {
        let r = lock(&self.region);
        (r.base(), r.len())
    }

    /// The device address of the heap's `DeviceHeap` (what a linked module's
    /// `WARPALLOC_HEAP` holds).
    pub fn device_heap(&self) -> u64 {
        self.state.addr()
    }

    /// The mailbox's ports, as the host sees them (for tests and benchmarks
    /// that talk to the server directly).
    pub fn ports(&self) -> *const Port {
        self.mailbox.host().cast::<Port>().cast_const()
    }

    /// The mailbox's ports, as the device addresses them.
    pub fn device_ports(&self) -> u64 {
        self.mailbox.device()
    }
}

/// Held across a link's read and write of a module's `WARPALLOC_HEAP`
/// (`Heap::link`, and the unlink of a heap's drop).
static LINKING: Mutex<()> = Mutex::new(());

impl Drop for Heap {
    fn drop(&mut self) {
        // Kernels may still use the heap: wait for them (an error here, such
        // as a kernel that faulted, leaves nothing better to do than go on:
        // the context is broken either way). Then no linked module may reach
        // the heap's memory any more.
        let _ = self.quiesce();
        let links = std::mem::take(self.links.get_mut().unwrap_or_else(PoisonError::into_inner));
        let _linking = LINKING.lock().unwrap_or_else(PoisonError::into_inner);
        for module in links {
            // Unlinked only while it names this heap. A failure means the
            // context is gone, and the module with it.
            if let Ok(global) = module.global(HEAP_SYMBOL)
                && read_link(&*self.device, global).is_ok_and(|at| at == self.state.addr())
            {
                let _ = write_link(&*self.device, global, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::{GRANULE, HostEmulated, Refusal, RegionConfig};

    /// An `Alloc` the region refused, served once the handler served the
    /// frees pending on the mailbox's other ports, counts no refusal; one
    /// that no free turns around counts one, and so does one that the frees
    /// did not turn around (two tries, one request).
    #[test]
    fn a_refusal_the_pending_frees_turn_around_is_not_counted() {
        let backing: Box<dyn Backing> =
            Box::new(HostEmulated::new(8 * GRANULE).expect("emulated device"));
        let region: SharedRegion = Arc::new(Mutex::new(
            Region::new(
                backing,
                RegionConfig {
                    reserve: Some(8 * GRANULE),
                    limit: Some(GRANULE),
                    ..RegionConfig::default()
                },
            )
            .expect("region"),
        ));
        let held = lock(&region)
            .allocate(GRANULE, GRANULE)
            .expect("the limit's granule");
        let serve = handler(
            Arc::clone(&region),
            Arc::new(Counters::default()),
            Some(GRANULE),
            0,
            false,
        );
        let alloc = Request::Alloc {
            bytes: GRANULE,
            align: GRANULE,
        };
        let pending = Arc::clone(&region);
        let reply = serve(alloc, &mut || lock(&pending).free(held, GRANULE).is_ok());
        assert!(matches!(reply, Reply::Alloc(Ok(_))), "{reply:?}");
        assert_eq!(lock(&region).stats().refused(Refusal::Limit), 0);
        let reply = serve(alloc, &mut || false);
        assert!(matches!(reply, Reply::Alloc(Err(_))), "{reply:?}");
        assert_eq!(lock(&region).stats().refused(Refusal::Limit), 1);
        // Frees were pending, but too few: the second try is refused too.
        let two = Request::Alloc {
            bytes: 2 * GRANULE,
            align: GRANULE,
        };
        let reply = serve(two, &mut || true);
        assert!(matches!(reply, Reply::Alloc(Err(_))), "{reply:?}");
        assert_eq!(lock(&region).stats().refused(Refusal::Limit), 2);
    }
}
