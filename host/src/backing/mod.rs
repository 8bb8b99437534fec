//! Where the heap's memory physically comes from.
//!
//! ```text
//!   Region (region.rs) ── the logic both backings share: one reserved range,
//!     │                   granule states, aligned runs, a free list of mapped
//!     │                   granules reused without driver calls, limit/headroom
//!     │                   checks, fault injection, statistics, trim
//!     ▼
//!   Backing (trait) ── only what talks to the driver or the kernel:
//!     ├── CudaVmm      cuMemAddressReserve / cuMemCreate / cuMemMap /
//!     │                cuMemSetAccess / cuMemUnmap / cuMemRelease
//!     │                (spill: cuMemCreate at a host location)
//!     └── HostEmulated mmap(PROT_NONE) reservation, a memfd per physical
//!                      granule mapped with MAP_FIXED — the simulator's GPU
//! ```
//!
//! # Spill
//! With `RegionConfig::spill`, a granule the device's memory has no room
//! for (the limit, the headroom, or the driver refusing device memory) is
//! backed by pinned host memory mapped at the same place in the region
//! (`Backing::map_host`): the device reads and writes it over the bus,
//! slower, instead of getting null. Spilled bytes are counted apart from
//! device memory (the limit holds device memory only); a spill is refused
//! when it would leave the host less free memory than
//! `max(4 GiB, a tenth of its memory)`
//! ([`spill_floor`]). A spilled granule, once free, is reused like any
//! free granule until `trim`, which gives spilled granules back first.
//!
//! Memory moves in granules of [`GRANULE`] bytes (2 MiB, the allocator's slab
//! size). A physical granule that is unmapped goes to a spare list and may be
//! mapped again at another address. While kernels run, a free physical
//! granule can also move to another address (`remap`: mapped there too, its
//! old address left as an alias until `trim` unmaps it), so that memory
//! freed in scattered granules serves a run of them without unmapping.
//!
//! The deadlock rule (DESIGN.md): `Region::allocate` and `Region::free` run on
//! the RPC server thread while kernels spin. `allocate` may create and map
//! memory; nothing in them frees or synchronises, and nothing unmaps what
//! was handed out. One exception, on a failure path: a map whose access
//! could not be set is undone (`cuMemUnmap` of the range just mapped, which
//! no kernel was given), on the server thread. Whether the driver's unmap
//! waits for running work is not documented; it has not been seen to (no
//! GPU run has met that failure). Only `trim` (called when no kernel of the
//! heap runs) unmaps what was handed out and releases.

mod cuda_vmm;
mod free_set;
mod host_emulated;
mod region;

pub use cuda_vmm::CudaVmm;
pub use host_emulated::HostEmulated;
pub use region::{Refusal, Region, RegionConfig, RegionStats};

/// Bytes of a granule: the allocator's slab size.
pub const GRANULE: u64 = warpalloc_device::size_class::SLAB_SIZE;

/// Why a backing operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {message}")]
    Driver {
        /// The call.
        call: &'static str,
        /// The driver's error, or cudarc's panic message.
        message: String,
        /// The driver's code (none when cudarc panicked).
        code: Option<cudarc::driver::sys::CUresult>,
    },
    /// An operating system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The call.
        call: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The device does not support what the backing needs.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An address or size the backing did not hand out.
    #[error("bad request: {0}")]
    BadRequest(String),
}

/// The host's memory, for the spill check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostMemory {
    /// Bytes available to new allocations (Linux: `MemAvailable`).
    pub available: u64,
    /// Bytes of memory in all (`MemTotal`).
    pub total: u64,
}

/// The host memory a spill must leave free: a tenth of the host's memory,
/// at least 4 GiB.
pub fn spill_floor(host: HostMemory) -> u64 {
    (host.total / 10).max(4 << 30)
}

impl HostMemory {
    /// This machine's, from `/proc/meminfo` (`None` where it cannot be
    /// read: a spill is then refused).
    pub fn of_this_machine() -> Option<HostMemory> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.trim().strip_suffix("kB"))
                .and_then(|kib| kib.trim().parse::<u64>().ok())
                .map(|kib| kib << 10)
        };
        Some(HostMemory {
            available: field("MemAvailable:")?,
            total: field("MemTotal:")?,
        })
    }
}

/// Driver (or kernel) calls a backing has made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCalls {
    /// Physical granules created.
    pub creates: u64,
    /// Granules mapped (with access set).
    pub maps: u64,
    /// Granules unmapped.
    pub unmaps: u64,
    /// Physical granules released.
    pub releases: u64,
    /// Physical granules mapped at a second address (`Backing::remap`).
    pub remaps: u64,
    /// Granules mapped with host memory (`Backing::map_host`; counted in
    /// `maps` too).
    pub host_maps: u64,
}

