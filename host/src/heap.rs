//! `Heap`: a module's device heap, configured, served by the RPC server and
//! backed by device memory — through the device interface, so that the one
//! code path here runs on a GPU and, in CI, on the emulated device.
//!
//! ```text
//!   Heap::new(launcher, config)
//!     ├─ the module's WARPALLOC_HEAP, after checking its layout
//!     │  (WARPALLOC_HEAP_LAYOUT, and the global's size) against this program's
//!     ├─ Region over device.backing(): one reserved range, granules mapped
//!     │  on demand (CudaVmm | HostEmulated)
//!     ├─ mailbox: device.mapped_host(), registered with the RPC server thread
//!     └─ a copy of the device heap: configure (region, mailbox, mode), fill
//!        the pool (pool mode), write it back
//!   heap.launch(grid, block, args)    synchronous: returns when the kernel
//!                                     ended and the server took its requests
//!   heap.stats() / check() / trim()   between launches, on a copy
//! ```
//!
//! The host operates the device heap only through `DeviceHeap`'s own methods:
//! it reads the whole heap into a host copy (`read_device_heap`), calls the
//! method — `configure`, `pool_push`, `errors`, `traffic`, `take_cached`,
//! `check`, `census` — and writes the copy back when it changed something.
//! Slab memory that `check` and `census` read goes through the device
//! interface too.
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
//! Launches are synchronous, so no kernel runs when `stats`, `check`, `trim`
//! or `drop` do their work; `drop` stops serving the mailbox before it unmaps
//! anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use warpalloc_device::DeviceHeap;
use warpalloc_device::abi::{
    ConfigValues, Errors, HEAP_SYMBOL, LAYOUT_SYMBOL, LAYOUT_WORDS, Layout, ProviderKind, Traffic,
};
use warpalloc_device::heap::{Census, DEFAULT_CACHE, LAYOUT, MAX_SLOTS, SlabMemory};
use warpalloc_device::rpc::wire::{self, Port, Reply, Request};

use crate::backing::{Backing, GRANULE, Region, RegionConfig, RegionStats};
use crate::device::{Device, Global, HostMapping, Launch, LaunchReport};
use crate::server::{self, Registration};
use crate::{HostError, Launcher};

/// How the device gets its slabs.
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
    /// Address space to reserve (default: the smaller of 64 GiB and twice the
    /// device memory).
    pub reserve: Option<u64>,
    /// The most device memory the heap maps (default: no limit but the
    /// device's).
    pub limit: Option<u64>,
    /// Device memory to leave free, checked before each mapping.
    pub headroom: u64,
    /// Empty slabs the device keeps for reuse (0..=256).
    pub slab_cache: u32,
    /// Slots of the slot table (1..=32 768).
    pub slots: u32,
    /// RPC ports (default: one per resident warp of the device, at most
    /// 4096; 32 on the emulated device).
    pub ports: Option<u32>,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            mode: Mode::Rpc,
            reserve: None,
            limit: None,
            headroom: 0,
            slab_cache: DEFAULT_CACHE,
            slots: MAX_SLOTS as u32,
            ports: None,
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
    /// blocks, cached and pooled slabs.
    pub live: Census,
    /// Requests the RPC server answered for this heap.
    pub rpc: RpcCounts,
}

#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    frees: AtomicU64,
    pings: AtomicU64,
}

type SharedRegion = Arc<Mutex<Region<Box<dyn Backing>>>>;

fn lock(region: &SharedRegion) -> MutexGuard<'_, Region<Box<dyn Backing>>> {
    region.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long `launch` waits for the server to take a kernel's last requests.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(30);

/// A warpalloc heap and the kernels it serves (see the module docs).
pub struct Heap {
    // Field order is drop order: stop serving, then free the mailbox, then
    // unmap the region, then the module (and its heap global).
    /// Stops serving the mailbox when dropped, first.
    registration: Registration,
    mailbox: Box<dyn HostMapping>,
    region: SharedRegion,
    counters: Arc<Counters>,
    global: Global,
    mode: Mode,
    launcher: Launcher,
}

/// The server's handler for one heap: the region answers `Alloc` and `Free`.
fn handler(region: SharedRegion, counters: Arc<Counters>) -> Arc<server::Handler> {
    Arc::new(move |request: Request| match request {
        Request::Alloc { bytes, align } => {
            counters.allocs.fetch_add(1, Ordering::Relaxed);
            Reply::Alloc(
                lock(&region)
                    .allocate(bytes, align)
                    .map_err(|why| why.status()),
            )
        }
        Request::Free { addr, bytes } => {
            counters.frees.fetch_add(1, Ordering::Relaxed);
            Reply::Free(lock(&region).free(addr, bytes).map_err(|why| why.status()))
        }
        Request::Ping { words } => {
            counters.pings.fetch_add(1, Ordering::Relaxed);
            Reply::Ping(words.map(|w| !w))
        }
    })
}

