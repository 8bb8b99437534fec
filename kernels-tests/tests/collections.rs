//! `Vec`, `Box` and `String` in kernels, through the global allocator: this
//! test binary declares `WarpAlloc` as its global allocator, so lanes of a
//! launch bound to a heap allocate from it (and everything else from the
//! system allocator).

use warpalloc_device::WarpAlloc;
use warpalloc_device::kernel::Kernel;
use warpalloc_device::sim::{LaunchConfig, seeds};
use warpalloc_device::sim_heap::{SimHeap, SimHeapConfig};
use warpalloc_kernels_tests::collections::collections;
use warpalloc_kernels_tests::stress::{STATS_WORDS, Stats};

#[global_allocator]
static GLOBAL: WarpAlloc = WarpAlloc;

#[test]
fn collections_grow_through_the_global_allocator() {
    for seed in seeds(0xb0c5u64, 3) {
        let heap = SimHeap::new(SimHeapConfig {
            capacity: 256 << 20,
            slots: 1024,
            cache_limit: 8,
        })
        .expect("reserve host memory");
        let mut stats = vec![0u64; STATS_WORDS];
        let cfg = LaunchConfig::linear(4, 48)
            .seed(seed)
            .binding(heap.binding());
        let args = collections::Args {
            stats: stats.as_mut_ptr(),
            n: 300,
        };
        // SAFETY: `stats` has the kernel's 8 words and outlives the launch.
        unsafe { args.simulate(&cfg) }.unwrap_or_else(|e| panic!("{e}"));
        let s = Stats::from_words(&stats);
        assert_eq!(s.broken, 0, "seed {seed:#x}: {s:?}");
        assert_eq!(
            s.allocs,
            4 * 48,
            "seed {seed:#x}: not every thread finished: {s:?}"
        );
        let h = heap.heap();
        assert!(
            h.traffic().slabs_from_provider > 0,
            "the lanes did not allocate from the heap"
        );
        assert_eq!(
            h.errors().double_frees + h.errors().invalid_frees,
            0,
            "{:?}",
            h.errors()
        );
        assert_eq!(h.check(), Ok(()));
        assert_eq!(h.live_slabs(), 0, "a collection leaked");
    }
}
