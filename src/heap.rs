//! `Heap`: a device heap bound to a module, served by the RPC server, backed
//! by CUDA virtual memory on a GPU or by `HostEmulated` in the simulator.
//!
//! ```text
//!   Heap::new(launcher, config)
//!     ├─ Region over CudaVmm (GPU) | HostEmulated (simulator): one reserved range
//!     ├─ mailbox: pinned host memory (GPU) | host memory (simulator)
//!     ├─ device heap: the module's WARPALLOC_HEAP (GPU) | a DeviceHeap in host
//!     │  memory bound to each launch (simulator), configured with the region,
//!     │  the mailbox and the mode
//!     ├─ pool mode: slabs mapped now and pushed on the device's pool
//!     └─ registration with the process's RPC server thread
//!   heap.launch(grid, block, args)   synchronous: returns when the kernel ends
//!   heap.stats() / heap.trim()       between launches
//! ```
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
//! Launches are synchronous, so no kernel runs when `stats`, `trim` or `drop`
//! do their work; `drop` stops serving the mailbox before it unmaps anything.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use warpalloc_device::DeviceHeap;
use warpalloc_device::heap::{
    ConfigValues, DEFAULT_CACHE, Errors, LAYOUT, MAX_CACHE, MAX_SLOTS, Traffic,
};
use warpalloc_device::kernel::Kernel;
use warpalloc_device::provider::ProviderKind;
use warpalloc_device::rpc::wire::{self, LANE_WORDS, Opcode, Port, status};
use warpalloc_host::backing::{
    Backing, CHUNK, CudaVmm, HostEmulated, Region, RegionConfig, RegionStats,
};
use warpalloc_host::gpu::{Gpu, Pinned};
use warpalloc_host::server::{self, Registration};
use warpalloc_host::{HostError, LaunchReport, Launcher, Target};

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
    /// RPC ports (default: one per resident warp of the GPU, at most 4096;
    /// 128 in the simulator).
    pub ports: Option<u32>,
    /// The memory of the emulated device in the simulator.
    pub emulated_device_memory: u64,
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
            emulated_device_memory: 16 << 30,
        }
    }
}

/// What the server answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcCounts {
    /// `ALLOC` requests (one per lane).
    pub allocs: u64,
    /// `FREE` requests.
    pub frees: u64,
    /// `PING` requests.
    pub pings: u64,
    /// Requests with an unknown opcode.
    pub unknown: u64,
}

/// A heap's figures, between launches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// The backing: mapped bytes and peak, chunks, live runs (slabs and large
    /// blocks), refusals by reason, driver calls.
    pub region: RegionStats,
    /// The device's error record: double and invalid frees, out-of-memory
    /// nulls, the first bad address.
    pub device: Errors,
    /// The device's slab and large-block traffic.
    pub traffic: Traffic,
    /// Empty slabs in the device's cache.
    pub cached_slabs: u64,
    /// Slabs left in the pool (pool mode).
    pub pool_slabs: u64,
    /// Requests the RPC server answered for this heap.
    pub rpc: RpcCounts,
}

#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    frees: AtomicU64,
    pings: AtomicU64,
    unknown: AtomicU64,
}

type SharedRegion = Arc<Mutex<Region<Box<dyn Backing>>>>;

fn lock(region: &SharedRegion) -> MutexGuard<'_, Region<Box<dyn Backing>>> {
    region.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The mailbox's memory.
enum Mailbox {
    Host(Box<[Port]>),
    Pinned(Pinned),
}

impl Mailbox {
    fn ports(&self) -> *const Port {
        match self {
            Mailbox::Host(p) => p.as_ptr(),
            Mailbox::Pinned(p) => p.host().cast(),
        }
    }
}

/// The device heap: a `DeviceHeap` in host memory, or the GPU module's global.
enum Device {
    Sim(NonNull<DeviceHeap>),
    Gpu { global: u64 },
}

/// A warpalloc heap and the kernels it serves (see the module docs).
pub struct Heap {
    // Field order is drop order: stop serving, then free the mailbox, then
    // unmap the region, then the device heap and the launcher.
    /// Held for its `Drop`: stops serving the mailbox first.
    _registration: Registration,
    mailbox: Mailbox,
    region: SharedRegion,
    counters: Arc<Counters>,
    device: Device,
    mode: Mode,
    launcher: Launcher,
}

// SAFETY: the device heap pointer (simulator) is owned by this value and only
// freed on drop; everything else is Send.
unsafe impl Send for Heap {}