/// Slab memory read through the device interface.
struct DeviceMemory<'a>(&'a dyn Device);

impl SlabMemory for DeviceMemory<'_> {
    fn read_words(&self, addr: u64, out: &mut [u32]) -> bool {
        // SAFETY: `check` and `census` read only the headers and bitfields
        // of slabs the heap names (published, cached, pooled), which are
        // mapped granules of this heap's region; no kernel runs (the heap's
        // launches are synchronous).
        unsafe { self.0.read(addr, bytemuck::cast_slice_mut(out)) }.is_ok()
    }
}

/// Checks a module's heap global and layout against this program's.
fn check_layout(launcher: &Launcher) -> Result<Global, HostError> {
    let module = launcher.module();
    let global = module.global(HEAP_SYMBOL)?;
    let words = match module.global(LAYOUT_SYMBOL) {
        Ok(g) if g.size == 8 * LAYOUT_WORDS => {
            let mut words = [0u64; LAYOUT_WORDS];
            // SAFETY: a module global of exactly this size, read between
            // launches.
            unsafe {
                launcher
                    .device()
                    .read(g.addr, bytemuck::cast_slice_mut(&mut words))
            }?;
            words
        }
        Ok(g) => {
            return Err(HostError::HeapLayout(format!(
                "{LAYOUT_SYMBOL} is {} bytes, expected {}",
                g.size,
                8 * LAYOUT_WORDS
            )));
        }
        Err(HostError::MissingSymbol { .. }) => {
            return Err(HostError::HeapLayout(format!(
                "the module has no {LAYOUT_SYMBOL}: it was built with another warpalloc"
            )));
        }
        Err(e) => return Err(e),
    };
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
    if global.size as u64 != LAYOUT.size || global.addr % LAYOUT.align != 0 {
        return Err(HostError::HeapLayout(format!(
            "{HEAP_SYMBOL} is {} bytes at {:#x}, expected {} bytes aligned to {}",
            global.size, global.addr, LAYOUT.size, LAYOUT.align
        )));
    }
    Ok(global)
}

impl Heap {
    /// A heap for the kernels `launcher` runs: the module's `WARPALLOC_HEAP`
    /// (its layout checked against this program's), a region of the
    /// device's memory, a mapped mailbox served by the RPC server.
    pub fn new(launcher: Launcher, config: HeapConfig) -> Result<Heap, HostError> {
        let global = check_layout(&launcher)?;
        let device = Arc::clone(launcher.device());
        let ports = config
            .ports
            .unwrap_or_else(|| wire::port_count_for(device.info().resident_warps()))
            .clamp(1, wire::MAX_PORTS as u32);
        let mailbox = device.mapped_host(ports as usize * size_of::<Port>())?;
        let region: SharedRegion = Arc::new(Mutex::new(Region::new(
            device.backing()?,
            RegionConfig {
                reserve: config.reserve,
                limit: config.limit,
                headroom: config.headroom,
            },
        )?));
        let counters = Arc::new(Counters::default());
        // SAFETY: `mailbox` holds `ports` zeroed (idle) ports and is dropped
        // after the registration (field order).
        let registration = unsafe {
            server::register(
                mailbox.host().cast::<Port>().cast_const(),
                ports,
                handler(Arc::clone(&region), Arc::clone(&counters)),
            )
        }
        .map_err(HostError::Server)?;
        let heap = Heap {
            registration,
            mailbox,
            region,
            counters,
            global,
            mode: config.mode,
            launcher,
        };
        let (base, len) = heap.region();
        let device_heap = heap.read_device_heap()?;
        device_heap.configure(ConfigValues {
            slot_count: config.slots,
            cache_limit: config.slab_cache,
            provider: match config.mode {
                Mode::Rpc => ProviderKind::Rpc,
                Mode::Pool { .. } => ProviderKind::Pool,
            } as u32,
            port_count: ports,
            region_base: base,
            region_len: len,
            mailbox: heap.mailbox.device(),
        });
        if let Mode::Pool { slabs } = config.mode {
            let mut region = lock(&heap.region);
            for _ in 0..slabs {
                let Ok(slab) = region.allocate(GRANULE, GRANULE) else {
                    break;
                };
                device_heap.pool_push(slab);
            }
        }
        heap.write_device_heap(&device_heap)?;
        Ok(heap)
    }

