//! The host ABI of a device heap: what the host writes before launches (the
//! configuration), what it reads between them (the error record and the
//! counters), and the layout that both sides must agree on.
//!
//! ```text
//!   module global WARPALLOC_HEAP: HeapLink ──► DeviceHeap (repr(C)), in
//!   (8 bytes: the heap's address, 0 = none)     device memory the host's
//!                                                Heap allocated
//!   ┌──────────────┬─────────────┬──────────┬─────────┬──────┬───────┬─────┐
//!   │ DeviceConfig │ ErrorRecord │ Counters │ Mailbox │ pool │ slots │ ... │
//!   └──────────────┴─────────────┴──────────┴─────────┴──────┴───────┴─────┘
//!   LAYOUT: the offset of each part, the size and the alignment; a module
//!   also carries its own copy as the global `WARPALLOC_HEAP_LAYOUT`
//!   (`Layout::words`), which the host compares with its own before it
//!   touches the heap.
//! ```
//!
//! The host never reads or writes these parts by offset: it copies the whole
//! heap through its device interface, calls [`DeviceHeap`]'s own methods on
//! the copy, and writes it back. The layout exists so that a host and a
//! module built from different sources refuse each other instead of
//! corrupting memory.
//!
//! [`DeviceHeap`]: crate::DeviceHeap

use crate::simt;
use crate::simt::Scope;
use crate::size_class::CLASS_COUNT;
use crate::sync::{AtomicU32, AtomicU64, Ordering, fence};

/// The module global that links a module to its heap (a [`HeapLink`]).
pub const HEAP_SYMBOL: &str = "WARPALLOC_HEAP";
/// The module global that holds the layout the module was built with.
pub const LAYOUT_SYMBOL: &str = "WARPALLOC_HEAP_LAYOUT";

/// A module's link to its heap: the device address of the `DeviceHeap` its
/// kernels allocate from, or 0 (every allocation returns null). The host's
/// `Heap` writes it when it links the module and clears it when the heap
/// drops, never while a kernel of the module runs; so several modules can
/// share one heap, and a pointer from one module's kernel may be freed by
/// another's.
#[repr(C, align(8))]
pub struct HeapLink {
    heap: core::cell::UnsafeCell<u64>,
}

const _: () = assert!(core::mem::size_of::<HeapLink>() == 8);

// SAFETY: the host writes the word only while no kernel of the module runs;
// kernels only read it.
unsafe impl Sync for HeapLink {}

impl HeapLink {
    /// No heap linked.
    pub const fn unlinked() -> HeapLink {
        HeapLink {
            heap: core::cell::UnsafeCell::new(0),
        }
    }

    /// The linked heap's address (0: none). A plain load: the host writes
    /// the word between launches only, so a kernel sees one value
    /// throughout.
    #[inline(always)]
    pub fn address(&self) -> u64 {
        // SAFETY: a plain read of a word nothing writes during a launch
        // (the type's contract).
        unsafe { *self.heap.get() }
    }
}

/// How a heap gets system memory (slabs and large blocks).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// None bound: every request fails (malloc returns null).
    Unbound = 0,
    /// The host's RPC server, over the mailbox: slabs and large blocks are
    /// mapped on demand.
    Rpc = 2,
    /// Slabs from a pool the host mapped before launch (a lock-free stack
    /// on the device, no RPC on the slab path); large blocks still from the
    /// RPC server.
    Pool = 3,
    /// The pool first, and the RPC server's slabs once it is dry
    /// (`HeapConfig::pool_fallback`): no null while the host has memory.
    PoolThenRpc = 4,
}

impl ProviderKind {
    /// The kind stored as `raw`, or `Unbound` for an unknown value.
    pub fn from_raw(raw: u32) -> ProviderKind {
        match raw {
            2 => ProviderKind::Rpc,
            3 => ProviderKind::Pool,
            4 => ProviderKind::PoolThenRpc,
            _ => ProviderKind::Unbound,
        }
    }
}

