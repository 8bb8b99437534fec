//! The device heap: all allocator state in one value, and the warp-cooperative
//! malloc and free paths over it.
//!
//! ```text
//!   DeviceHeap
//!   ├── config      slot count, cache limit, region, provider   (host-written)
//!   ├── slots[]     32 768 guards → slabs (64 GiB of 2 MiB slabs)
//!   ├── hints[]     per size class: the slot that served it last
//!   ├── chunks[]    per 2 MiB chunk of the region: FREE | SLAB(slot) |
//!   │               LARGE(slabs) | FREED — what `free` may touch
//!   ├── cache       released slabs kept for reuse (bounded, lock-free)
//!   ├── errors      double / invalid frees, first bad address, OOM count
//!   └── counters    slabs created, reused, released; large blocks
//! ```
//!
//! On the GPU the heap is the module global `WARPALLOC_HEAP`, configured by
//! the host through `cuModuleGetGlobal` before launch. In the simulator each
//! host-side heap owns its own `DeviceHeap` and binds it to the lanes of its
//! launches (`LaunchConfig::binding`), so tests run in parallel without
//! sharing one.
//!
//! # malloc, for the lanes of `lane_mask`
//! 1. `place`: a size class, a large block, or nothing (null).
//! 2. `find_slab`: each lane starts at its class's hint, then scans from a
//!    hash of the class; lanes aiming at the same slot form a `uniform`
//!    group whose leader locks the slot for all of them (one atomic); a group
//!    that claimed an empty slot gets a slab (cache, else provider), zeroes its
//!    bitfield together and publishes it. Lanes that got no room move on; the
//!    scan ends at the table's end (out of memory).
//! 3. `Slab::allocate`: the group's random walk over the bitfield.
//!
//! # free
//! The chunk table says whether the pointer's 2 MiB chunk is a live slab or
//! the head of a large block; anything else is an invalid free. Lanes freeing
//! into one slab take one reference for the group (so the slab cannot die
//! under them), clear their bits — a bit already clear is a double free,
//! counted, nothing changed — and give back the group's references plus one
//! per chunk freed. The release that reaches zero disposes of the slab.
//!
//! Invariants (`check` verifies them when the heap is quiescent):
//! * a published slot's slab has `header.slot == index`, its chunk-table
//!   entry is `SLAB(index)`, and `refs ≥ set bits`;
//! * a cached slab has every bit clear and a `FREED` chunk entry;
//! * every chunk the provider handed out is exactly one of: a published slab,
//!   a cached slab, a slab being created or disposed of, a live large block.

use crate::cache::SlabCache;
use crate::guard::{Guard, Lock, MAX_TRIES};
use crate::provider::ProviderKind;
use crate::simt;
use crate::simt::Scope;
use crate::size_class::{CLASS_COUNT, Placement, SLAB_SHIFT, SLAB_SIZE, geometry, place};
use crate::slab::Slab;
use crate::sync::{AtomicU32, AtomicU64, Ordering, fence};

/// Slots in the table: 32 768 × 2 MiB = 64 GiB of slabs.
pub const MAX_SLOTS: usize = 32_768;
/// The largest region a heap can manage.
pub const MAX_REGION: u64 = 64 << 30;
/// Chunk-table entries: one per 2 MiB of the largest region.
pub const REGION_CHUNKS: usize = (MAX_REGION >> SLAB_SHIFT) as usize;
/// Entries of the slab cache (its limit is configured up to this).
pub const MAX_CACHE: usize = 256;
/// The slab cache's default limit.
pub const DEFAULT_CACHE: u32 = 32;

const _: () = assert!(REGION_CHUNKS == MAX_SLOTS);
const _: () = assert!(MAX_SLOTS.is_power_of_two() && MAX_SLOTS <= 1 << 30);

// Chunk-table entry 0: nothing of ours.
/// Chunk-table tag: a live slab, `| slot`.
const CHUNK_SLAB: u32 = 1 << 31;
/// Chunk-table tag: the head of a live large block, `| slabs`.
const CHUNK_LARGE: u32 = 1 << 30;
/// Chunk-table entry: ours once, freed since (a free here is a double free).
const CHUNK_FREED: u32 = 1 << 29;
const CHUNK_PAYLOAD: u32 = CHUNK_FREED - 1;

const _: () = assert!(MAX_SLOTS as u32 <= CHUNK_PAYLOAD + 1);

/// `count` from a lock that claimed an empty slot: the group must create the
/// slab.
const FRESH: u64 = u64::MAX;
/// `count` from a lock whose claim found no memory.
const NO_MEMORY: u64 = u64::MAX - 1;
/// `count` from a lock of an empty slot the lane may not claim: move on.
const SKIP: u64 = u64::MAX - 2;
/// `count` from a lock of a slot being created: wait for it.
const CREATING: u64 = u64::MAX - 3;

/// What the host configures before launches. Atomics, so that device code
/// reads what the host wrote (never a folded constant); `repr(C)` so that a
/// host can write it into a GPU module's `WARPALLOC_HEAP` as the bytes of a
/// [`ConfigValues`].
#[repr(C)]
#[derive(Debug)]
pub struct DeviceConfig {
    slot_count: AtomicU32,
    cache_limit: AtomicU32,
    provider: AtomicU32,
    port_count: AtomicU32,
    region_base: AtomicU64,
    region_len: AtomicU64,
    mailbox: AtomicU64,
}