fn handler(region: SharedRegion, counters: Arc<Counters>) -> Arc<server::Handler> {
    Arc::new(move |opcode: u32, args: [u64; LANE_WORDS]| {
        let mut ret = [0u64; LANE_WORDS];
        match Opcode::from_raw(opcode) {
            Some(Opcode::Alloc) => {
                counters.allocs.fetch_add(1, Ordering::Relaxed);
                match lock(&region).allocate(args[0], args[1]) {
                    Ok(addr) => ret[0] = addr,
                    Err(why) => ret[1] = why.status(),
                }
            }
            Some(Opcode::Free) => {
                counters.frees.fetch_add(1, Ordering::Relaxed);
                if let Err(why) = lock(&region).free(args[0], args[1]) {
                    ret[1] = why.status();
                }
            }
            Some(Opcode::Ping) => {
                counters.pings.fetch_add(1, Ordering::Relaxed);
                ret = args.map(|w| !w);
            }
            None => {
                counters.unknown.fetch_add(1, Ordering::Relaxed);
                ret[1] = status::BAD_REQUEST;
            }
        }
        ret
    })
}

impl Heap {
    /// A heap for the kernels `launcher` runs: on its GPU (CUDA VMM backing,
    /// pinned mailbox, the module's `WARPALLOC_HEAP`), or in the simulator
    /// (`HostEmulated` backing).
    pub fn new(mut launcher: Launcher, config: HeapConfig) -> Result<Heap, HostError> {
        let region_config = RegionConfig {
            reserve: config.reserve,
            limit: config.limit,
            headroom: config.headroom,
        };
        let counters = Arc::new(Counters::default());
        let provider = match config.mode {
            Mode::Rpc => ProviderKind::Rpc,
            Mode::Pool { .. } => ProviderKind::Pool,
        };
        let gpu_parts = match launcher.target() {
            Target::Gpu { gpu, module } => {
                let (global, size) = module.global("WARPALLOC_HEAP")?;
                if size != LAYOUT.size {
                    return Err(HostError::HeapLayout {
                        found: size,
                        expected: LAYOUT.size,
                    });
                }
                let ports = config
                    .ports
                    .unwrap_or_else(|| wire::port_count_for(gpu.info().resident_warps()))
                    .clamp(1, wire::MAX_PORTS as u32);
                let pinned = gpu.pinned(ports as usize * size_of::<Port>())?;
                Some((global, Arc::clone(gpu.context()), ports, pinned))
            }
            Target::Simulator { .. } => None,
        };
        match gpu_parts {
            Some((global, ctx, ports, pinned)) => {
                let backing: Box<dyn Backing> = Box::new(CudaVmm::new(ctx)?);
                let region: SharedRegion =
                    Arc::new(Mutex::new(Region::new(backing, region_config)?));
                let (base, len) = {
                    let r = lock(&region);
                    (r.base(), r.len())
                };
                let values = ConfigValues {
                    slot_count: config.slots,
                    cache_limit: config.slab_cache,
                    provider: provider as u32,
                    port_count: ports,
                    region_base: base,
                    region_len: len,
                    mailbox: pinned.device(),
                }
                .clamped();
                let mailbox = Mailbox::Pinned(pinned);
                // SAFETY: the pinned ports live in `mailbox`, dropped after
                // the registration.
                let registration = unsafe {
                    server::register(
                        mailbox.ports(),
                        ports,
                        handler(Arc::clone(&region), Arc::clone(&counters)),
                    )
                }
                .map_err(HostError::Server)?;
                let heap_gpu = Heap {
                    _registration: registration,
                    mailbox,
                    region,
                    counters,
                    device: Device::Gpu { global },
                    mode: config.mode,
                    launcher,
                };
                heap_gpu.write_config(values)?;
                if let Mode::Pool { slabs } = config.mode {
                    heap_gpu.fill_pool_gpu(slabs)?;
                }
                Ok(heap_gpu)
            }
            None => {
                let backing: Box<dyn Backing> =
                    Box::new(HostEmulated::new(config.emulated_device_memory)?);
                let region: SharedRegion =
                    Arc::new(Mutex::new(Region::new(backing, region_config)?));
                let ports = config.ports.unwrap_or(128).clamp(1, wire::MAX_PORTS as u32);
                let mailbox = Mailbox::Host((0..ports).map(|_| Port::new()).collect());
                // SAFETY: every field of `DeviceHeap` is an atomic or a
                // nullable pointer, for which all-zero is valid (`new()`).
                let device = unsafe { Box::<DeviceHeap>::new_zeroed().assume_init() };
                let device = NonNull::from(Box::leak(device));
                let (base, len) = {
                    let r = lock(&region);
                    (r.base(), r.len())
                };
                // SAFETY: just created, not shared yet.
                unsafe { device.as_ref() }.apply(ConfigValues {
                    slot_count: config.slots,
                    cache_limit: config.slab_cache.min(MAX_CACHE as u32),
                    provider: provider as u32,
                    port_count: ports,
                    region_base: base,
                    region_len: len,
                    mailbox: mailbox.ports().expose_provenance() as u64,
                });
                launcher.simulator_config().binding = device.as_ptr().expose_provenance();
                // SAFETY: the ports live in `mailbox`, dropped after the
                // registration.
                let registration = unsafe {
                    server::register(
                        mailbox.ports(),
                        ports,
                        handler(Arc::clone(&region), Arc::clone(&counters)),
                    )
                }
                .map_err(HostError::Server);
                let registration = match registration {
                    Ok(r) => r,
                    Err(e) => {
                        // SAFETY: leaked above, never shared.
                        drop(unsafe { Box::from_raw(device.as_ptr()) });
                        return Err(e);
                    }
                };
                let heap = Heap {
                    _registration: registration,
                    mailbox,
                    region,
                    counters,
                    device: Device::Sim(device),
                    mode: config.mode,
                    launcher,
                };
                if let Mode::Pool { slabs } = config.mode {
                    let device = heap.sim_device();
                    let mut region = lock(&heap.region);
                    for _ in 0..slabs {
                        match region.allocate(CHUNK, CHUNK) {
                            Ok(slab) => {
                                device.pool_push(slab);
                            }
                            Err(_) => break,
                        }
                    }
                }
                Ok(heap)
            }
        }
    }