/// What the host configures before launches. Atomics, so that device code
/// reads what the host wrote (never a folded constant).
#[repr(C)]
#[derive(Debug)]
pub struct DeviceConfig {
    pub(crate) slot_count: AtomicU32,
    pub(crate) provider: AtomicU32,
    pub(crate) region_base: AtomicU64,
    pub(crate) region_len: AtomicU64,
    /// Search streams per class (a power of two, ≤ `heap::MAX_STREAMS`).
    pub(crate) streams: AtomicU32,
    _reserved: AtomicU32,
    /// The hint table's device address: `CLASS_COUNT × streams` words,
    /// which the host allocates beside the heap (0: none, an unbound heap).
    pub(crate) hints: AtomicU64,
}

impl DeviceConfig {
    /// An unbound configuration (all zero).
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        DeviceConfig {
            slot_count: AtomicU32::new(0),
            provider: AtomicU32::new(0),
            region_base: AtomicU64::new(0),
            region_len: AtomicU64::new(0),
            streams: AtomicU32::new(0),
            _reserved: AtomicU32::new(0),
            hints: AtomicU64::new(0),
        }
    }
}

/// A heap's configuration as plain values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigValues {
    /// Slots of the slot table in use (1..=MAX_SLOTS; 0: unbound heap).
    pub slot_count: u32,
    /// How the heap gets memory.
    pub provider: u32,
    /// Ports of the RPC mailbox.
    pub port_count: u32,
    /// Start of the heap's region.
    pub region_base: u64,
    /// Bytes of the region (≤ MAX_REGION, and ending below
    /// `guard::SLOT_ADDR_LIMIT`).
    pub region_len: u64,
    /// Device address of the RPC mailbox's first port.
    pub mailbox: u64,
    /// Search streams per class: how many hints each size class keeps, one
    /// per group of resident warps (`heap::stream_count_for`); a power of
    /// two, 1..=`heap::MAX_STREAMS`.
    pub streams: u32,
    /// Device address of the hint table: [`crate::heap::hint_table_bytes`]
    /// of `streams`, zeroed, 4-byte aligned (0: none — the heap is then
    /// unbound, whatever `slot_count` says).
    pub hints: u64,
}

impl ConfigValues {
    /// The values with every field in range: slots 1..=MAX_SLOTS (0 stays 0,
    /// an unbound heap, and so does a heap with no hint table or no
    /// stream), streams a power of two, rounded down (the host sized the
    /// hint table for what it wrote: rounded up, 3 streams indexed a
    /// fourth's hints past its end; a review, 2026-12-07) and at most
    /// MAX_STREAMS, ports ≤ MAX_PORTS, region ≤
    /// MAX_REGION and ending below `guard::SLOT_ADDR_LIMIT` (a slot names
    /// its slab in 32 bits; no GPU address comes near it), an unknown
    /// provider as `Unbound`.
    pub fn clamped(self) -> ConfigValues {
        use crate::heap::{MAX_REGION, MAX_SLOTS};
        ConfigValues {
            slot_count: if self.slot_count == 0 || self.hints == 0 || self.streams == 0 {
                0
            } else {
                self.slot_count.min(MAX_SLOTS as u32)
            },
            provider: ProviderKind::from_raw(self.provider) as u32,
            streams: match self.streams {
                0 => 1,
                n => (1 << n.ilog2()).min(crate::heap::MAX_STREAMS as u32),
            },
            port_count: self.port_count.min(crate::rpc::wire::MAX_PORTS as u32),
            region_len: self
                .region_len
                .min(MAX_REGION)
                .min(crate::guard::SLOT_ADDR_LIMIT.saturating_sub(self.region_base)),
            ..self
        }
    }
}

/// Bytes of a kernel's name that an [`ErrorRecord`] keeps: a longer name
/// is cut ([`KernelName::is_cut`]).
pub const KERNEL_NAME_BYTES: usize = 48;
const _: () = assert!(KERNEL_NAME_BYTES.is_multiple_of(8));

