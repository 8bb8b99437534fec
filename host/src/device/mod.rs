//! The one device interface: everything the host does to a device goes
//! through [`Device`] and [`Module`], with two implementations.
//!
//! ```text
//!   Heap, Launcher, the warpalloc tool          (one code path)
//!        │
//!        ▼
//!   Device ── info, load_module, alloc_zeroed, read, write, mapped_host,
//!   Module ── global, launch                         backing, synchronize
//!        ├── Cuda      (cuda.rs)      the CUDA driver through cudarc: thin
//!        │                            `Result` calls, RAII types whose Drop
//!        │                            records the driver's error
//!        └── Emulated  (emulated.rs)  the CPU warp simulator: module globals
//!                                     are host buffers sized from the PTX's
//!                                     `.global` declarations, device memory
//!                                     is `HostEmulated`, launches run the
//!                                     kernels compiled into this program
//! ```
//!
//! CI has no GPU, so everything above the trait runs there on the emulated
//! device; only the raw driver calls in `cuda.rs` wait for a GPU. Device
//! addresses are `u64`s on both (the emulated device's are host addresses).

pub mod cuda;
pub mod emulated;
pub mod ptx;

use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use warpalloc_device::kernel::Kernel;
use warpalloc_device::registry;
use warpalloc_sim::{LaunchConfig, LaunchStats, SimError};

use crate::HostError;
use crate::backing::Backing;

pub use cuda::{Cuda, driver_present, open_gpu};
pub use emulated::Emulated;

/// A device address.
pub type DevicePtr = u64;

/// What a device is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal (0 for the emulated device).
    pub ordinal: usize,
    /// Its name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Resident threads per multiprocessor.
    pub max_threads_per_multiprocessor: u32,
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0 (0: emulated).
    pub driver_version: i32,
    /// Whether the device supports CUDA's virtual memory management.
    pub vmm_supported: bool,
    /// Whether this is the emulated device (the CPU warp simulator).
    pub emulated: bool,
}

impl DeviceInfo {
    /// Warps that can be resident on the whole device at once.
    pub fn resident_warps(&self) -> u64 {
        u64::from(self.max_threads_per_multiprocessor / 32) * u64::from(self.multiprocessors)
    }
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.emulated {
            return write!(f, "{}", self.name);
        }
        write!(
            f,
            "GPU {}: {} (sm_{}{}, {} SMs, {:.1} GiB, driver {}.{})",
            self.ordinal,
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.multiprocessors,
            self.total_memory as f64 / f64::from(1u32 << 30),
            self.driver_version / 1000,
            self.driver_version % 1000 / 10
        )
    }
}

/// A module global: its device address and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Global {
    /// Device address.
    pub addr: DevicePtr,
    /// Bytes.
    pub size: usize,
}

/// What [`read_global`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalRead {
    /// The global, of the expected size, read.
    Read,
    /// The module has no global of that name.
    Missing,
    /// The global has another size: its bytes (nothing was read).
    Size(usize),
}

/// Reads the `u64` words of `module`'s global `name` into `out`, which
/// must be its exact size: [`GlobalRead::Missing`] where the module has no
/// such global, [`GlobalRead::Size`] where its size differs (nothing read),
/// other driver errors as errors.
///
/// # Safety
/// `module` was loaded on `device`, and no kernel writes the global
/// meanwhile (the caller synchronised).
pub unsafe fn read_global(
    device: &dyn Device,
    module: &dyn Module,
    name: &str,
    out: &mut [u64],
) -> Result<GlobalRead, HostError> {
    let global = match module.global(name) {
        Ok(global) => global,
        Err(HostError::MissingSymbol { .. }) => return Ok(GlobalRead::Missing),
        Err(e) => return Err(e),
    };
    if global.size != 8 * out.len() {
        return Ok(GlobalRead::Size(global.size));
    }
    // SAFETY: a global of `module`, on `device`, of exactly `out`'s size
    // (checked above); no kernel writes it (the caller's contract).
    unsafe { device.read(global.addr, bytemuck::cast_slice_mut(out)) }?;
    Ok(GlobalRead::Read)
}

/// What one launch did.
#[derive(Debug, Clone, Copy)]
pub struct LaunchReport {
    /// Wall time from launch to completion, on the host's clock.
    pub elapsed: Duration,
    /// On a GPU, the kernel's own time: between two CUDA events recorded
    /// on the launch's stream just before and after it, as CUDA programs
    /// time kernels (`None` in the simulator).
    pub kernel_time: Option<Duration>,
    /// The simulator's counters (`None` on a GPU).
    pub simulator: Option<LaunchStats>,
}