    fn sim_device(&self) -> &DeviceHeap {
        match self.device {
            // SAFETY: owned by this heap until drop.
            Device::Sim(p) => unsafe { p.as_ref() },
            Device::Gpu { .. } => unreachable!("a GPU heap has no host-side DeviceHeap"),
        }
    }

    fn gpu(&self) -> Option<&Gpu> {
        match self.launcher.target() {
            Target::Gpu { gpu, .. } => Some(gpu),
            Target::Simulator { .. } => None,
        }
    }

    fn write_config(&self, values: ConfigValues) -> Result<(), HostError> {
        if let (Device::Gpu { global }, Some(gpu)) = (&self.device, self.gpu()) {
            // SAFETY: `ConfigValues` is plain `repr(C)` integers.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    (&raw const values).cast::<u8>(),
                    size_of::<ConfigValues>(),
                )
            };
            gpu.write(global + LAYOUT.config as u64, bytes)?;
        }
        Ok(())
    }

    /// Maps `slabs` slabs and links them as the device's pool (GPU).
    fn fill_pool_gpu(&self, slabs: u32) -> Result<(), HostError> {
        let (Device::Gpu { global }, Some(gpu)) = (&self.device, self.gpu()) else {
            return Ok(());
        };
        let global = *global;
        let mut region = lock(&self.region);
        let base = region.base();
        let mut chunks = Vec::new();
        for _ in 0..slabs {
            match region.allocate(CHUNK, CHUNK) {
                Ok(slab) => chunks.push(((slab - base) / CHUNK) as u32),
                Err(_) => break,
            }
        }
        drop(region);
        // Link them in order: next[c_i] = c_{i+1} + 1, the last 0.
        for (i, &c) in chunks.iter().enumerate() {
            let next = chunks.get(i + 1).map_or(0, |&n| n + 1);
            gpu.write(
                global + (LAYOUT.pool_next + 4 * c as usize) as u64,
                &next.to_ne_bytes(),
            )?;
        }
        let head = chunks.first().map_or(0u64, |&c| u64::from(c) + 1);
        gpu.write(global + LAYOUT.pool_head as u64, &head.to_ne_bytes())
    }

    /// The launcher (for buffers: `alloc_zeroed`, `read`).
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    /// The launcher, to change its simulator settings (seed, workers); the
    /// heap's binding is kept.
    pub fn launcher_mut(&mut self) -> &mut Launcher {
        &mut self.launcher
    }

    /// The heap's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Launches `args`' kernel on `grid` × `block` with this heap and waits
    /// for it.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: the parameters must be valid for the kernel.
    pub unsafe fn launch<K: Kernel>(
        &mut self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: K,
    ) -> Result<LaunchReport, HostError> {
        if let Device::Sim(p) = self.device {
            self.launcher.simulator_config().binding = p.as_ptr().expose_provenance();
        }
        server::wake();
        // SAFETY: forwarded from the caller.
        let report = unsafe { self.launcher.launch(grid, block, args) }?;
        self.quiesce()?;
        Ok(report)
    }

    /// Waits until the server has taken every request of the mailbox: a
    /// kernel's `FREE`s do not wait for their answers, so some may still be
    /// in flight when the kernel ends.
    fn quiesce(&self) -> Result<(), HostError> {
        let ports = self.ports();
        let count = match &self.mailbox {
            Mailbox::Host(p) => p.len(),
            Mailbox::Pinned(p) => p.len() / size_of::<Port>(),
        };
        let start = std::time::Instant::now();
        for i in 0..count {
            // SAFETY: `i < count` ports of the mailbox we own.
            let port = unsafe { &*ports.add(i) };
            while port.client.load(warpalloc_device::sync::Ordering::Acquire)
                != port.server.load(warpalloc_device::sync::Ordering::Acquire)
            {
                if start.elapsed() > std::time::Duration::from_secs(30) {
                    return Err(HostError::Server(std::io::Error::other(
                        "the RPC server did not answer a request within 30 s",
                    )));
                }
                server::wake();
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Sets every `n`-th mapping to fail (0: none), for fault injection.
    pub fn fail_every(&self, n: u64) {
        lock(&self.region).fail_every(n);
    }

    /// The heap's figures (between launches).
    pub fn stats(&self) -> Result<HeapStats, HostError> {
        let region = lock(&self.region).stats();
        let rpc = RpcCounts {
            allocs: self.counters.allocs.load(Ordering::Relaxed),
            frees: self.counters.frees.load(Ordering::Relaxed),
            pings: self.counters.pings.load(Ordering::Relaxed),
            unknown: self.counters.unknown.load(Ordering::Relaxed),
        };
        match self.device {
            Device::Sim(_) => {
                let d = self.sim_device();
                Ok(HeapStats {
                    region,
                    device: d.errors(),
                    traffic: d.traffic(),
                    cached_slabs: d.cached_slabs() as u64,
                    pool_slabs: d.pool_len() as u64,
                    rpc,
                })
            }
            Device::Gpu { global } => {
                let Some(gpu) = self.gpu() else {
                    return Err(HostError::InvalidPtx("a GPU heap without a GPU".into()));
                };
                let mut words = [0u8; 80];
                gpu.read(global + LAYOUT.errors as u64, &mut words)?;
                let w = |i: usize| {
                    u64::from_ne_bytes(words[8 * i..8 * i + 8].try_into().unwrap_or_default())
                };
                let mut cache = vec![0u8; 8 * MAX_CACHE];
                gpu.read(global + LAYOUT.cache as u64, &mut cache)?;
                let cached = cache
                    .chunks_exact(8)
                    .filter(|c| c.iter().any(|&b| b != 0))
                    .count();
                Ok(HeapStats {
                    region,
                    device: Errors::from_words([w(0), w(1), w(2), w(3)]),
                    traffic: Traffic::from_words([w(4), w(5), w(6), w(7), w(8), w(9)]),
                    cached_slabs: cached as u64,
                    pool_slabs: 0,
                    rpc,
                })
            }
        }
    }

    /// Gives the device's cached slabs back to the region and unmaps every
    /// mapped chunk that is free (between launches). Returns the bytes
    /// unmapped. In pool mode the pool's slabs stay, cached or not: they are
    /// the pool.
    pub fn trim(&mut self) -> Result<u64, HostError> {
        let mut taken = Vec::new();
        match self.device {
            // Pool mode: cached slabs are pool slabs; they stay.
            _ if matches!(self.mode, Mode::Pool { .. }) => {}
            Device::Sim(_) => {
                self.sim_device().take_cached(|slab| taken.push(slab));
            }
            Device::Gpu { global } => {
                let Some(gpu) = self.gpu() else {
                    return Ok(0);
                };
                let mut cache = vec![0u8; 8 * MAX_CACHE];
                gpu.read(global + LAYOUT.cache as u64, &mut cache)?;
                taken.extend(
                    cache
                        .chunks_exact(8)
                        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
                        .filter(|&s| s != 0),
                );
                gpu.write(global + LAYOUT.cache as u64, &vec![0u8; 8 * MAX_CACHE])?;
            }
        }
        let mut region = lock(&self.region);
        for slab in taken {
            // A refusal here would mean the device cached something the
            // region never handed out; the region counts it.
            let _ = region.free(slab, CHUNK);
        }
        Ok(region.trim()?)
    }

    /// The region's base and length (where every device allocation lies).
    pub fn region(&self) -> (u64, u64) {
        let r = lock(&self.region);
        (r.base(), r.len())
    }

    /// The mailbox's ports (for tests and benchmarks that talk to the server
    /// directly).
    pub fn ports(&self) -> *const Port {
        self.mailbox.ports()
    }

    /// The host-side device heap (simulator only).
    pub fn device_heap(&self) -> Option<&DeviceHeap> {
        match self.device {
            Device::Sim(_) => Some(self.sim_device()),
            Device::Gpu { .. } => None,
        }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        if let Device::Sim(p) = self.device {
            // The registration is still live here (fields drop after this),
            // but no launch runs (launches are synchronous) and the server
            // never touches the device heap.
            // SAFETY: leaked from a Box in `new`, freed once, here.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}