/// Bad frees and failed allocations, as counted on the device.
///
/// ```text
///   0            8              16             24              32
///   ┌────────────┬──────────────┬──────────────┬───────────────┐
///   │ double     │ invalid      │ out of       │ first bad     │
///   │ frees      │ frees        │ memory       │ address       │
///   ├────────────┼──────────────┼──────────────┼───────────────┤ 32
///   │ first bad  │ first bad    │ its kernel's │ its kernel's  │
///   │ place      │ grid         │ name: length │ name: bytes   │
///   └────────────┴──────────────┴──────────────┴───────────────┘
///                                        56 + KERNEL_NAME_BYTES = 104
/// ```
///
/// The first bad free is the one whose lane swapped `first_bad_address`
/// from 0; that lane writes the place (block above 32 bits, thread
/// below) and the grid (`simt::grid_id`) next, and, when its kernel ends
/// ([`crate::kernel_ended`], which `kernel!` calls), the kernel's name —
/// a GPU's device code knows its kernel only there. Invariants: `length ≠
/// 0 ⇒ first bad address ≠ 0`; the name is written once, by one lane of
/// the launch the record names (the one whose compare-and-swap took the
/// length from 0), and is that launch's kernel's.
#[repr(C)]
#[derive(Debug)]
pub struct ErrorRecord {
    pub(crate) double_frees: AtomicU64,
    pub(crate) invalid_frees: AtomicU64,
    pub(crate) out_of_memory: AtomicU64,
    pub(crate) first_bad_address: AtomicU64,
    /// Where the first bad free ran: its block (linear) above 32 bits, its
    /// thread in the block (linear) below; written by the lane whose
    /// address became `first_bad_address`.
    pub(crate) first_bad_place: AtomicU64,
    /// The launch the first bad free ran in (`simt::grid_id`), written
    /// with the place.
    pub(crate) first_bad_grid: AtomicU64,
    /// The length in bytes of its kernel's name (0: not known), written
    /// after the name.
    pub(crate) first_bad_kernel_len: AtomicU64,
    /// The name's first [`KERNEL_NAME_BYTES`] bytes, zero padded.
    pub(crate) first_bad_kernel: NameBytes,
}

/// The bytes of an [`ErrorRecord`]'s kernel name: plain bytes, written by
/// one lane (the one whose compare-and-swap took the length from 0) before
/// it stores the length, read only after the length is seen
/// (`snapshot`, with an acquire fence).
#[repr(transparent)]
pub struct NameBytes(core::cell::UnsafeCell<[u8; KERNEL_NAME_BYTES]>);

// SAFETY: one lane writes the bytes, once (the compare-and-swap on the
// length elects it), and a reader reads them only after it has seen the
// length that lane stores after them, through a release/acquire fence pair.
unsafe impl Sync for NameBytes {}

/// The length word while the elected lane writes the name.
const NAME_BEING_WRITTEN: u64 = u64::MAX;

impl core::fmt::Debug for NameBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("NameBytes")
    }
}

const _: () = assert!(core::mem::size_of::<ErrorRecord>() == 7 * 8 + KERNEL_NAME_BYTES);

/// A kernel's name as an [`ErrorRecord`] keeps it: its first
/// [`KERNEL_NAME_BYTES`] bytes (a longer one is cut; `Display` then ends
/// it with "…").
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KernelName {
    bytes: [u8; KERNEL_NAME_BYTES],
    len: u64,
}

impl KernelName {
    /// The name as the record kept it: its first bytes, up to the last
    /// whole character.
    pub fn as_str(&self) -> &str {
        let kept = &self.bytes[..(self.len as usize).min(KERNEL_NAME_BYTES)];
        match core::str::from_utf8(kept) {
            Ok(name) => name,
            Err(e) => core::str::from_utf8(&kept[..e.valid_up_to()]).unwrap_or_default(),
        }
    }

    /// Whether the name was longer than the record keeps.
    pub fn is_cut(&self) -> bool {
        self.len > KERNEL_NAME_BYTES as u64
    }
}

impl core::fmt::Display for KernelName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())?;
        if self.is_cut() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl core::fmt::Debug for KernelName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Where an [`ErrorRecord`]'s count of out-of-memory nulls lies in it (a
/// `u64`, bytes from `Layout::errors`): what the host reads after a launch
/// to see whether it had a null.
pub const OUT_OF_MEMORY_OFFSET: u64 = core::mem::offset_of!(ErrorRecord, out_of_memory) as u64;