    /// A host copy of the device heap.
    fn read_device_heap(&self) -> Result<Box<DeviceHeap>, HostError> {
        // SAFETY: every field of `DeviceHeap` is an atomic integer, for
        // which all-zero bytes are valid (`DeviceHeap::new()`).
        let mut copy = unsafe { Box::<DeviceHeap>::new_zeroed().assume_init() };
        // SAFETY: the copy is ours and exactly `LAYOUT.size` bytes of plain
        // integers; any bytes are a valid value.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut((&raw mut *copy).cast::<u8>(), size_of::<DeviceHeap>())
        };
        // SAFETY: the module's heap global, whose size `check_layout` found
        // equal to `DeviceHeap`'s; no kernel runs (launches are synchronous).
        unsafe { self.device().read(self.global.addr, bytes) }?;
        Ok(copy)
    }

    /// Writes a host copy back to the device heap.
    fn write_device_heap(&self, copy: &DeviceHeap) -> Result<(), HostError> {
        // SAFETY: a live `DeviceHeap` viewed as its bytes (plain integers).
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const *copy).cast::<u8>(), size_of::<DeviceHeap>())
        };
        // SAFETY: as in `read_device_heap`.
        unsafe { self.device().write(self.global.addr, bytes) }
    }

    fn device(&self) -> &dyn Device {
        &**self.launcher.device()
    }

    /// The launcher (for buffers: `alloc_zeroed`, `upload`, `read`).
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    /// The launcher, to change its simulator settings (seed, workers).
    pub fn launcher_mut(&mut self) -> &mut Launcher {
        &mut self.launcher
    }

    /// The heap's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Launches `args`' kernel on `grid` × `block` and waits for it, and for
    /// the server to take the requests it left (a `Free` does not wait for
    /// its answer).
    ///
    /// # Safety
    /// As for `Kernel::run`: the parameters must be valid for the kernel.
    pub unsafe fn launch<K: Launch>(
        &mut self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: K,
    ) -> Result<LaunchReport, HostError> {
        server::wake();
        // SAFETY: forwarded from the caller.
        let report = unsafe { self.launcher.launch(grid, block, args) }?;
        self.registration
            .wait_idle(QUIESCE_TIMEOUT)
            .map_err(HostError::ServerTimeout)?;
        Ok(report)
    }

    /// Sets every `n`-th mapping to fail (0: none), for fault injection.
    pub fn fail_every(&self, n: u64) {
        lock(&self.region).fail_every(n);
    }

    /// The heap's figures (between launches).
    pub fn stats(&self) -> Result<HeapStats, HostError> {
        let region = lock(&self.region).stats();
        let copy = self.read_device_heap()?;
        let live = copy
            .census(&DeviceMemory(self.device()))
            .map_err(|e| HostError::HeapCorrupt(e.to_string()))?;
        Ok(HeapStats {
            region,
            device: copy.errors(),
            traffic: copy.traffic(),
            live,
            rpc: RpcCounts {
                allocs: self.counters.allocs.load(Ordering::Relaxed),
                frees: self.counters.frees.load(Ordering::Relaxed),
                pings: self.counters.pings.load(Ordering::Relaxed),
            },
        })
    }

    /// Checks the device heap's invariants (between launches): `Ok`, or the
    /// first violation.
    pub fn check(&self) -> Result<Result<(), &'static str>, HostError> {
        let copy = self.read_device_heap()?;
        Ok(copy.check(&DeviceMemory(self.device())))
    }

    /// Gives the device's cached slabs back to the region and unmaps every
    /// mapped granule that is free (between launches). Returns the bytes
    /// unmapped. In pool mode the pool's slabs stay, cached or not: they are
    /// the pool.
    pub fn trim(&mut self) -> Result<u64, HostError> {
        let mut taken = Vec::new();
        if matches!(self.mode, Mode::Rpc) {
            let copy = self.read_device_heap()?;
            copy.take_cached(|slab| taken.push(slab));
            self.write_device_heap(&copy)?;
        }
        let mut region = lock(&self.region);
        for slab in taken {
            // A refusal here would mean the device cached something the
            // region never handed out; the region counts it.
            let _ = region.free(slab, GRANULE);
        }
        Ok(region.trim()?)
    }

    /// The region's base and length (where every device allocation lies).
    pub fn region(&self) -> (u64, u64) {
        let r = lock(&self.region);
        (r.base(), r.len())
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
