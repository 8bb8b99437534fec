//! Host builds only: the device heaps that live in this process's memory
//! (emulated modules' `WARPALLOC_HEAP`s), so that [`WarpAlloc`] on the host
//! frees a pointer into the heap whose region holds it — never into the
//! system allocator — even outside the launch that allocated it.
//!
//! ```text
//!   HEAPS: [ heap address | 0 ] × 64      USED: entries ever taken (scan bound)
//!   COPYING: RwLock — lookups read a heap's region under a read lock; the
//!            emulated device writes device memory (a host copy of a heap
//!            going back) under the write lock
//! ```
//!
//! A host thread that frees a heap's pointer (a `Vec` a kernel made, dropped
//! on the host) must do so while that heap lives, and not while the heap's
//! own host methods (`Heap::stats`, `check`, `trim`, `link`, creating or
//! dropping it) run on another thread: those copy the whole device heap.
//!
//! [`WarpAlloc`]: crate::WarpAlloc

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};

use crate::DeviceHeap;

/// Heaps that may be registered at once.
pub const CAPACITY: usize = 64;
static HEAPS: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
/// One past the highest entry ever used: lookups scan no further.
static USED: AtomicUsize = AtomicUsize::new(0);

/// Held by lookups while they read a heap's region words.
static COPYING: RwLock<()> = RwLock::new(());

/// Excludes lookups while the caller writes memory that may hold a
/// registered heap (the emulated device's `write`), so that a lookup never
/// reads a heap's words while they are being copied over.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    COPYING.write().unwrap_or_else(PoisonError::into_inner)
}

/// A registered heap; dropping it unregisters the heap.
#[derive(Debug)]
pub struct Registration {
    entry: usize,
}

/// The registry is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// Registers the heap at `heap`.
///
/// # Safety
/// `heap` points to a `DeviceHeap` that stays valid (and is only accessed
/// atomically or while no lane runs) until the registration is dropped.
pub unsafe fn register(heap: *const DeviceHeap) -> Result<Registration, Full> {
    let address = heap.expose_provenance();
    for (entry, slot) in HEAPS.iter().enumerate() {
        // ORDERING: release: the heap's bytes happen-before a lookup that
        // finds the address (pairs with the acquire load in `owner_of`).
        if slot
            .compare_exchange(0, address, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            USED.fetch_max(entry + 1, Ordering::Relaxed);
            return Ok(Registration { entry });
        }
    }
    Err(Full)
}

impl Drop for Registration {
    fn drop(&mut self) {
        // ORDERING: release, pairing with the acquire load in `owner_of`;
        // it orders nothing that matters (a lookup that loads 0 touches no
        // heap). What makes freeing the heap safe is the lock below: every
        // lookup that loaded the address before this store holds the read
        // lock while it reads the heap's region, and every later one loads
        // 0 (the lock's release and acquire order this store before it).
        HEAPS[self.entry].store(0, Ordering::Release);
        // Wait for those lookups, so the heap can be freed after we return.
        drop(exclusive());
    }
}

/// The registered heap whose region holds `addr`, if any.
pub(crate) fn owner_of(addr: u64) -> Option<&'static DeviceHeap> {
    // Held only while reading region words without switch points, so a
    // lane never waits here for a lane of its own worker.
    let _reading = COPYING.read().unwrap_or_else(PoisonError::into_inner);
    let used = USED.load(Ordering::Relaxed).min(CAPACITY);
    HEAPS[..used].iter().find_map(|entry| {
        // ORDERING: acquire: pairs with the release in `register`.
        let heap = entry.load(Ordering::Acquire);
        if heap == 0 {
            return None;
        }
        // SAFETY: a registered heap stays valid until its registration is
        // dropped (the contract of `register`); a pointer of a heap is only
        // freed while the heap lives (the allocation contract).
        let heap = unsafe { &*core::ptr::with_exposed_provenance::<DeviceHeap>(heap) };
        // Unhooked: a simulated lane must not reach a switch point (and
        // let its worker run other code) while it holds the read lock.
        let (base, len) = heap.region_unhooked();
        (addr >= base && addr - base < len).then_some(heap)
    })
}