/// A snapshot of an [`ErrorRecord`]. Prints the address in hex.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Errors {
    /// Frees of blocks that were already free (nothing was changed).
    pub double_frees: u64,
    /// Frees of pointers the heap never handed out (nothing was changed).
    pub invalid_frees: u64,
    /// Allocations that returned null for want of memory.
    pub out_of_memory: u64,
    /// The first pointer of a bad free (0: none).
    pub first_bad_address: u64,
    /// The block (linear index in the grid) of the first bad free.
    pub first_bad_block: u32,
    /// The thread (linear index in its block) of the first bad free.
    pub first_bad_thread: u32,
    /// The kernel of the first bad free, when it was defined with
    /// `kernel!` (or called [`crate::kernel_ended`] last) and has ended.
    pub first_bad_kernel: Option<KernelName>,
}

impl core::fmt::Debug for Errors {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Errors")
            .field("double_frees", &self.double_frees)
            .field("invalid_frees", &self.invalid_frees)
            .field("out_of_memory", &self.out_of_memory)
            .field(
                "first_bad_address",
                &format_args!("{:#x}", self.first_bad_address),
            )
            .field("first_bad_block", &self.first_bad_block)
            .field("first_bad_thread", &self.first_bad_thread)
            .field("first_bad_kernel", &self.first_bad_kernel)
            .finish()
    }
}

impl core::fmt::Display for Errors {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} double frees, {} invalid frees, {} out-of-memory nulls",
            self.double_frees, self.invalid_frees, self.out_of_memory
        )?;
        if self.first_bad_address != 0 {
            write!(
                f,
                ", the first bad free of {:#x} by block {} thread {}",
                self.first_bad_address, self.first_bad_block, self.first_bad_thread
            )?;
            if let Some(kernel) = self.first_bad_kernel {
                write!(f, " of kernel `{kernel}`")?;
            }
        }
        Ok(())
    }
}

/// The calling lane's block (linear) above 32 bits, its thread in the
/// block (linear) below.
#[inline(always)]
fn place() -> u64 {
    (simt::block_linear() << 32) | u64::from(simt::thread_linear())
}

