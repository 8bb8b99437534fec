//! The emulated device: a [`Device`] whose kernels run in the CPU warp
//! simulator, so that everything above the device interface runs in CI.
//!
//! ```text
//!   load_module(ptx) ── parse the PTX (ptx.rs): entry points, .global
//!        │              declarations with alignment, size, initial bytes
//!        ▼
//!   EmulatedModule ── one host block per .visible global, laid out as the
//!        │            PTX declares it (a host/device layout disagreement
//!        │            shows here, as it would on the GPU)
//!        └─ launch(kernel) ── the kernel compiled into this program, run by
//!                             the simulator, its lanes bound to the module's
//!                             WARPALLOC_HEAP (api::heap reads the binding)
//!   device memory:  host blocks (alloc_zeroed, mapped_host: device address =
//!                   host address) and HostEmulated (a heap's region)
//! ```
//!
//! The module's `WARPALLOC_HEAP` is registered (`warpalloc_device::registry`)
//! so that `WarpAlloc` in this program frees a heap's pointers into that heap
//! wherever they are freed. A module whose `WARPALLOC_HEAP` is smaller or
//! less aligned than this program's `DeviceHeap` is not bound to its
//! launches (their allocations return null) and a `Heap` refuses it.

use std::alloc::{Layout, alloc_zeroed, dealloc};

use warpalloc_device::abi::HEAP_SYMBOL;
use warpalloc_device::heap::LAYOUT;
use warpalloc_device::registry;
use warpalloc_sim::LaunchConfig;

use super::ptx::{self, PtxModule};
use super::{
    Allocation, Device, DeviceInfo, DevicePtr, Global, HostMapping, Launch, LaunchReport, Module,
};
use crate::HostError;
use crate::backing::{Backing, HostEmulated};

/// The emulated device's memory unless told otherwise.
pub const DEFAULT_MEMORY: u64 = 16 << 30;

/// The CPU warp simulator as a device.
pub struct Emulated {
    info: DeviceInfo,
}

impl Emulated {
    /// An emulated device with `memory` bytes of device memory (what its
    /// heaps' backings may map).
    pub fn new(memory: u64) -> Emulated {
        Emulated {
            info: DeviceInfo {
                ordinal: 0,
                name: "CPU warp simulator (emulated device; CPU figures, not GPU speed)".into(),
                compute_capability: (0, 0),
                total_memory: memory,
                // A small GPU's shape: 2 SMs of 512 threads, 32 resident
                // warps (and so 32 RPC ports, 16 stress blocks, bench
                // defaults of 256 to 4 096 threads).
                multiprocessors: 2,
                max_threads_per_multiprocessor: 512,
                driver_version: 0,
                vmm_supported: true,
                emulated: true,
            },
        }
    }
}

impl Default for Emulated {
    fn default() -> Self {
        Emulated::new(DEFAULT_MEMORY)
    }
}

/// Zeroed, aligned host memory standing for device memory.
struct HostBlock {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: plain memory owned by this value; users reach it through raw
// device addresses, as on a GPU.
unsafe impl Send for HostBlock {}
// SAFETY: as for Send.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    fn new(bytes: usize, align: usize) -> Result<HostBlock, HostError> {
        let layout = Layout::from_size_align(bytes.max(1), align.max(1)).map_err(|e| {
            HostError::InvalidPtx(format!(
                "no host block of {bytes} bytes aligned to {align}: {e}"
            ))
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(HostError::OutOfHostMemory(bytes));
        }
        Ok(HostBlock { ptr, layout })
    }