/// The values of a [`DeviceConfig`], as plain data with the same layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigValues {
    /// Slots of the slot table in use (1..=MAX_SLOTS; 0: unbound heap).
    pub slot_count: u32,
    /// Slabs the cache keeps (0..=MAX_CACHE).
    pub cache_limit: u32,
    /// A [`ProviderKind`] as `u32`.
    pub provider: u32,
    /// Ports of the RPC mailbox.
    pub port_count: u32,
    /// Start of the heap's region.
    pub region_base: u64,
    /// Bytes of the region (≤ MAX_REGION).
    pub region_len: u64,
    /// Device address of the RPC mailbox's first port.
    pub mailbox: u64,
}

impl ConfigValues {
    /// The values with every field in range: slots 1..=MAX_SLOTS (0 stays 0,
    /// an unbound heap), cache ≤ MAX_CACHE, ports ≤ MAX_PORTS, region ≤
    /// MAX_REGION.
    pub fn clamped(self) -> ConfigValues {
        ConfigValues {
            slot_count: if self.slot_count == 0 {
                0
            } else {
                self.slot_count.min(MAX_SLOTS as u32)
            },
            cache_limit: self.cache_limit.min(MAX_CACHE as u32),
            port_count: self.port_count.min(MAX_PORTS as u32),
            region_len: self.region_len.min(MAX_REGION),
            ..self
        }
    }
}

/// Where the parts a host reads or writes lie in a [`DeviceHeap`] (byte
/// offsets), for a heap that is a GPU module global.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The [`DeviceConfig`] (write a [`ConfigValues`] there).
    pub config: usize,
    /// The error record: four `u64`s, see [`Errors::from_words`].
    pub errors: usize,
    /// The counters: six `u64`s, see [`Traffic::from_words`].
    pub counters: usize,
    /// The pool's head (`u64`).
    pub pool_head: usize,
    /// The pool's next links (`u32` per region chunk).
    pub pool_next: usize,
    /// The slot table: [`MAX_SLOTS`] guards of 16 bytes (`ptr`, `refs`).
    pub slots: usize,
    /// The slab cache's entries: [`MAX_CACHE`] `u64`s.
    pub cache: usize,
    /// The whole heap.
    pub size: usize,
}

/// The layout of [`DeviceHeap`].
pub const LAYOUT: Layout = Layout {
    config: core::mem::offset_of!(DeviceHeap, config),
    errors: core::mem::offset_of!(DeviceHeap, errors),
    counters: core::mem::offset_of!(DeviceHeap, counters),
    pool_head: core::mem::offset_of!(DeviceHeap, pool_head),
    pool_next: core::mem::offset_of!(DeviceHeap, pool_next),
    slots: core::mem::offset_of!(DeviceHeap, slots),
    cache: core::mem::offset_of!(DeviceHeap, cache),
    size: core::mem::size_of::<DeviceHeap>(),
};

const _: () = assert!(core::mem::size_of::<Guard>() == 16);
const _: () = assert!(core::mem::size_of::<ErrorRecord>() == 4 * 8);
const _: () = assert!(core::mem::size_of::<Counters>() == 6 * 8);

const _: () = assert!(core::mem::size_of::<ConfigValues>() == core::mem::size_of::<DeviceConfig>());
const _: () =
    assert!(core::mem::align_of::<ConfigValues>() == core::mem::align_of::<DeviceConfig>());
const _: () = assert!(
    core::mem::offset_of!(ConfigValues, mailbox) == core::mem::offset_of!(DeviceConfig, mailbox)
);

/// Ports the mailbox can have (and lock bits the heap keeps for them).
pub const MAX_PORTS: usize = 4096;

/// Bad frees and failed allocations, as counted on the device.
#[repr(C)]
#[derive(Debug)]
pub struct ErrorRecord {
    double_frees: AtomicU64,
    invalid_frees: AtomicU64,
    out_of_memory: AtomicU64,
    first_bad_address: AtomicU64,
}

/// A snapshot of an [`ErrorRecord`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errors {
    /// Frees of chunks that were already free (nothing was changed).
    pub double_frees: u64,
    /// Frees of pointers the heap never handed out (nothing was changed).
    pub invalid_frees: u64,
    /// Allocations that returned null for want of memory.
    pub out_of_memory: u64,
    /// The first pointer of a bad free (0: none).
    pub first_bad_address: u64,
}

impl Errors {
    /// The record as a host read it from device memory (field order).
    pub fn from_words(w: [u64; 4]) -> Errors {
        Errors {
            double_frees: w[0],
            invalid_frees: w[1],
            out_of_memory: w[2],
            first_bad_address: w[3],
        }
    }
}