impl ErrorRecord {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        ErrorRecord {
            double_frees: AtomicU64::new(0),
            invalid_frees: AtomicU64::new(0),
            out_of_memory: AtomicU64::new(0),
            first_bad_address: AtomicU64::new(0),
            first_bad_place: AtomicU64::new(0),
            first_bad_grid: AtomicU64::new(0),
            first_bad_kernel_len: AtomicU64::new(0),
            first_bad_kernel: NameBytes(core::cell::UnsafeCell::new([0; KERNEL_NAME_BYTES])),
        }
    }

    /// Counts a bad free of `addr` in `counter` and keeps the first address,
    /// with the block, thread and launch that freed it (its kernel's name
    /// follows when the kernel ends: `kernel_ended`).
    pub(crate) fn record(&self, counter: &AtomicU64, addr: u64) {
        counter.add(1);
        if self.first_bad_address.compare_exchange(0, addr).is_ok() {
            self.first_bad_place.store(place(), Ordering::Relaxed);
            self.first_bad_grid
                .store(simt::grid_id(), Ordering::Relaxed);
        }
    }

    /// The calling lane's kernel, `name`, ends: if the lane made the first
    /// bad free this record keeps, the record gets the name. One load a
    /// lane otherwise (every lane of the launch that made it: a few more).
    /// The lane's own earlier stores (`record`) are visible to it, so the
    /// lane that made the free always finds itself.
    #[inline(always)]
    pub(crate) fn kernel_ended(&self, name: &str) {
        if self.first_bad_grid.load(Ordering::Relaxed) == simt::grid_id() {
            self.name_first_bad(name);
        }
    }

    /// [`ErrorRecord::kernel_ended`] in the launch that made the first bad
    /// free: the lane it names writes the name, then its length. The
    /// writer is the lane whose compare-and-swap took the length from 0 to
    /// [`NAME_BEING_WRITTEN`]: a lane of the launch that read the new grid
    /// before the new place (two relaxed stores) may take itself for the
    /// lane the record names, but it is of the same kernel, and only one
    /// lane writes.
    #[cold]
    #[inline(never)]
    fn name_first_bad(&self, name: &str) {
        if self.first_bad_address.load(Ordering::Relaxed) == 0
            || self.first_bad_place.load(Ordering::Relaxed) != place()
            || self
                .first_bad_kernel_len
                .compare_exchange(0, NAME_BEING_WRITTEN)
                .is_err()
        {
            return;
        }
        // Byte by byte, in a loop that is not unrolled (its index passes
        // through `opaque_u32`): packed into words, or unrolled, the copy
        // held registers that every allocating kernel paid for (2 more on
        // sm_75, and on sm_80's `free_only`; ptxas, 2026-12-05).
        let to = self.first_bad_kernel.0.get().cast::<u8>();
        let bytes = name.as_bytes();
        let n = bytes.len().min(KERNEL_NAME_BYTES) as u32;
        let mut i = 0;
        while i < n {
            // SAFETY: `i < KERNEL_NAME_BYTES`; this lane is the one writer
            // (its compare-and-swap took the length from 0), and readers
            // read the bytes only after they see the length this lane
            // stores last (`snapshot`).
            unsafe { to.add(i as usize).write(bytes[i as usize]) };
            i = simt::opaque_u32(i + 1);
        }
        // ORDERING: release (gpu): the name's bytes happen-before a read
        // that sees the length; pairs with the acquire fence in `snapshot`.
        fence(Ordering::Release, Scope::Gpu);
        self.first_bad_kernel_len
            .store(name.len() as u64, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> Errors {
        Errors {
            double_frees: self.double_frees.load(Ordering::Relaxed),
            invalid_frees: self.invalid_frees.load(Ordering::Relaxed),
            out_of_memory: self.out_of_memory.load(Ordering::Relaxed),
            first_bad_address: self.first_bad_address.load(Ordering::Relaxed),
            first_bad_block: (self.first_bad_place.load(Ordering::Relaxed) >> 32) as u32,
            first_bad_thread: self.first_bad_place.load(Ordering::Relaxed) as u32,
            first_bad_kernel: match self.first_bad_kernel_len.load(Ordering::Relaxed) {
                0 | NAME_BEING_WRITTEN => None,
                len => {
                    // ORDERING: acquire (gpu): pairs with the release fence
                    // in `name_first_bad` before the length we read: the
                    // name's bytes are visible.
                    fence(Ordering::Acquire, Scope::Gpu);
                    Some(KernelName {
                        // SAFETY: the one writer wrote the bytes before the
                        // length we read (ordered by the fences above) and
                        // writes them no more.
                        bytes: unsafe { self.first_bad_kernel.0.get().read() },
                        len,
                    })
                }
            },
        }
    }
}

/// Device-side counters of slab and block traffic.
#[repr(C)]
#[derive(Debug)]
pub struct Counters {
    pub(crate) slabs_from_provider: AtomicU64,
    pub(crate) slabs_reclaimed: AtomicU64,
    pub(crate) slabs_revived: AtomicU64,
    pub(crate) slabs_to_provider: AtomicU64,
    pub(crate) slabs_given_back: AtomicU64,
    pub(crate) large_allocations: AtomicU64,
    pub(crate) large_frees: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Slabs obtained from the provider (the RPC server or the pool).
    pub slabs_from_provider: u64,
    /// Empty slabs taken over by a claim for another slot (no host).
    pub slabs_reclaimed: u64,
    /// Empty slabs put back to use by their own class (a malloc whose lock
    /// found no reference held). A lower bound: when another class's scan
    /// holds a reference to the empty slab for a moment (it locks, sees
    /// the wrong class and lets go), the revival is not counted.
    pub slabs_revived: u64,
    /// Empty slabs given back to the provider (a trim, or the device's own
    /// give-back below).
    pub slabs_to_provider: u64,
    /// Of those, the empty slabs the device gave back itself, while a
    /// kernel ran, to make room for a large block the host refused: slabs
    /// that left their class under memory pressure (a profile taken after
    /// counts them with the takeovers, `warpalloc::HeapProfile`).
    pub slabs_given_back: u64,
    /// Large blocks allocated.
    pub large_allocations: u64,
    /// Large blocks freed.
    pub large_frees: u64,
}

impl Traffic {
    /// Slabs put to use plus large blocks handed out. Zero when the heap
    /// served nothing; a heap with no published slab (a trimmed one) that
    /// serves a block counts at least one (a slab from the provider or a
    /// large block: both counted exactly). Revivals may go uncounted
    /// (`slabs_revived`), so slabs already published can serve with none.
    pub fn served(&self) -> u64 {
        // Saturating: the counters are device memory a stray kernel write
        // could set to anything (a review, 2026-12-07).
        self.slabs_from_provider
            .saturating_add(self.slabs_reclaimed)
            .saturating_add(self.slabs_revived)
            .saturating_add(self.large_allocations)
    }

    /// The traffic since `earlier` (counters only grow; a counter smaller
    /// than `earlier`'s, from another heap, gives 0).
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            slabs_from_provider: self
                .slabs_from_provider
                .saturating_sub(earlier.slabs_from_provider),
            slabs_reclaimed: self.slabs_reclaimed.saturating_sub(earlier.slabs_reclaimed),
            slabs_revived: self.slabs_revived.saturating_sub(earlier.slabs_revived),
            slabs_to_provider: self
                .slabs_to_provider
                .saturating_sub(earlier.slabs_to_provider),
            slabs_given_back: self
                .slabs_given_back
                .saturating_sub(earlier.slabs_given_back),
            large_allocations: self
                .large_allocations
                .saturating_sub(earlier.large_allocations),
            large_frees: self.large_frees.saturating_sub(earlier.large_frees),
        }
    }
}

