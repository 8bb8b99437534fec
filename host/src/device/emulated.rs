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
//!                             the simulator, its lanes bound to the heap the
//!                             module's WARPALLOC_HEAP links (api::heap reads
//!                             the binding)
//!   device memory:  host blocks (alloc_zeroed, mapped_host: device address =
//!                   host address) and HostEmulated (a heap's region)
//! ```
//!
//! A heap on the emulated device is registered (`warpalloc_device::registry`)
//! so that `WarpAlloc` in this program frees the heap's pointers into it
//! wherever they are freed. Launches may run on several threads at once
//! (streams, `crate::emulated`): [`Emulated::synchronize`] waits for all of
//! them.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use warpalloc_device::abi::HEAP_SYMBOL;
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
    /// Work in progress (launches, queued stream work), shared with the
    /// modules: what `synchronize` waits for.
    activity: Arc<Activity>,
    /// Bytes of its memory in use: every heap's backing (their granules)
    /// and every buffer (`alloc_zeroed`), as a GPU's free memory counts
    /// them all.
    in_use: Arc<AtomicU64>,
}

/// Work in progress on an emulated device.
#[derive(Default)]
pub(crate) struct Activity {
    work: Mutex<Work>,
    /// Signalled when the work running drops to 0.
    ended: Condvar,
}

/// [`Activity`]'s counts, under its lock.
#[derive(Default)]
struct Work {
    /// Launches running or queued now (on streams' threads or callers').
    running: usize,
    /// Memory dropped by the program while work ran: freed once none runs
    /// ([`Activity::release`]).
    dropped: Vec<Arc<dyn Allocation>>,
    /// Launches on streams that failed, ever.
    failures: u64,
    /// The first of them since the last `synchronize` of the context.
    first_failure: Option<HostError>,
}

impl Activity {
    /// Counts one piece of work until [`Activity::end`].
    pub(crate) fn begin(&self) {
        self.work
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .running += 1;
    }

    /// Ends what [`Activity::begin`] counted; the last to end frees the
    /// memory dropped meanwhile.
    pub(crate) fn end(&self) {
        let mut work = self.work.lock().unwrap_or_else(PoisonError::into_inner);
        work.running = work.running.saturating_sub(1);
        if work.running == 0 {
            self.ended.notify_all();
            let dropped = std::mem::take(&mut work.dropped);
            drop(work);
            drop(dropped);
        }
    }

    /// Frees `memory` once no work runs: at once if none does, else when
    /// the last piece running or queued now ends. A slice the program drops
    /// while a queued kernel may still use it (through an address from
    /// `device_ptr`, which keeps nothing alive) stays valid until then, as
    /// cudarc frees it on its stream after the work queued before the drop
    /// (a review, 2026-12-08: the kernel wrote freed host memory).
    pub(crate) fn release(&self, memory: Arc<dyn Allocation>) {
        let mut work = self.work.lock().unwrap_or_else(PoisonError::into_inner);
        if work.running == 0 {
            drop(work);
            drop(memory);
        } else {
            work.dropped.push(memory);
        }
    }