impl LaunchReport {
    /// The launch's time: the kernel's own on a GPU (`kernel_time`), the
    /// wall time elsewhere.
    pub fn time(&self) -> Duration {
        self.kernel_time.unwrap_or(self.elapsed)
    }

    /// What [`LaunchReport::time`] was measured by.
    pub fn clock(&self) -> Clock {
        match self.kernel_time {
            Some(_) => Clock::CudaEvents,
            None => Clock::Host,
        }
    }
}

/// What timed a launch ([`LaunchReport::clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// Two CUDA events on the launch's stream, around the kernel.
    CudaEvents,
    /// The host's wall clock around the launch and its completion.
    Host,
}

impl Clock {
    /// Its name in reports: "cuda events" or "host clock".
    pub fn name(self) -> &'static str {
        match self {
            Clock::CudaEvents => "cuda events",
            Clock::Host => "host clock",
        }
    }
}

/// A kernel's parameters with the type erased: what a [`Module`] launches.
/// Every [`Kernel`] is one.
pub trait Launch {
    /// The entry point's symbol.
    fn name(&self) -> &'static str;
    /// Pointers to each parameter, in declaration order (for
    /// `cuLaunchKernel`); valid while `self` is not moved.
    fn params(&mut self) -> Vec<*mut c_void>;
    /// Runs the kernel in the simulator.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: the parameters must be valid for the whole
    /// launch.
    unsafe fn simulate(&self, cfg: &LaunchConfig) -> Result<LaunchStats, SimError>;
}

impl<K: Kernel> Launch for K {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn params(&mut self) -> Vec<*mut c_void> {
        let mut params = Vec::new();
        self.for_each_param(&mut |p| params.push(p));
        params
    }

    unsafe fn simulate(&self, cfg: &LaunchConfig) -> Result<LaunchStats, SimError> {
        // SAFETY: forwarded from the caller.
        unsafe { Kernel::simulate(*self, cfg) }
    }
}

/// Device memory owned by the host program; freed on drop.
///
/// # Safety
/// An implementation's `addr()..addr() + len()` is memory of the device
/// that made it, readable and writable, for as long as it lives: the
/// host's copies to and from it trust that.
pub unsafe trait Allocation: Send + Sync {
    /// Its device address.
    fn addr(&self) -> DevicePtr;
    /// Its size in bytes.
    fn len(&self) -> usize;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Host memory the device addresses directly (the RPC mailbox), zeroed when
/// made; freed on drop.
///
/// # Safety
/// An implementation's `host()..host() + len()` is host memory, readable
/// and writable, 8-byte aligned, for as long as it lives, and `device()`
/// the device's address of the same bytes: the RPC server reads and writes
/// it through `host()` while kernels use `device()`.
pub unsafe trait HostMapping: Send + Sync {
    /// The host's address.
    fn host(&self) -> *mut u8;
    /// The device's address of the same bytes.
    fn device(&self) -> DevicePtr;
    /// Its size in bytes.
    fn len(&self) -> usize;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A device: a GPU through the CUDA driver, or the emulated one.
///
/// # Safety
/// What an implementation hands out is what it says: `alloc_zeroed`'s
/// allocations, `mapped_host`'s mappings and `load_module`'s modules are
/// of this device (their own traits' contracts), and `backing`'s addresses
/// are this device's memory once mapped — the heap writes slab headers
/// there through `write`.
pub unsafe trait Device: Send + Sync {
    /// What it is.
    fn info(&self) -> &DeviceInfo;

    /// Loads a PTX module (the driver JIT-compiles it; the emulated device
    /// allocates its globals and runs the kernels compiled into this
    /// program under their entry points' names).
    fn load_module(&self, ptx: &str) -> Result<Arc<dyn Module>, HostError>;

    /// `bytes` of zeroed device memory.
    fn alloc_zeroed(&self, bytes: usize) -> Result<Box<dyn Allocation>, HostError>;

    /// Copies `bytes` to device address `dst` and waits.
    ///
    /// # Safety
    /// `dst..dst + bytes.len()` lies in memory of this device that the
    /// caller may write: a module global, an allocation, or mapped granules
    /// of a backing; no kernel uses it meanwhile.
    unsafe fn write(&self, dst: DevicePtr, bytes: &[u8]) -> Result<(), HostError>;