impl Counters {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Counters {
            slabs_from_provider: AtomicU64::new(0),
            slabs_reclaimed: AtomicU64::new(0),
            slabs_revived: AtomicU64::new(0),
            slabs_to_provider: AtomicU64::new(0),
            slabs_given_back: AtomicU64::new(0),
            large_allocations: AtomicU64::new(0),
            large_frees: AtomicU64::new(0),
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> Traffic {
        Traffic {
            slabs_from_provider: self.slabs_from_provider.load(Ordering::Relaxed),
            slabs_reclaimed: self.slabs_reclaimed.load(Ordering::Relaxed),
            slabs_revived: self.slabs_revived.load(Ordering::Relaxed),
            slabs_to_provider: self.slabs_to_provider.load(Ordering::Relaxed),
            slabs_given_back: self.slabs_given_back.load(Ordering::Relaxed),
            large_allocations: self.large_allocations.load(Ordering::Relaxed),
            large_frees: self.large_frees.load(Ordering::Relaxed),
        }
    }
}

/// Device-side counts by size class, for a dry pool's report and a run's
/// profile (`warpalloc::HeapProfile`): the lanes each class gave null for
/// want of memory, and the large blocks' bytes live and at most. Changed
/// only where a malloc fails or a large block comes or goes: never on the
/// path of a malloc that finds room or of a free of a block of a slab.
/// (The slabs each class holds are read from the slot table, whose words
/// name their classes: counting them where a slab is published or taken
/// over cost every malloc kernel 2 to 8 registers, ptxas 2026-12-05.)
#[repr(C)]
#[derive(Debug)]
pub struct ClassCounters {
    pub(crate) nulls: [AtomicU32; CLASS_COUNT],
    pub(crate) large_bytes: AtomicU64,
    pub(crate) peak_large_bytes: AtomicU64,
}

/// A snapshot of [`ClassCounters`] and of the slabs each class holds, by
/// class index ([`size_class::geometry`](crate::size_class::geometry)
/// names each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassCounts {
    /// Slabs each class holds now (published, empty ones included).
    pub slabs: [u32; CLASS_COUNT],
    /// Lanes whose malloc of the class returned null for want of memory.
    pub nulls: [u32; CLASS_COUNT],
    /// Bytes of large blocks live now.
    pub large_bytes: u64,
    /// The most bytes of large blocks live at once.
    pub peak_large_bytes: u64,
}

impl Default for ClassCounts {
    fn default() -> Self {
        ClassCounts {
            slabs: [0; CLASS_COUNT],
            nulls: [0; CLASS_COUNT],
            large_bytes: 0,
            peak_large_bytes: 0,
        }
    }
}

