//! Host side of a heap for the simulator: a [`DeviceHeap`] in host memory with
//! a [`RegionProvider`] behind it, bound to the launches that use it.
//!
//! Each `SimHeap` is registered process-wide (by its region) while it lives,
//! so that [`WarpAlloc`](crate::WarpAlloc) on the host can send a pointer back
//! to the heap that made it.

use core::ptr::NonNull;
use std::boxed::Box;
use std::sync::Arc;
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
        let heap = unsafe { &*core::ptr::with_exposed_provenance::<DeviceHeap>(heap) };
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
///
/// The heap and its provider are owned through raw pointers, not `Box`es:
/// lanes, the registry and the heap itself hold shared pointers to them, and
/// moving a `Box` would assert unique access (which Miri's borrow model
/// checks).
pub struct SimHeap {
    heap: NonNull<DeviceHeap>,
    provider: Arc<RegionProvider>,
    registered: Option<usize>,
}

// SAFETY: the heap is all atomics plus a pointer to a `Sync` provider; it is
// shared by design, and only freed on drop.
unsafe impl Send for SimHeap {}
// SAFETY: as for Send.
unsafe impl Sync for SimHeap {}

impl SimHeap {
    /// A heap of `config`'s sizes; `None` when the host cannot reserve the
    /// memory.
    pub fn new(config: SimHeapConfig) -> Option<SimHeap> {
        let provider = Arc::new(RegionProvider::new(config.capacity)?);
        // SAFETY: every field of `DeviceHeap` is an atomic or an
        // `Option<NonNull<_>>`, for which all-zero bytes are a valid value
        // (zero, and `None`): exactly `DeviceHeap::new()`.
        let mut heap = unsafe { Box::<DeviceHeap>::new_zeroed().assume_init() };
        // SAFETY: the provider lives in an `Arc` we keep until the heap is
        // freed (in `drop`), and nothing uses the heap yet.
        unsafe { heap.bind_direct(&*provider, config.slots, config.cache_limit) };
        let heap = NonNull::from(Box::leak(heap));
        let address = heap.as_ptr().expose_provenance();
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
        // SAFETY: allocated in `new`, freed only in `drop`.
        unsafe { self.heap.as_ref() }
    }

    /// The memory behind it.
    pub fn provider(&self) -> &RegionProvider {
        &self.provider
    }

    /// The binding word that makes a launch use this heap.
    pub fn binding(&self) -> usize {
        self.heap.as_ptr().expose_provenance()
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
        // SAFETY: leaked from a `Box` in `new`; no launch runs (launches
        // borrow nothing from us, so the owner drops us after they return),
        // and the registry no longer names it.
        drop(unsafe { Box::from_raw(self.heap.as_ptr()) });
    }
}