    fn addr(&self) -> DevicePtr {
        self.ptr.expose_provenance() as u64
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once, here.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

impl Allocation for HostBlock {
    fn addr(&self) -> DevicePtr {
        HostBlock::addr(self)
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}

impl HostMapping for HostBlock {
    fn host(&self) -> *mut u8 {
        self.ptr
    }
    fn device(&self) -> DevicePtr {
        HostBlock::addr(self)
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Device for Emulated {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn load_module(&self, text: &str) -> Result<Box<dyn Module>, HostError> {
        let parsed = ptx::parse(text).map_err(HostError::InvalidPtx)?;
        EmulatedModule::new(parsed).map(|m| Box::new(m) as Box<dyn Module>)
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<Box<dyn Allocation>, HostError> {
        Ok(Box::new(HostBlock::new(bytes, 256)?))
    }

    unsafe fn write(&self, dst: DevicePtr, bytes: &[u8]) -> Result<(), HostError> {
        // SAFETY: the caller's contract: `dst` is writable memory of this
        // device, which is host memory, of `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                std::ptr::with_exposed_provenance_mut(dst as usize),
                bytes.len(),
            )
        };
        Ok(())
    }

    unsafe fn read(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), HostError> {
        // SAFETY: the caller's contract: `src` is readable memory of this
        // device, which is host memory, of `out.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::with_exposed_provenance(src as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    fn mapped_host(&self, bytes: usize) -> Result<Box<dyn HostMapping>, HostError> {
        Ok(Box::new(HostBlock::new(bytes, 4096)?))
    }

    fn backing(&self) -> Result<Box<dyn Backing>, HostError> {
        Ok(Box::new(HostEmulated::new(self.info.total_memory)?))
    }

    fn synchronize(&self) -> Result<(), HostError> {
        // Launches return when their kernels have ended.
        Ok(())
    }
}

/// An emulated module: its visible globals as host blocks.
pub struct EmulatedModule {
    /// Dropped before `globals` (field order): unregisters the heap first.
    _registration: Option<registry::Registration>,
    globals: Vec<(String, HostBlock)>,
    entries: Vec<String>,
    /// The address of `WARPALLOC_HEAP` when it can hold this program's
    /// `DeviceHeap`: the launches' binding.
    heap: Option<DevicePtr>,
}

impl EmulatedModule {
    fn new(parsed: PtxModule) -> Result<EmulatedModule, HostError> {
        let mut globals = Vec::new();
        for g in parsed.globals.iter().filter(|g| g.visible) {
            if g.symbolic {
                return Err(HostError::InvalidPtx(format!(
                    "the global `{}` is initialised with symbol addresses, which the emulated \
                     device cannot relocate",
                    g.name
                )));
            }
            let block = HostBlock::new(g.size, g.align)?;
            // SAFETY: `init` is at most `size` bytes (the parser checks), and
            // the block is ours.
            unsafe { std::ptr::copy_nonoverlapping(g.init.as_ptr(), block.ptr, g.init.len()) };
            globals.push((g.name.clone(), block));
        }
        let heap = globals
            .iter()
            .find(|(name, _)| name == HEAP_SYMBOL)
            .filter(|(_, b)| {
                b.layout.size() as u64 >= LAYOUT.size && b.layout.align() as u64 >= LAYOUT.align
            })
            .map(|(_, b)| b.addr());
        let registration = match heap {
            // SAFETY: the block holds a zeroed (hence valid, unbound)
            // `DeviceHeap` of this program's layout, and lives until the
            // module drops, which drops the registration first.
            Some(addr) => Some(
                unsafe { registry::register(std::ptr::with_exposed_provenance(addr as usize)) }
                    .map_err(|_| HostError::TooManyHeaps(registry::CAPACITY))?,
            ),
            None => None,
        };
        Ok(EmulatedModule {
            _registration: registration,
            globals,
            entries: parsed.entries,
            heap,
        })
    }
}

impl Module for EmulatedModule {
    fn global(&self, name: &str) -> Result<Global, HostError> {
        self.globals
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| Global {
                addr: b.addr(),
                size: b.layout.size(),
            })
            .ok_or_else(|| HostError::MissingSymbol {
                what: "global",
                name: name.to_string(),
            })
    }

    fn has_kernel(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e == name)
    }

    unsafe fn launch(
        &self,
        kernel: &mut dyn Launch,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        sim: &LaunchConfig,
    ) -> Result<LaunchReport, HostError> {
        if !self.has_kernel(kernel.name()) {
            return Err(HostError::MissingSymbol {
                what: "kernel",
                name: kernel.name().to_string(),
            });
        }
        let mut cfg = sim.clone();
        cfg.grid_dim = grid;
        cfg.block_dim = block;
        cfg.binding = self.heap.map_or(0, |a| a as usize);
        // SAFETY: forwarded from the caller; the binding is the module's
        // heap, which outlives the launch (we borrow the module).
        let stats = unsafe { kernel.simulate(&cfg) }?;
        Ok(LaunchReport {
            elapsed: stats.elapsed,
            simulator: Some(stats),
        })
    }
}