impl ClassCounters {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        ClassCounters {
            nulls: [const { AtomicU32::new(0) }; CLASS_COUNT],
            large_bytes: AtomicU64::new(0),
            peak_large_bytes: AtomicU64::new(0),
        }
    }

    /// A lane's malloc of `class` returned null for want of memory.
    #[inline(always)]
    pub(crate) fn refused(&self, class: usize) {
        if let Some(nulls) = self.nulls.get(class) {
            nulls.add(1);
        }
    }

    /// A null of `class` that [`ClassCounters::refused`] counted and no
    /// caller saw (a shrinking `realloc` kept its block instead).
    pub(crate) fn forgive(&self, class: usize) {
        if let Some(nulls) = self.nulls.get(class) {
            nulls.fetch_sub(1);
        }
    }

    /// A large block of `bytes` was handed out.
    pub(crate) fn large(&self, bytes: u64) {
        self.peak_large_bytes
            .fetch_max(self.large_bytes.fetch_add(bytes).wrapping_add(bytes));
    }

    /// A large block of `bytes` was given back.
    pub(crate) fn large_freed(&self, bytes: u64) {
        self.large_bytes.fetch_sub(bytes);
    }

    /// The counts now, with the slabs each class holds (`slabs`, from the
    /// slot table).
    pub fn snapshot(&self, slabs: [u32; CLASS_COUNT]) -> ClassCounts {
        ClassCounts {
            slabs,
            nulls: core::array::from_fn(|i| self.nulls[i].load(Ordering::Relaxed)),
            large_bytes: self.large_bytes.load(Ordering::Relaxed),
            peak_large_bytes: self.peak_large_bytes.load(Ordering::Relaxed),
        }
    }
}

/// Where the parts of a [`DeviceHeap`](crate::DeviceHeap) lie (byte
/// offsets), its size and alignment, and the sizes of the types the host
/// shares with the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of the whole heap.
    pub size: u64,
    /// Its alignment.
    pub align: u64,
    /// The configuration.
    pub config: u64,
    /// The error record.
    pub errors: u64,
    /// The counters.
    pub counters: u64,
    /// The mailbox binding and its port locks.
    pub mailbox: u64,
    /// The slab pool.
    pub pool: u64,
    /// The slot table.
    pub slots: u64,
    /// The hint table's address (a `u64` in the configuration).
    pub hints: u64,
    /// The granule table.
    pub granules: u64,
    /// The empty-slot bitmap.
    pub empties: u64,
    /// The refusal record (a `u32`; 0: none), which the host clears when
    /// its last refusal may have been temporary.
    pub refusal: u64,
    /// Bytes of one RPC port (the mailbox's wire format).
    pub port_size: u64,
    /// Bytes of a slab.
    pub slab_size: u64,
}

/// Words of [`Layout::words`].
pub const LAYOUT_WORDS: usize = 15;
/// Word 0 of [`Layout::words`]: "WAHEAP" and a format number.
pub const LAYOUT_MAGIC: u64 = 0x5741_4845_4150_0007;

impl Layout {
    /// The layout as the words of the `WARPALLOC_HEAP_LAYOUT` global:
    /// [`LAYOUT_MAGIC`], then the fields in declaration order.
    pub const fn words(&self) -> [u64; LAYOUT_WORDS] {
        [
            LAYOUT_MAGIC,
            self.size,
            self.align,
            self.config,
            self.errors,
            self.counters,
            self.mailbox,
            self.pool,
            self.slots,
            self.hints,
            self.granules,
            self.empties,
            self.refusal,
            self.port_size,
            self.slab_size,
        ]
    }

    /// The layout in `words` (as a module's `WARPALLOC_HEAP_LAYOUT` holds
    /// it), or `None` when the magic word is wrong.
    pub fn from_words(w: &[u64; LAYOUT_WORDS]) -> Option<Layout> {
        (w[0] == LAYOUT_MAGIC).then_some(Layout {
            size: w[1],
            align: w[2],
            config: w[3],
            errors: w[4],
            counters: w[5],
            mailbox: w[6],
            pool: w[7],
            slots: w[8],
            hints: w[9],
            granules: w[10],
            empties: w[11],
            refusal: w[12],
            port_size: w[13],
            slab_size: w[14],
        })
    }