    /// Copies `out.len()` bytes from device address `src` and waits.
    ///
    /// # Safety
    /// `src..src + out.len()` lies in memory of this device (as for
    /// [`Device::write`]) that no kernel writes meanwhile.
    unsafe fn read(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), HostError>;

    /// `bytes` of zeroed host memory that the device addresses directly,
    /// polled by the host (not write-combined).
    fn mapped_host(&self, bytes: usize) -> Result<Box<dyn HostMapping>, HostError>;

    /// The memory behind a heap's region: reserve address space once, map
    /// granules on demand (CUDA's VMM, or its host emulation).
    fn backing(&self) -> Result<Box<dyn Backing>, HostError>;

    /// Waits until every launch on this device's context has finished, on
    /// every stream (`cuCtxSynchronize`, which also reports a kernel's
    /// fault; the emulated device only waits: its program's context
    /// reports a failed launch).
    fn synchronize(&self) -> Result<(), HostError>;

    /// How many launches queued on the context's streams have failed so
    /// far (the emulated device: a lane's panic, the simulator's watchdog).
    /// A heap that sees the count move repairs itself as after a launch of
    /// its own that failed (`Heap::launch`). On a GPU, 0: a kernel's fault
    /// loses the context, and the heap with it.
    fn failed_launches(&self) -> u64 {
        0
    }

    /// Registers a device heap at `heap` with this process's
    /// `warpalloc_device::registry`, when device memory is this process's
    /// memory (the emulated device), so that `WarpAlloc` on the host frees
    /// the heap's pointers into it; `None` on a GPU.
    ///
    /// # Safety
    /// `heap` holds a `DeviceHeap` of this program's layout that outlives the
    /// registration.
    unsafe fn register_heap(
        &self,
        heap: DevicePtr,
    ) -> Result<Option<registry::Registration>, HostError> {
        let _ = heap;
        Ok(None)
    }

    /// The implementation, for the code that attaches a user's own handles
    /// (a cudarc module links only to a heap on a CUDA device).
    fn as_any(&self) -> &dyn Any;
}

/// What a [`Heap`](crate::Heap) attaches to: a device context — the user's
/// `Arc<cudarc::driver::CudaContext>`, the emulated context
/// (`warpalloc::emulated::CudaContext`), or a [`Device`] itself.
pub trait AsDevice {
    /// The context as a device.
    fn as_device(&self) -> Result<Arc<dyn Device>, HostError>;
}

impl AsDevice for Arc<dyn Device> {
    fn as_device(&self) -> Result<Arc<dyn Device>, HostError> {
        Ok(Arc::clone(self))
    }
}

/// What a heap links: a loaded module whose kernels allocate — the user's
/// `Arc<cudarc::driver::CudaModule>`, an emulated `CudaModule`, or a
/// [`Module`] itself.
pub trait AsModule {
    /// The module, on `device` (the heap's).
    fn as_module(&self, device: &dyn Device) -> Result<Arc<dyn Module>, HostError>;
}

impl AsModule for Arc<dyn Module> {
    fn as_module(&self, device: &dyn Device) -> Result<Arc<dyn Module>, HostError> {
        if !self.is_on(device) {
            return Err(HostError::WrongDevice(
                "a module links only to a heap on the device that loaded it",
            ));
        }
        Ok(Arc::clone(self))
    }
}

/// A loaded module.
///
/// # Safety
/// An implementation's `global` names memory of the device that loaded it:
/// `addr..addr + size` readable and writable for as long as the module
/// lives (a heap reads its layout and writes its link there), and
/// `is_on` is true only of that device.
pub unsafe trait Module: Send + Sync {
    /// The global `name`.
    fn global(&self, name: &str) -> Result<Global, HostError>;

    /// Whether the module was loaded on `device`: a heap links only a
    /// module of its own device, whose globals its copies can reach.
    fn is_on(&self, device: &dyn Device) -> bool;

    /// Whether the module has the entry point `name`.
    fn has_kernel(&self, name: &str) -> bool;

    /// Launches `kernel` on `grid` × `block` and waits for it. `sim` holds
    /// the simulator's settings (seed, workers, convergence...; its grid,
    /// block and binding are the launch's own): the emulated device uses
    /// them, a GPU ignores them.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: the parameters must be valid for the kernel
    /// (device addresses of memory sized as it needs) until it ends.
    unsafe fn launch(
        &self,
        kernel: &mut dyn Launch,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        sim: &LaunchConfig,
    ) -> Result<LaunchReport, HostError>;
}
