//! Where slabs and large blocks come from: the system memory provider.
//!
//! The allocator asks for whole slabs (2 MiB, 2 MiB aligned) and for large
//! blocks (multiples of 2 MiB, aligned to at least 2 MiB) and gives them back
//! when they are empty. Every address a provider hands out lies inside the
//! heap's *region*, one contiguous range fixed when the heap is bound, so that
//! `free` can tell in O(1) whether a pointer can be ours at all.
//!
//! On the GPU the provider is the host, reached over the RPC mailbox, or a
//! pool mapped before launch (the `rpc` module). In the simulator it can also
//! be a [`DirectProvider`]: host code called in place, such as
//! [`RegionProvider`], which hands out 2 MiB-aligned host memory and counts
//! every byte.

/// How a heap gets system memory.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// None bound: every request fails (malloc returns null).
    Unbound = 0,
    /// A host object called in place (simulator only).
    Direct = 1,
    /// The host's RPC server, over the mailbox: slabs and large blocks are
    /// mapped on demand.
    Rpc = 2,
    /// Slabs from a pool the host mapped before launch (a lock-free stack
    /// on the device, no RPC on the slab path: deadlock-free, fast first
    /// touch); large blocks still from the RPC server.
    Pool = 3,
}

impl ProviderKind {
    /// The kind stored as `raw`, or `Unbound` for an unknown value.
    pub fn from_raw(raw: u32) -> ProviderKind {
        match raw {
            1 => ProviderKind::Direct,
            2 => ProviderKind::Rpc,
            3 => ProviderKind::Pool,
            _ => ProviderKind::Unbound,
        }
    }
}

/// A provider the simulator calls in place.
///
/// Implementations are thread-safe and never block on device progress.
#[cfg(not(target_arch = "nvptx64"))]
pub trait DirectProvider: Sync {
    /// `bytes` (a positive multiple of the slab size) aligned to `align` (a
    /// power of two, at least the slab size), inside the region; 0 when there
    /// is no memory.
    fn allocate(&self, bytes: u64, align: u64) -> u64;

    /// Gives back a block that `allocate` returned with the same `bytes`.
    fn deallocate(&self, addr: u64, bytes: u64);

    /// The region every block lies in: (base, length in bytes).
    fn region(&self) -> (u64, u64);
}

#[cfg(not(target_arch = "nvptx64"))]
pub use region::{ProviderStats, RegionProvider};

#[cfg(not(target_arch = "nvptx64"))]
mod region {
    use std::alloc::{Layout, alloc_zeroed, dealloc};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::vec::Vec;

    use super::DirectProvider;
    use crate::size_class::{SLAB_SHIFT, SLAB_SIZE};