    /// Counts work until the guard drops (also on a panic).
    pub(crate) fn guard(&self) -> Running<'_> {
        self.begin();
        Running(self)
    }

    /// Records a launch on a stream that failed (its stream reports it
    /// too, at its own `synchronize`).
    pub(crate) fn fail(&self, error: HostError) {
        let mut work = self.work.lock().unwrap_or_else(PoisonError::into_inner);
        work.failures += 1;
        work.first_failure.get_or_insert(error);
    }

    fn failures(&self) -> u64 {
        self.work
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failures
    }

    /// Waits until no work runs; the first failure since the last call.
    fn wait_idle_and_take_failure(&self) -> Option<HostError> {
        self.wait_idle();
        self.work
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first_failure
            .take()
    }

    fn wait_idle(&self) {
        let mut work = self.work.lock().unwrap_or_else(PoisonError::into_inner);
        while work.running > 0 {
            work = self
                .ended
                .wait(work)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Work in progress; ends it when dropped.
pub(crate) struct Running<'a>(&'a Activity);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl Emulated {
    /// Waits until no work runs; the first launch on a stream that failed
    /// since the last call is its error, as `cuCtxSynchronize` reports a
    /// kernel's fault (a review, 2026-12-08: the emulated context said Ok).
    pub(crate) fn synchronize_context(&self) -> Result<(), HostError> {
        self.activity
            .wait_idle_and_take_failure()
            .map_or(Ok(()), Err)
    }

    /// An emulated device with `memory` bytes of device memory (what its
    /// heaps' backings may map).
    pub fn new(memory: u64) -> Emulated {
        Emulated {
            info: DeviceInfo {
                ordinal: 0,
                name: "CPU warp simulator (CPU figures, not GPU speed)".into(),
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
            activity: Arc::default(),
            in_use: Arc::default(),
        }
    }
}

impl Emulated {
    /// Loads a module (as `load_module`), as its concrete type.
    pub(crate) fn load(&self, text: &str) -> Result<Arc<EmulatedModule>, HostError> {
        let parsed = ptx::parse(text).map_err(HostError::InvalidPtx)?;
        EmulatedModule::new(parsed, Arc::clone(&self.activity)).map(Arc::new)
    }

    /// The device's work in progress (streams count their queued work).
    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
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
    /// The device's count of memory in use that this block's bytes are in
    /// (a buffer's; none for host memory and a module's globals).
    counted: Option<Arc<AtomicU64>>,
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
        Ok(HostBlock {
            ptr,
            layout,
            counted: None,
        })
    }

    /// The block counted in `in_use` while it lives.
    fn counted(mut self, in_use: &Arc<AtomicU64>) -> HostBlock {
        in_use.fetch_add(self.layout.size() as u64, Ordering::Relaxed);
        self.counted = Some(Arc::clone(in_use));
        self
    }

    fn addr(&self) -> DevicePtr {
        self.ptr.expose_provenance() as u64
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if let Some(in_use) = &self.counted {
            in_use.fetch_sub(self.layout.size() as u64, Ordering::Relaxed);
        }
        // SAFETY: allocated in `new` with this layout, freed once, here.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

// SAFETY: a live block of host memory of `len` bytes (the emulated
// device's memory is the host's), freed only on drop.
unsafe impl Allocation for HostBlock {
    fn addr(&self) -> DevicePtr {
        HostBlock::addr(self)
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}

// SAFETY: the same block seen from both sides (the emulated device
// addresses host memory directly), aligned to 256 bytes or more.
unsafe impl HostMapping for HostBlock {
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

// SAFETY: its allocations, mappings and modules are host blocks of this
// process (the emulated device's memory), and its backing maps host memory
// (`HostEmulated`).
unsafe impl Device for Emulated {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn load_module(&self, text: &str) -> Result<Arc<dyn Module>, HostError> {
        self.load(text).map(|m| m as Arc<dyn Module>)
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<Box<dyn Allocation>, HostError> {
        Ok(Box::new(HostBlock::new(bytes, 256)?.counted(&self.in_use)))
    }

    unsafe fn write(&self, dst: DevicePtr, bytes: &[u8]) -> Result<(), HostError> {
        // The memory may hold a registered heap: no `WarpAlloc` lookup reads
        // its words while they are copied over.
        let _exclusive = registry::exclusive();
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
        Ok(Box::new(HostEmulated::sharing(
            self.info.total_memory,
            Arc::clone(&self.in_use),
        )?))
    }

    fn synchronize(&self) -> Result<(), HostError> {
        // A wait: the heap's calls neither report nor consume a stream's
        // failed launch (their own repair reads `failed_launches`); the
        // program's `CudaContext::synchronize` does (`synchronize_context`).
        self.activity.wait_idle();
        Ok(())
    }

    fn failed_launches(&self) -> u64 {
        self.activity.failures()
    }

    unsafe fn register_heap(
        &self,
        heap: DevicePtr,
    ) -> Result<Option<registry::Registration>, HostError> {
        // SAFETY: forwarded from the caller: a `DeviceHeap` in this
        // process's memory that outlives the registration.
        unsafe { registry::register(std::ptr::with_exposed_provenance(heap as usize)) }
            .map(Some)
            .map_err(|_| HostError::TooManyHeaps(registry::CAPACITY))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An emulated module: its visible globals as host blocks.
pub struct EmulatedModule {
    /// The device's work in progress: launches count in it.
    activity: Arc<Activity>,
    globals: Vec<(String, HostBlock)>,
    entries: Vec<String>,
    /// `WARPALLOC_HEAP`, when it is a heap link (8 bytes): the launches'
    /// binding is the address it holds.
    link: Option<DevicePtr>,
}

impl EmulatedModule {
    fn new(parsed: PtxModule, activity: Arc<Activity>) -> Result<EmulatedModule, HostError> {
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
        let link = globals
            .iter()
            .find(|(name, _)| name == HEAP_SYMBOL)
            .filter(|(_, b)| b.layout.size() == 8 && b.layout.align() >= 8)
            .map(|(_, b)| b.addr());
        Ok(EmulatedModule {
            activity,
            globals,
            entries: parsed.entries,
            link,
        })
    }

    /// The heap the module is linked to now (0: none): a launch's binding.
    pub(crate) fn binding(&self) -> usize {
        self.link.map_or(0, |addr| {
            // SAFETY: the link is an 8-byte, 8-aligned block of ours; the
            // host writes it only while no kernel of the module runs.
            unsafe { std::ptr::with_exposed_provenance::<u64>(addr as usize).read() as usize }
        })
    }
}

// SAFETY: its globals are host blocks it owns for as long as it lives.
unsafe impl Module for EmulatedModule {
    fn is_on(&self, device: &dyn Device) -> bool {
        device
            .as_any()
            .downcast_ref::<Emulated>()
            .is_some_and(|d| Arc::ptr_eq(d.activity(), &self.activity))
    }

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
        // Counted, so that `synchronize` (and with it a heap's stats, trim
        // and drop on another thread) waits for this launch.
        let _running = self.activity.guard();
        cfg.binding = self.binding();
        // SAFETY: forwarded from the caller; the binding is the heap linked
        // to the module, which outlives the launch (a heap unlinks its
        // modules, after synchronising, before it frees its memory).
        let stats = unsafe { kernel.simulate(&cfg) }?;
        Ok(LaunchReport {
            elapsed: stats.elapsed,
            kernel_time: None,
            simulator: Some(stats),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::GRANULE;

    /// Two heaps' backings of one emulated device, and its buffers, see
    /// each other's memory, as a GPU's free memory counts all of them.
    #[test]
    fn backings_and_buffers_of_one_device_share_its_memory() {
        let device = Emulated::new(8 * GRANULE);
        let mut a = device.backing().expect("a backing");
        let b = device.backing().expect("another");
        let base = a.reserve(4 * GRANULE).expect("reserve");
        a.map(base).expect("map");
        a.map(base + GRANULE).expect("map");
        assert_eq!(b.free_device_memory(), Some(6 * GRANULE));
        let buffer = device.alloc_zeroed(GRANULE as usize).expect("a buffer");
        assert_eq!(b.free_device_memory(), Some(5 * GRANULE));
        drop(buffer);
        // Unmapped, a granule is a spare and still holds its memory;
        // released, it is free again.
        a.unmap(base).expect("unmap");
        assert_eq!(b.free_device_memory(), Some(6 * GRANULE));
        a.release_spares().expect("release");
        assert_eq!(b.free_device_memory(), Some(7 * GRANULE));
        drop(a);
        assert_eq!(b.free_device_memory(), Some(8 * GRANULE));
    }

    /// Memory the program drops while work runs is freed when the last
    /// piece of work then running ends, not before (a queued kernel may
    /// hold its address); with none running, at once.
    #[test]
    fn memory_dropped_while_work_runs_is_freed_when_it_ends() {
        let device = Emulated::new(8 * GRANULE);
        let b = device.backing().expect("a backing");
        let activity = device.activity();
        let buffer = device.alloc_zeroed(GRANULE as usize).expect("a buffer");
        activity.begin();
        activity.begin();
        activity.release(Arc::from(buffer));
        activity.end();
        assert_eq!(b.free_device_memory(), Some(7 * GRANULE), "work still runs");
        activity.end();
        assert_eq!(b.free_device_memory(), Some(8 * GRANULE), "none runs");
        let buffer = device.alloc_zeroed(GRANULE as usize).expect("a buffer");
        activity.release(Arc::from(buffer));
        assert_eq!(b.free_device_memory(), Some(8 * GRANULE), "none ran");
    }
}