    /// The name and the two values of the first field where `self` and
    /// `other` differ.
    pub fn first_difference(&self, other: &Layout) -> Option<(&'static str, u64, u64)> {
        const NAMES: [&str; LAYOUT_WORDS] = [
            "magic",
            "size",
            "align",
            "config",
            "errors",
            "counters",
            "mailbox",
            "pool",
            "slots",
            "hints",
            "granules",
            "empties",
            "refusal",
            "port_size",
            "slab_size",
        ];
        let (a, b) = (self.words(), other.words());
        (0..LAYOUT_WORDS)
            .find(|&i| a[i] != b[i])
            .map(|i| (NAMES[i], a[i], b[i]))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::{ConfigValues, ErrorRecord, Errors};
    use crate::guard::SLOT_ADDR_LIMIT;
    use std::format;
    use std::string::ToString;

    #[test]
    fn a_region_ends_where_slot_words_can_name_its_slabs() {
        let region = |base, len| ConfigValues {
            region_base: base,
            region_len: len,
            ..ConfigValues::default()
        };
        // A GPU-like address: unchanged.
        let gpu = region(0x7f00_0000_0000, 1 << 30).clamped();
        assert_eq!(gpu.region_len, 1 << 30);
        // Running past the limit: cut at it; starting beyond it: empty.
        let past = region(SLOT_ADDR_LIMIT - (4 << 21), 16 << 21).clamped();
        assert_eq!(past.region_base + past.region_len, SLOT_ADDR_LIMIT);
        assert_eq!(region(SLOT_ADDR_LIMIT, 1 << 30).clamped().region_len, 0);
    }

    /// Streams index the hint table the host sized for them: never
    /// rounded up past it.
    #[test]
    fn streams_are_a_power_of_two_no_more_than_written() {
        let streams = |streams| {
            ConfigValues {
                streams,
                slot_count: 64,
                hints: 0x7f00_0000_0000,
                ..ConfigValues::default()
            }
            .clamped()
        };
        for (written, kept) in [(1, 1), (3, 2), (4, 4), (1000, 512), (u32::MAX, 8192)] {
            assert_eq!(streams(written).streams, kept, "{written}");
            assert_eq!(streams(written).slot_count, 64);
        }
        assert_eq!(streams(0).slot_count, 0, "no stream: unbound");
    }

    #[test]
    fn a_record_keeps_its_first_bad_free_s_kernel_and_cuts_a_long_name() {
        // Outside a launch: grid 0, block 0, thread 0 — the record's lane.
        let record = ErrorRecord::new();
        record.kernel_ended("before_any_bad_free");
        assert_eq!(record.snapshot().first_bad_kernel, None);
        record.record(&record.invalid_frees, 0x7f00_0000_0010);
        // 50 bytes: 47 of ASCII, a 2-byte character, one more byte.
        let long = "a_kernel_with_a_rather_long_name_for_the_recordéx";
        assert_eq!(long.len(), 50);
        record.kernel_ended(long);
        let kept = record.snapshot().first_bad_kernel.expect("a name");
        assert!(kept.is_cut());
        // 48 bytes would end inside the "é": the whole characters.
        assert_eq!(kept.as_str(), &long[..47]);
        assert_eq!(kept.to_string(), format!("{}…", &long[..47]));
        // Written once: a later end does not rename it.
        record.kernel_ended("another");
        assert_eq!(record.snapshot().first_bad_kernel, Some(kept));
    }

    #[test]
    fn error_records_print_addresses_in_hex() {
        let e = Errors {
            double_frees: 1,
            invalid_frees: 2,
            out_of_memory: 0,
            first_bad_address: 0x7f00_0020_0010,
            first_bad_block: 3,
            first_bad_thread: 17,
            first_bad_kernel: None,
        };
        assert!(format!("{e:?}").contains("first_bad_address: 0x7f0000200010"));
        assert_eq!(
            format!("{e}"),
            "1 double frees, 2 invalid frees, 0 out-of-memory nulls, the first bad free of \
             0x7f0000200010 by block 3 thread 17"
        );
    }
}