/// Device-side counters of slab and block traffic.
#[repr(C)]
#[derive(Debug)]
pub struct Counters {
    slabs_from_provider: AtomicU64,
    slabs_from_cache: AtomicU64,
    slabs_to_cache: AtomicU64,
    slabs_to_provider: AtomicU64,
    large_allocations: AtomicU64,
    large_frees: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Slabs obtained from the provider.
    pub slabs_from_provider: u64,
    /// Slabs reused from the cache.
    pub slabs_from_cache: u64,
    /// Empty slabs kept in the cache.
    pub slabs_to_cache: u64,
    /// Empty slabs given back to the provider.
    pub slabs_to_provider: u64,
    /// Large blocks allocated.
    pub large_allocations: u64,
    /// Large blocks freed.
    pub large_frees: u64,
}

impl Traffic {
    /// The counters as a host read them from device memory (field order).
    pub fn from_words(w: [u64; 6]) -> Traffic {
        Traffic {
            slabs_from_provider: w[0],
            slabs_from_cache: w[1],
            slabs_to_cache: w[2],
            slabs_to_provider: w[3],
            large_allocations: w[4],
            large_frees: w[5],
        }
    }
}

/// All allocator state of one heap. `repr(C)`: a host reads and writes parts
/// of it in a GPU module global by offset ([`layout`]).
#[repr(C)]
pub struct DeviceHeap {
    config: DeviceConfig,
    errors: ErrorRecord,
    counters: Counters,
    /// Top of the pool of ready slabs: `tag << 32 | (chunk index + 1)`, 0
    /// when empty (pool mode).
    pool_head: AtomicU64,
    /// Next link of each pooled slab, by chunk index (`index + 1`, 0 ends).
    pool_next: [AtomicU32; REGION_CHUNKS],
    /// Device-side lock bits of the RPC mailbox's ports.
    port_locks: [AtomicU32; MAX_PORTS / 32],
    slots: [Guard; MAX_SLOTS],
    hints: [AtomicU32; CLASS_COUNT],
    chunks: [AtomicU32; REGION_CHUNKS],
    cache: SlabCache<MAX_CACHE>,
    #[cfg(not(target_arch = "nvptx64"))]
    direct: Option<core::ptr::NonNull<dyn crate::provider::DirectProvider>>,
}

// SAFETY: every field is atomic except `direct`, which is written once before
// the heap is shared and points to a `Sync` provider that outlives it (the
// contract of `bind_direct`).
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl Sync for DeviceHeap {}
// SAFETY: as for `Sync`.
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl Send for DeviceHeap {}

/// Where a pointer given to `free` points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Null,
    Slab { base: u64, slot: u32 },
    Large { chunk: usize, entry: u32 },
    DoubleFree,
    Invalid,
}

/// The result of `find_slab` for one lane.
#[derive(Clone, Copy)]
struct Found {
    slab: u64,
    reserved: u64,
    uniform: u32,
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
    x % slot_count.max(1)
}

impl DeviceHeap {
    // Panic-free accessors for the hot paths: indices are in range by
    // construction (slot indices are reduced modulo the slot count, chunk
    // indices come from a region of at most MAX_REGION, class indices from
    // `place`), and masking or clamping them keeps the PTX free of bounds
    // checks and their formatting machinery.

    #[inline(always)]
    fn slot(&self, index: u32) -> &Guard {
        &self.slots[index as usize & (MAX_SLOTS - 1)]
    }

    #[inline(always)]
    fn chunk(&self, index: usize) -> &AtomicU32 {
        &self.chunks[index & (REGION_CHUNKS - 1)]
    }

    #[inline(always)]
    fn class_hint(&self, class: usize) -> &AtomicU32 {
        &self.hints[class.min(CLASS_COUNT - 1)]
    }