    /// Counters of a [`RegionProvider`]: every byte it handed out and took
    /// back.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ProviderStats {
        /// Bytes handed out and not yet returned.
        pub bytes_in_use: u64,
        /// The most `bytes_in_use` ever was.
        pub peak_bytes: u64,
        /// Successful `allocate` calls.
        pub allocations: u64,
        /// `deallocate` calls.
        pub deallocations: u64,
        /// `allocate` calls refused (no room, or an injected fault).
        pub refusals: u64,
        /// `deallocate` calls for blocks it did not hand out (ignored).
        pub bad_returns: u64,
    }

    /// Host memory for the simulator: one zeroed region of `capacity` bytes,
    /// 2 MiB aligned, handed out in 2 MiB chunks (first fit, aligned runs for
    /// large blocks), with every byte counted.
    pub struct RegionProvider {
        base: u64,
        capacity: u64,
        /// One entry per chunk: the run length at a run's first chunk, 0
        /// elsewhere; `used` marks every chunk of a run.
        state: Mutex<Chunks>,
        allocations: AtomicU64,
        deallocations: AtomicU64,
        refusals: AtomicU64,
        bad_returns: AtomicU64,
        /// Refuse every `fail_every`-th allocation (0: never), for fault
        /// injection.
        fail_every: AtomicU64,
    }

    struct Chunks {
        used: Vec<bool>,
        run: Vec<u32>,
        in_use: u64,
        peak: u64,
    }

    impl RegionProvider {
        /// A region of `capacity` bytes (rounded down to whole slabs; at
        /// least one). `None` when the host cannot reserve it.
        pub fn new(capacity: u64) -> Option<RegionProvider> {
            let chunks = (capacity >> SLAB_SHIFT).max(1);
            let capacity = chunks << SLAB_SHIFT;
            let layout =
                Layout::from_size_align(usize::try_from(capacity).ok()?, SLAB_SIZE as usize)
                    .ok()?;
            // SAFETY: the layout has a non-zero size.
            let base = unsafe { alloc_zeroed(layout) };
            if base.is_null() {
                return None;
            }
            Some(RegionProvider {
                base: base.expose_provenance() as u64,
                capacity,
                state: Mutex::new(Chunks {
                    used: std::vec![false; chunks as usize],
                    run: std::vec![0; chunks as usize],
                    in_use: 0,
                    peak: 0,
                }),
                allocations: AtomicU64::new(0),
                deallocations: AtomicU64::new(0),
                refusals: AtomicU64::new(0),
                bad_returns: AtomicU64::new(0),
                fail_every: AtomicU64::new(0),
            })
        }

        /// Refuse every `n`-th allocation from now on (0: never).
        pub fn fail_every(&self, n: u64) {
            self.fail_every.store(n, Ordering::Relaxed);
        }

        /// The counters now.
        pub fn stats(&self) -> ProviderStats {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            ProviderStats {
                bytes_in_use: state.in_use,
                peak_bytes: state.peak,
                allocations: self.allocations.load(Ordering::Relaxed),
                deallocations: self.deallocations.load(Ordering::Relaxed),
                refusals: self.refusals.load(Ordering::Relaxed),
                bad_returns: self.bad_returns.load(Ordering::Relaxed),
            }
        }

        fn refuse(&self) -> u64 {
            self.refusals.fetch_add(1, Ordering::Relaxed);
            0
        }
    }

    impl DirectProvider for RegionProvider {
        fn allocate(&self, bytes: u64, align: u64) -> u64 {
            if bytes == 0 || !bytes.is_multiple_of(SLAB_SIZE) || !align.is_power_of_two() {
                return self.refuse();
            }
            let n = self.fail_every.load(Ordering::Relaxed);
            let attempt = self.allocations.load(Ordering::Relaxed)
                + self.refusals.load(Ordering::Relaxed)
                + 1;
            if n != 0 && attempt.is_multiple_of(n) {
                return self.refuse();
            }
            let count = (bytes >> SLAB_SHIFT) as usize;
            let step = (align.max(SLAB_SIZE) >> SLAB_SHIFT) as usize;
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let total = state.used.len();
            // Runs start at chunks whose address is aligned to `align`.
            let first = {
                let misalign = (self.base % align.max(SLAB_SIZE)) >> SLAB_SHIFT;
                (step - misalign as usize) % step
            };
            let mut start = first;
            while start + count <= total {
                if state.used[start..start + count].iter().any(|&u| u) {
                    start += step;
                    continue;
                }
                for used in &mut state.used[start..start + count] {
                    *used = true;
                }
                state.run[start] = count as u32;
                state.in_use += bytes;
                state.peak = state.peak.max(state.in_use);
                self.allocations.fetch_add(1, Ordering::Relaxed);
                return self.base + ((start as u64) << SLAB_SHIFT);
            }
            drop(state);
            self.refuse()
        }

        fn deallocate(&self, addr: u64, bytes: u64) {
            let bad = || {
                self.bad_returns.fetch_add(1, Ordering::Relaxed);
            };
            let Some(offset) = addr.checked_sub(self.base) else {
                return bad();
            };
            if offset >= self.capacity || !offset.is_multiple_of(SLAB_SIZE) {
                return bad();
            }
            let start = (offset >> SLAB_SHIFT) as usize;
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let count = state.run[start] as usize;
            if count == 0 || (count as u64) << SLAB_SHIFT != bytes {
                drop(state);
                return bad();
            }
            state.run[start] = 0;
            for used in &mut state.used[start..start + count] {
                *used = false;
            }
            state.in_use -= bytes;
            self.deallocations.fetch_add(1, Ordering::Relaxed);
        }

        fn region(&self) -> (u64, u64) {
            (self.base, self.capacity)
        }
    }

    impl Drop for RegionProvider {
        fn drop(&mut self) {
            if let Ok(layout) = Layout::from_size_align(self.capacity as usize, SLAB_SIZE as usize)
            {
                // SAFETY: allocated in `new` with this layout; the heaps that
                // drew from it are gone (their owners hold the provider).
                unsafe {
                    dealloc(
                        std::ptr::with_exposed_provenance_mut(self.base as usize),
                        layout,
                    )
                };
            }
        }
    }
}
