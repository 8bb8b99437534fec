//! Host side of a heap for the simulator: a [`DeviceHeap`] in host memory with
//! a [`RegionProvider`] behind it, bound to the launches that use it.
//!
//! Each `SimHeap` is registered process-wide (by its region) while it lives,
//! so that [`WarpAlloc`](crate::WarpAlloc) on the host can send a pointer back
//! to the heap that made it.

use std::boxed::Box;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::heap::{DEFAULT_CACHE, DeviceHeap, MAX_SLOTS};
use crate::provider::RegionProvider;
use warpalloc_sim::LaunchConfig;

/// Heaps that may own pointers: addresses of live `DeviceHeap`s.
const REGISTRY: usize = 256;
static HEAPS: [AtomicUsize; REGISTRY] = [const { AtomicUsize::new(0) }; REGISTRY];

/// The live heap whose region holds `ptr`, if any.
pub(crate) fn owner_of(ptr: *mut u8) -> Option<&'static DeviceHeap> {
    let addr = ptr.expose_provenance() as u64;
    HEAPS.iter().find_map(|entry| {
        let heap = entry.load(Ordering::Acquire);
        if heap == 0 {
            return None;
        }
        // SAFETY: registered heaps stay alive until their `SimHeap` drops,
        // which unregisters first; a pointer of a heap is only freed while
        // the heap lives (the allocation contract).
        let heap = unsafe { &*(heap as *const DeviceHeap) };
        let (base, len) = heap.region();
        (addr >= base && addr - base < len).then_some(heap)
    })
}

/// Sizes of a simulator heap.
#[derive(Clone, Copy, Debug)]
pub struct SimHeapConfig {
    /// Bytes of host memory behind the heap (whole slabs).
    pub capacity: u64,
    /// Slots in the slot table (1..=32 768).
    pub slots: u32,
    /// Slabs the cache keeps (0..=256).
    pub cache_limit: u32,
}

impl Default for SimHeapConfig {
    fn default() -> Self {
        SimHeapConfig {
            capacity: 1 << 30,
            slots: MAX_SLOTS as u32,
            cache_limit: DEFAULT_CACHE,
        }
    }
}

/// A device heap in host memory, for simulator launches.
pub struct SimHeap {
    // Declared first: dropped before the provider it points into.
    heap: Box<DeviceHeap>,
    provider: Box<RegionProvider>,
    registered: Option<usize>,
}

impl SimHeap {
    /// A heap of `config`'s sizes; `None` when the host cannot reserve the
    /// memory.
    pub fn new(config: SimHeapConfig) -> Option<SimHeap> {
        let provider = Box::new(RegionProvider::new(config.capacity)?);
        // SAFETY: every field of `DeviceHeap` is an atomic or an
        // `Option<NonNull<_>>`, for which all-zero bytes are a valid value
        // (zero, and `None`): exactly `DeviceHeap::new()`.
        let mut heap = unsafe { Box::<DeviceHeap>::new_zeroed().assume_init() };
        // SAFETY: `provider` is boxed (its address is stable) and outlives
        // `heap` (field order), and nothing uses the heap yet.
        unsafe { heap.bind_direct(&*provider, config.slots, config.cache_limit) };
        let address = &*heap as *const DeviceHeap as usize;
        let registered = HEAPS.iter().position(|e| {
            e.compare_exchange(0, address, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        Some(SimHeap {
            heap,
            provider,
            registered,
        })
    }

    /// The device heap.
    pub fn heap(&self) -> &DeviceHeap {
        &self.heap
    }

    /// The memory behind it.
    pub fn provider(&self) -> &RegionProvider {
        &self.provider
    }

    /// The binding word that makes a launch use this heap.
    pub fn binding(&self) -> usize {
        &*self.heap as *const DeviceHeap as usize
    }

    /// A deterministic launch of `grid` × `block` bound to this heap. The
    /// heap must outlive the launch (it does: the launch borrows nothing, so
    /// keep the `SimHeap` alive until `launch` returns).
    pub fn launch_config(&self, grid: (u32, u32, u32), block: (u32, u32, u32)) -> LaunchConfig {
        LaunchConfig::new(grid, block).binding(self.binding())
    }
}

impl Drop for SimHeap {
    fn drop(&mut self) {
        if let Some(i) = self.registered {
            HEAPS[i].store(0, Ordering::Release);
        }
    }
}