/// The driver-facing half of a region: address space and physical granules.
pub trait Backing: Send {
    /// Reserves `bytes` of address space aligned to [`GRANULE`]; returns its
    /// base. Called once.
    fn reserve(&mut self, bytes: u64) -> Result<u64, BackingError>;

    /// Backs the granule at `addr` (inside the reservation, unmapped) with a
    /// physical granule (a spare one if any), readable and writable by the
    /// device.
    fn map(&mut self, addr: u64) -> Result<(), BackingError>;

    /// Backs the granule at `addr` (inside the reservation, unmapped) with
    /// a physical granule of pinned host memory (a spare host one if any),
    /// readable and writable by the device: a spill. Its physical granule
    /// stays host memory through `remap` and `adopt`, and becomes a spare
    /// host granule when unmapped (never device memory). Default: not
    /// supported.
    fn map_host(&mut self, addr: u64) -> Result<(), BackingError> {
        Err(BackingError::Unsupported(format!(
            "this backing cannot map host memory (at {addr:#x})"
        )))
    }

    /// Whether the backing can map host memory (`map_host`): `Ok`, or why
    /// not. Called once, before any spill (a heap that spills calls it at
    /// attach). Default: not supported.
    fn probe_host(&mut self) -> Result<(), BackingError> {
        Err(BackingError::Unsupported(
            "this backing cannot map host memory".into(),
        ))
    }

    /// The host's memory now, for the spill check (default: this
    /// machine's).
    fn host_memory(&self) -> Option<HostMemory> {
        HostMemory::of_this_machine()
    }

    /// Unmaps the granule at `addr`. Its physical granule becomes a spare,
    /// unless `addr` was left behind by a [`Backing::remap`] (the physical
    /// granule is still mapped where it moved to).
    fn unmap(&mut self, addr: u64) -> Result<(), BackingError>;

    /// Moves the physical granule mapped at `from` to `to` (inside the
    /// reservation, unmapped) without unmapping anything: it is mapped at
    /// `to` too, readable and writable, and `from` stays mapped to it until
    /// `unmap(from)` — an alias that nothing may use, since its bytes are
    /// `to`'s. No physical memory is created, and nothing synchronises
    /// (unmapping is for `trim`, between launches).
    fn remap(&mut self, from: u64, to: u64) -> Result<(), BackingError>;

    /// Makes `alias` — an address a [`Backing::remap`] left mapped to the
    /// physical granule now at `owner` — that granule's address again, and
    /// `owner` an alias of it. Bookkeeping only: both stay mapped.
    fn adopt(&mut self, alias: u64, owner: u64) -> Result<(), BackingError>;

    /// Releases every spare physical granule; returns how many.
    fn release_spares(&mut self) -> Result<u64, BackingError>;

    /// Unmaps whatever is mapped, releases every physical granule and the
    /// reservation (on drop of the region).
    fn free_reservation(&mut self) -> Result<(), BackingError>;

    /// Device memory free now, if known (for the headroom check).
    fn free_device_memory(&self) -> Option<u64>;

    /// The device's memory in bytes (the default reserve is twice this).
    fn device_memory(&self) -> u64;

    /// Calls made so far.
    fn calls(&self) -> DriverCalls;
}

impl<B: Backing + ?Sized> Backing for Box<B> {
    fn reserve(&mut self, bytes: u64) -> Result<u64, BackingError> {
        (**self).reserve(bytes)
    }
    fn map(&mut self, addr: u64) -> Result<(), BackingError> {
        (**self).map(addr)
    }
    fn map_host(&mut self, addr: u64) -> Result<(), BackingError> {
        (**self).map_host(addr)
    }
    fn probe_host(&mut self) -> Result<(), BackingError> {
        (**self).probe_host()
    }
    fn host_memory(&self) -> Option<HostMemory> {
        (**self).host_memory()
    }
    fn unmap(&mut self, addr: u64) -> Result<(), BackingError> {
        (**self).unmap(addr)
    }
    fn remap(&mut self, from: u64, to: u64) -> Result<(), BackingError> {
        (**self).remap(from, to)
    }
    fn adopt(&mut self, alias: u64, owner: u64) -> Result<(), BackingError> {
        (**self).adopt(alias, owner)
    }
    fn release_spares(&mut self) -> Result<u64, BackingError> {
        (**self).release_spares()
    }
    fn free_reservation(&mut self) -> Result<(), BackingError> {
        (**self).free_reservation()
    }
    fn free_device_memory(&self) -> Option<u64> {
        (**self).free_device_memory()
    }
    fn device_memory(&self) -> u64 {
        (**self).device_memory()
    }
    fn calls(&self) -> DriverCalls {
        (**self).calls()
    }
}