    /// An unbound heap: every allocation returns null until the host binds a
    /// region and a provider. All zeroes, so it can be a zero-initialised GPU
    /// global.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        DeviceHeap {
            config: DeviceConfig {
                slot_count: AtomicU32::new(0),
                cache_limit: AtomicU32::new(0),
                provider: AtomicU32::new(0),
                port_count: AtomicU32::new(0),
                region_base: AtomicU64::new(0),
                region_len: AtomicU64::new(0),
                mailbox: AtomicU64::new(0),
            },
            pool_head: AtomicU64::new(0),
            pool_next: [const { AtomicU32::new(0) }; REGION_CHUNKS],
            port_locks: [const { AtomicU32::new(0) }; MAX_PORTS / 32],
            slots: [const { Guard::new() }; MAX_SLOTS],
            hints: [const { AtomicU32::new(0) }; CLASS_COUNT],
            chunks: [const { AtomicU32::new(0) }; REGION_CHUNKS],
            cache: SlabCache::new(),
            errors: ErrorRecord {
                double_frees: AtomicU64::new(0),
                invalid_frees: AtomicU64::new(0),
                out_of_memory: AtomicU64::new(0),
                first_bad_address: AtomicU64::new(0),
            },
            counters: Counters {
                slabs_from_provider: AtomicU64::new(0),
                slabs_from_cache: AtomicU64::new(0),
                slabs_to_cache: AtomicU64::new(0),
                slabs_to_provider: AtomicU64::new(0),
                large_allocations: AtomicU64::new(0),
                large_frees: AtomicU64::new(0),
            },
            #[cfg(not(target_arch = "nvptx64"))]
            direct: None,
        }
    }

    // ----------------------------------------------------------------------
    // Configuration and provider
    // ----------------------------------------------------------------------

    #[inline(always)]
    fn slot_count(&self) -> u32 {
        self.config.slot_count.load(Ordering::Relaxed)
    }

    /// Sets the table size (clamped to 1..=MAX_SLOTS), the cache limit
    /// (clamped to MAX_CACHE) and the region. Host side, before launches.
    pub fn configure(&self, slots: u32, cache_limit: u32, region_base: u64, region_len: u64) {
        let mut v = self.config_values();
        v.slot_count = slots;
        v.cache_limit = cache_limit;
        v.region_base = region_base;
        v.region_len = region_len;
        self.apply(v);
    }

    /// Writes a whole configuration (clamped, see [`ConfigValues::clamped`]).
    /// Host side, when no kernel runs.
    pub fn apply(&self, values: ConfigValues) {
        let v = values.clamped();
        let c = &self.config;
        c.cache_limit.store(v.cache_limit, Ordering::Relaxed);
        c.provider.store(v.provider, Ordering::Relaxed);
        c.port_count.store(v.port_count, Ordering::Relaxed);
        c.region_base.store(v.region_base, Ordering::Relaxed);
        c.region_len.store(v.region_len, Ordering::Relaxed);
        c.mailbox.store(v.mailbox, Ordering::Relaxed);
        c.slot_count.store(v.slot_count, Ordering::Relaxed);
    }

    /// The configuration now.
    pub fn config_values(&self) -> ConfigValues {
        let c = &self.config;
        ConfigValues {
            slot_count: c.slot_count.load(Ordering::Relaxed),
            cache_limit: c.cache_limit.load(Ordering::Relaxed),
            provider: c.provider.load(Ordering::Relaxed),
            port_count: c.port_count.load(Ordering::Relaxed),
            region_base: c.region_base.load(Ordering::Relaxed),
            region_len: c.region_len.load(Ordering::Relaxed),
            mailbox: c.mailbox.load(Ordering::Relaxed),
        }
    }

    /// Binds a provider called in place (simulator only) and adopts its
    /// region.
    ///
    /// # Safety
    /// `provider` outlives every use of this heap, and no lane uses the heap
    /// while this runs.
    #[cfg(not(target_arch = "nvptx64"))]
    pub unsafe fn bind_direct(
        &mut self,
        provider: &dyn crate::provider::DirectProvider,
        slots: u32,
        cache_limit: u32,
    ) {
        let (base, len) = provider.region();
        self.configure(slots, cache_limit, base, len);
        // SAFETY: erasing the lifetime; the caller keeps the provider alive
        // for as long as the heap is used.
        let erased: &'static dyn crate::provider::DirectProvider =
            unsafe { core::mem::transmute(provider) };
        self.direct = Some(core::ptr::NonNull::from(erased));
        self.config
            .provider
            .store(ProviderKind::Direct as u32, Ordering::Relaxed);
    }

    #[inline(always)]
    fn provider(&self) -> ProviderKind {
        ProviderKind::from_raw(self.config.provider.load(Ordering::Relaxed))
    }

    /// The RPC client of the mailbox the host bound, if any.
    fn rpc(&self) -> Option<crate::rpc::Client<'_>> {
        let mailbox = self.config.mailbox.load(Ordering::Relaxed);
        let ports = self.config.port_count.load(Ordering::Relaxed);
        if mailbox == 0 || ports == 0 {
            return None;
        }
        let ports = ports.min(MAX_PORTS as u32);
        // SAFETY: the host binds `mailbox` to `ports` ports of a mapped
        // mailbox that one server serves for as long as the heap is used
        // (the contract of configuring an RPC or pool heap).
        Some(unsafe {
            crate::rpc::Client::new(
                core::ptr::with_exposed_provenance_mut(mailbox as usize),
                ports,
                &self.port_locks,
            )
        })
    }

    /// System memory: `bytes` aligned to `align`, or 0. One lane calls it.
    fn system_allocate(&self, bytes: u64, align: u64) -> u64 {
        match self.provider() {
            ProviderKind::Unbound => 0,
            ProviderKind::Direct => {
                #[cfg(not(target_arch = "nvptx64"))]
                if let Some(p) = self.direct {
                    // SAFETY: `bind_direct`'s contract keeps it alive.
                    return unsafe { p.as_ref() }.allocate(bytes, align);
                }
                // No provider is called in place on the GPU.
                let _ = (bytes, align);
                0
            }
            ProviderKind::Rpc | ProviderKind::Pool => match self.rpc() {
                Some(client) => {
                    let mut args = [0u64; crate::rpc::wire::LANE_WORDS];
                    args[0] = bytes;
                    args[1] = align;
                    let me = 1u32 << simt::lane_id();
                    client.call(me, crate::rpc::wire::Opcode::Alloc, args)[0]
                }
                None => 0,
            },
        }
    }

    /// Gives system memory back. One lane calls it; it does not wait.
    fn system_deallocate(&self, addr: u64, bytes: u64) {
        match self.provider() {
            ProviderKind::Unbound => {}
            ProviderKind::Direct => {
                #[cfg(not(target_arch = "nvptx64"))]
                if let Some(p) = self.direct {
                    // SAFETY: `bind_direct`'s contract keeps it alive.
                    unsafe { p.as_ref() }.deallocate(addr, bytes);
                }
                // No provider is called in place on the GPU.
                let _ = (addr, bytes);
            }
            ProviderKind::Rpc | ProviderKind::Pool => {
                if let Some(client) = self.rpc() {
                    let mut args = [0u64; crate::rpc::wire::LANE_WORDS];
                    args[0] = addr;
                    args[1] = bytes;
                    let me = 1u32 << simt::lane_id();
                    client.send(me, crate::rpc::wire::Opcode::Free, args);
                }
            }
        }
    }

    // ----------------------------------------------------------------------
    // The slab pool (pool mode)
    // ----------------------------------------------------------------------

    /// Pushes slab `slab` (an address in the region) on the pool.
    pub fn pool_push(&self, slab: u64) -> bool {
        let Some(chunk) = self.chunk_index(slab) else {
            return false;
        };
        let mut head = self.pool_head.load(Ordering::Relaxed);
        loop {
            self.pool_next[chunk & (REGION_CHUNKS - 1)].store(head as u32, Ordering::Relaxed);
            // ORDERING: release (gpu): our link (and the slab's clean
            // bitfield) happen-before the popper's reads; pairs with the
            // acquire fence in `pool_pop`.
            fence(Ordering::Release, Scope::Gpu);
            let tag = (head >> 32).wrapping_add(1);
            match self
                .pool_head
                .compare_exchange(head, (tag << 32) | (chunk as u64 + 1))
            {
                Ok(_) => return true,
                Err(now) => head = now,
            }
        }
    }

    /// Pops a slab off the pool. The tag in the head's high half changes on
    /// every push and pop, so a stale head (ABA) never wins the CAS.
    pub fn pool_pop(&self) -> Option<u64> {
        let mut head = self.pool_head.load(Ordering::Relaxed);
        loop {
            let top = head as u32;
            if top == 0 {
                return None;
            }
            let chunk = (top - 1) as usize & (REGION_CHUNKS - 1);
            // ORDERING: acquire (gpu): pairs with the release fence in
            // `pool_push` of the link we read.
            fence(Ordering::Acquire, Scope::Gpu);
            let next = self.pool_next[chunk].load(Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            match self
                .pool_head
                .compare_exchange(head, (tag << 32) | u64::from(next))
            {
                Ok(_) => {
                    // ORDERING: acquire (gpu): the slab's contents as the
                    // pusher left them.
                    fence(Ordering::Acquire, Scope::Gpu);
                    let base = self.config.region_base.load(Ordering::Relaxed);
                    return Some(base + ((chunk as u64) << SLAB_SHIFT));
                }
                Err(now) => head = now,
            }
        }
    }

    /// Slabs in the pool now (host side, quiescent heap).
    pub fn pool_len(&self) -> usize {
        let mut n = 0;
        let mut at = self.pool_head.load(Ordering::Relaxed) as u32;
        while at != 0 && n <= REGION_CHUNKS {
            n += 1;
            at = self.pool_next[(at - 1) as usize & (REGION_CHUNKS - 1)].load(Ordering::Relaxed);
        }
        n
    }

    /// The chunk-table index of `addr`, if it lies in the region.
    #[inline(always)]
    fn chunk_index(&self, addr: u64) -> Option<usize> {
        let base = self.config.region_base.load(Ordering::Relaxed);
        let len = self.config.region_len.load(Ordering::Relaxed);
        let offset = addr.checked_sub(base)?;
        (offset < len).then_some((offset >> SLAB_SHIFT) as usize)
    }

    // ----------------------------------------------------------------------
    // malloc
    // ----------------------------------------------------------------------

    /// Allocates `bytes` aligned to `align` for each lane of `lane_mask` (all
    /// of which call this together). Null for a zero or impossible size, a
    /// non-power-of-two alignment, or no memory.
    pub fn allocate(&self, lane_mask: u32, bytes: u64, align: u64) -> *mut u8 {
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
                let chunk = self.allocate_small(slab_lanes, class);
                if chunk == 0 {
                    0
                } else {
                    // `align` is a power of two (`place` checked).
                    (chunk + align - 1) & !(align - 1)
                }
            }
            Placement::Large { bytes, align } => self.allocate_large(bytes, align),
            Placement::Invalid => return core::ptr::null_mut(),
        };
        if addr == 0 {
            self.errors.out_of_memory.fetch_add(1);
            return core::ptr::null_mut();
        }
        core::ptr::with_exposed_provenance_mut(addr as usize)
    }

    /// A chunk of class `class` for each lane of `lane_mask`; 0 for lanes
    /// that found no memory.
    fn allocate_small(&self, lane_mask: u32, class: usize) -> u64 {
        let found = self.find_slab(lane_mask, class);
        if found.slab == 0 {
            return 0;
        }
        // SAFETY: `find_slab` gave every lane of `found.uniform` a reference
        // and a position ≤ usable on this live slab of class `class`.
        unsafe { Slab(found.slab).allocate(found.uniform, found.reserved, geometry(class)) }
    }

    /// A large block straight from the provider (one lane).
    fn allocate_large(&self, bytes: u64, align: u64) -> u64 {
        let addr = self.system_allocate(bytes, align);
        if addr == 0 {
            return 0;
        }
        let Some(chunk) = self.chunk_index(addr) else {
            // Outside the region the heap cannot vouch for it on free.
            self.system_deallocate(addr, bytes);
            return 0;
        };
        self.chunk(chunk).store(
            CHUNK_LARGE | (bytes >> SLAB_SHIFT) as u32,
            Ordering::Relaxed,
        );
        self.counters.large_allocations.fetch_add(1);
        addr
    }

    /// The slot hint of `class`, valid for the current table size.
    #[inline(always)]
    fn hint(&self, class: usize, slot_count: u32) -> u32 {
        match self.class_hint(class).load(Ordering::Relaxed) {
            0 => start_slot(class, slot_count),
            h => (h - 1) % slot_count.max(1),
        }
    }

    /// Finds each lane of `lane_mask` a slab of class `class` with room, and
    /// a reservation on it.
    fn find_slab(&self, lane_mask: u32, class: usize) -> Found {
        let geo = geometry(class);
        let usable = u64::from(geo.usable);
        let slot_count = self.slot_count();
        let hint = self.hint(class, slot_count);
        let base = start_slot(class, slot_count);
        let mut found = Found {
            slab: 0,
            reserved: 0,
            uniform: 0,
        };
        let mut may_claim = true;
        let mut offset = 0u32;
        let mut retries = 0u32;
        let mut backoff = simt::Backoff::new();
        let mut done = false;
        loop {
            let searching = simt::ballot(lane_mask, !done);
            if searching == 0 {
                return found;
            }
            if done {
                continue;
            }
            // Lanes still looking: `searching`, all of them here.
            let index = if offset == 0 {
                hint
            } else {
                (base + offset - 1) % slot_count.max(1)
            };
            let guard = self.slot(index);
            let available = offset == 0 || guard.use_count() < usable;
            let slab_mask = simt::ballot(searching, available);
            if available {
                let key = ((class as u64) << 32) | u64::from(index);
                let group = simt::match_any_u64(slab_mask, key);
                let (slab, count) = self.try_lock(slab_mask, group, index, class, may_claim);
                // SAFETY: a non-zero `slab` is live and referenced by us.
                let fits = slab != 0
                    && count <= usable
                    && unsafe { Slab(slab).header() }.chunk == geo.chunk;
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
                    // existing ones only.
                    may_claim = false;
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
            if offset > slot_count {
                done = true;
            }
        }
    }

    /// Locks slot `index` for the lanes of `group` (a subset of
    /// `lane_mask`, all calling). Returns the slab and the lane's 1-based
    /// position among its reservations, or (0, 0 | NO_MEMORY).
    fn try_lock(
        &self,
        lane_mask: u32,
        group: u32,
        index: u32,
        class: usize,
        may_claim: bool,
    ) -> (u64, u64) {
        let leader = simt::leader(group);
        let n = u64::from(group.count_ones());
        let guard = self.slot(index);
        let (mut slab, mut count, mut clean_words) = (0u64, 0u64, 0u32);
        if simt::lane_id() == leader {
            match guard.lock(n, may_claim) {
                Lock::Acquired { slab: s, count: c } => (slab, count) = (s, c),
                Lock::Claimed => match self.obtain_slab() {
                    Some((s, clean)) => (slab, count, clean_words) = (s, FRESH, clean),
                    None => {
                        guard.abandon();
                        count = NO_MEMORY;
                    }
                },
                Lock::Empty => count = SKIP,
                Lock::Creating => count = CREATING,
                Lock::Busy => {}
            }
        }
        let slab = simt::shfl_u64(lane_mask, slab, leader);
        let mut count = simt::shfl_u64(lane_mask, count, leader);
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
                if let Some(chunk) = self.chunk_index(slab) {
                    self.chunk(chunk)
                        .store(CHUNK_SLAB | index, Ordering::Relaxed);
                }
                count = guard.publish(slab, n);
            }
            count = simt::shfl_u64(group, count, leader);
        }
        let rank = u64::from((group & simt::lanemask_lt()).count_ones());
        (slab, count - n + rank + 1)
    }

    /// A slab for a claimed slot: from the cache, else the provider. Returns
    /// it with the number of bitfield words known to be zero.
    fn obtain_slab(&self) -> Option<(u64, u32)> {
        let limit = self.config.cache_limit.load(Ordering::Relaxed) as usize;
        if let Some(slab) = self.cache.pop(limit) {
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
        if self.chunk_index(slab).is_none() {
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
        self.release_slot(index, mask, u64::from(mask.count_ones()));
    }

    /// The lowest lane of `mask` gives back `n` references to slot `index`.
    fn release_slot(&self, index: u32, mask: u32, n: u64) {
        if !simt::is_leader(mask) || n == 0 {
            return;
        }
        let guard = self.slot(index);
        if let Some(slab) = guard.unlock(n) {
            self.dispose(slab);
            guard.vacate();
        }
    }

    /// Disposes of an empty slab whose destruction the caller won: the chunk
    /// table forgets it, then the cache or the provider takes it.
    fn dispose(&self, slab: u64) {
        if let Some(chunk) = self.chunk_index(slab) {
            self.chunk(chunk).store(CHUNK_FREED, Ordering::Relaxed);
        }
        let limit = self.config.cache_limit.load(Ordering::Relaxed) as usize;
        if self.cache.push(slab, limit) {
            self.counters.slabs_to_cache.fetch_add(1);
        } else if self.provider() == ProviderKind::Pool {
            // Pool slabs stay with the device: no RPC on the slab path.
            self.pool_push(slab);
        } else {
            self.counters.slabs_to_provider.fetch_add(1);
            self.system_deallocate(slab, SLAB_SIZE);
        }
    }

    // ----------------------------------------------------------------------
    // free
    // ----------------------------------------------------------------------

    /// Where `addr` points, from the chunk table.
    #[inline(always)]
    fn target(&self, addr: u64) -> Target {
        if addr == 0 {
            return Target::Null;
        }
        let Some(chunk) = self.chunk_index(addr) else {
            return Target::Invalid;
        };
        let entry = self.chunk(chunk).load(Ordering::Relaxed);
        let aligned = addr.is_multiple_of(SLAB_SIZE);
        if entry == CHUNK_FREED {
            // Ours once, freed since: a stale pointer.
            Target::DoubleFree
        } else if entry & CHUNK_SLAB != 0 && !aligned {
            Target::Slab {
                base: Slab::containing(addr).0,
                slot: entry & !CHUNK_SLAB,
            }
        } else if entry & CHUNK_LARGE != 0 && aligned {
            Target::Large { chunk, entry }
        } else {
            // Never ours, a slab's header, or inside a large block.
            Target::Invalid
        }
    }

    /// Frees `ptr` for each lane of `lane_mask` (all of which call this
    /// together). Null is a no-op; a double or invalid free changes nothing
    /// and is counted.
    pub fn deallocate(&self, lane_mask: u32, ptr: *mut u8) {
        let addr = ptr.expose_provenance() as u64;
        let target = self.target(addr);
        let slab_lanes = simt::ballot(lane_mask, matches!(target, Target::Slab { .. }));
        match target {
            Target::Null => {}
            Target::Invalid => self.record_bad(&self.errors.invalid_frees, addr),
            Target::DoubleFree => self.record_bad(&self.errors.double_frees, addr),
            Target::Large { chunk, entry } => self.free_large(chunk, entry, addr),
            Target::Slab { base, slot } => self.free_small(slab_lanes, base, slot, addr),
        }
    }

    /// Counts `ptr` as an invalid free (a `realloc` of a pointer the heap
    /// never handed out).
    pub fn note_invalid_free(&self, ptr: *mut u8) {
        self.record_bad(&self.errors.invalid_frees, ptr.expose_provenance() as u64);
    }

    /// The region this heap manages: (base, length).
    pub fn region(&self) -> (u64, u64) {
        (
            self.config.region_base.load(Ordering::Relaxed),
            self.config.region_len.load(Ordering::Relaxed),
        )
    }

    fn record_bad(&self, counter: &AtomicU64, addr: u64) {
        counter.fetch_add(1);
        let _ = self.errors.first_bad_address.compare_exchange(0, addr);
    }

    fn free_large(&self, chunk: usize, entry: u32, addr: u64) {
        // Exactly one free of a block wins the entry; a racing or later one
        // sees FREED.
        if self
            .chunk(chunk)
            .compare_exchange(entry, CHUNK_FREED)
            .is_err()
        {
            self.record_bad(&self.errors.double_frees, addr);
            return;
        }
        self.counters.large_frees.fetch_add(1);
        self.system_deallocate(addr, u64::from(entry & CHUNK_PAYLOAD) << SLAB_SHIFT);
    }

    /// Frees chunks of slabs for the lanes of `lane_mask`.
    fn free_small(&self, lane_mask: u32, base: u64, slot: u32, addr: u64) {
        let uniform = simt::match_any_u64(lane_mask, base);
        let leader = simt::leader(uniform);
        let n = u64::from(uniform.count_ones());
        let slot_ok = (slot as usize) < MAX_SLOTS;
        let mut live = 0u32;
        if simt::lane_id() == leader && slot_ok {
            match self.slot(slot).lock(n, false) {
                Lock::Acquired { slab, .. } if slab == base => live = 1,
                Lock::Acquired { .. } => {
                    // The slot now holds another slab: the pointer's slab is
                    // gone. Give the references back.
                    self.release_slot(slot, 1 << leader, n);
                }
                _ => {}
            }
        }
        let live = simt::shfl_u32(uniform, live, leader) != 0;
        if !live {
            self.record_bad(&self.errors.double_frees, addr);
            return;
        }
        // The group holds n references: the slab stays put.
        // SAFETY: live and referenced.
        let geo = unsafe { Slab(base).geometry() };
        let index = geo.and_then(|g| Slab(base).index_of(addr, g));
        let freed = match index {
            // SAFETY: referenced live slab, `i < usable`.
            Some(i) => unsafe { Slab(base).deallocate(i) },
            None => false,
        };
        if !freed {
            let counter = if index.is_some() {
                &self.errors.double_frees
            } else {
                &self.errors.invalid_frees
            };
            self.record_bad(counter, addr);
        }
        let chunks_freed = simt::ballot(uniform, freed).count_ones();
        self.release_slot(slot, uniform, n + u64::from(chunks_freed));
    }

    // ----------------------------------------------------------------------
    // Queries
    // ----------------------------------------------------------------------

    /// The bytes usable at `ptr` (from `ptr` to the end of its chunk or
    /// block), or 0 if it is not a live allocation's address.
    pub fn usable_size(&self, ptr: *const u8) -> u64 {
        let addr = ptr.expose_provenance() as u64;
        match self.target(addr) {
            Target::Slab { base, .. } => {
                // SAFETY: the caller owns the allocation at `ptr`, so the slab
                // is live.
                let Some(geo) = (unsafe { Slab(base).geometry() }) else {
                    return 0;
                };
                match Slab(base).index_of(addr, geo) {
                    Some(i) => Slab(base).chunk_addr(i, geo) + u64::from(geo.chunk) - addr,
                    None => 0,
                }
            }
            Target::Large { entry, .. } => u64::from(entry & CHUNK_PAYLOAD) << SLAB_SHIFT,
            _ => 0,
        }
    }

    /// The device's error counters.
    pub fn errors(&self) -> Errors {
        Errors {
            double_frees: self.errors.double_frees.load(Ordering::Relaxed),
            invalid_frees: self.errors.invalid_frees.load(Ordering::Relaxed),
            out_of_memory: self.errors.out_of_memory.load(Ordering::Relaxed),
            first_bad_address: self.errors.first_bad_address.load(Ordering::Relaxed),
        }
    }

    /// The device's slab and block traffic.
    pub fn traffic(&self) -> Traffic {
        let c = &self.counters;
        Traffic {
            slabs_from_provider: c.slabs_from_provider.load(Ordering::Relaxed),
            slabs_from_cache: c.slabs_from_cache.load(Ordering::Relaxed),
            slabs_to_cache: c.slabs_to_cache.load(Ordering::Relaxed),
            slabs_to_provider: c.slabs_to_provider.load(Ordering::Relaxed),
            large_allocations: c.large_allocations.load(Ordering::Relaxed),
            large_frees: c.large_frees.load(Ordering::Relaxed),
        }
    }

    /// Slots that publish a slab now (quiescent heap).
    pub fn live_slabs(&self) -> usize {
        let n = self.slot_count() as usize;
        self.slots[..n]
            .iter()
            .filter(|g| g.peek().is_some())
            .count()
    }

    /// Slabs in the cache now.
    pub fn cached_slabs(&self) -> usize {
        self.cache.len()
    }

    /// Gives every cached slab back to the provider (host side, no kernel
    /// running). Returns how many.
    pub fn drain_cache(&self) -> usize {
        let mut n = 0;
        self.cache.drain(|slab| {
            self.system_deallocate(slab, SLAB_SIZE);
            self.counters.slabs_to_provider.fetch_add(1);
            n += 1;
        });
        n
    }

    /// Empties the cache, handing each slab to `f` (host side, no kernel
    /// running: a trim gives them back to the backing). Returns how many.
    pub fn take_cached(&self, mut f: impl FnMut(u64)) -> usize {
        let mut n = 0;
        self.cache.drain(|slab| {
            self.counters.slabs_to_provider.fetch_add(1);
            f(slab);
            n += 1;
        });
        n
    }

    /// Checks the invariants of a quiescent heap (no kernel running); returns
    /// the first violation.
    pub fn check(&self) -> Result<(), &'static str> {
        let n = self.slot_count() as usize;
        for (index, guard) in self.slots[..n].iter().enumerate() {
            let Some(slab) = guard.peek() else { continue };
            // SAFETY: a published slot's slab is live and initialised.
            let header = unsafe { Slab(slab).header() };
            if header.slot as usize != index {
                return Err("a slab's header names another slot");
            }
            let Some(chunk) = self.chunk_index(slab) else {
                return Err("a published slab lies outside the region");
            };
            if self.chunk(chunk).load(Ordering::Relaxed) != CHUNK_SLAB | index as u32 {
                return Err("a published slab's chunk entry is not SLAB(its slot)");
            }
            // SAFETY: as above.
            let Some(geo) = (unsafe { Slab(slab).geometry() }) else {
                return Err("a published slab has no valid class");
            };
            // SAFETY: as above.
            let set = u64::from(unsafe { Slab(slab).count_set(geo) });
            let refs = guard.raw_count();
            if refs & crate::guard::INVALID != 0 || refs < set {
                return Err("a slab's reference count is below its set bits");
            }
            // SAFETY: as above.
            if unsafe { Slab(slab).has_phantom_bits(geo) } {
                return Err("a slab has bits set beyond its usable chunks");
            }
        }
        let mut dirty = false;
        self.cache.for_each(|slab| {
            // SAFETY: cached slabs are mapped with their last header.
            let header = unsafe { Slab(slab).header() };
            let words = header.words;
            for i in 0..words {
                // SAFETY: `i` is below the slab's last class's word count.
                dirty |= unsafe { Slab(slab).word(i) }.load(Ordering::Relaxed) != 0;
            }
        });
        if dirty {
            return Err("a cached slab has bits set");
        }
        Ok(())
    }
}

#[cfg(not(loom))]
impl Default for DeviceHeap {
    fn default() -> Self {
        Self::new()
    }
}
