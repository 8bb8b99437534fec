//! The allocator's unsafe code under Miri: small workloads in the simulator's
//! OS-thread mode (Miri cannot switch stacks), checked for undefined
//! behaviour and data races by Miri and for corruption and leaks by the
//! kernels and the heap. Also runs natively, as a plain test.

use warpalloc_device::kernel::Kernel;
use warpalloc_device::sim::{Fibers, LaunchConfig};
use warpalloc_device::sim_heap::{SimHeap, SimHeapConfig};
use warpalloc_device::size_class::SLAB_SIZE;
use warpalloc_kernels_tests::stress::{STATS_WORDS, Stats, bad_input, churn, drain_transfer};

fn run<K: Kernel>(heap: &SimHeap, cfg: LaunchConfig, args: K) {
    let cfg = cfg.fibers(Fibers::Threads).binding(heap.binding());
    // SAFETY: the test's buffers are sized for the kernels and outlive the
    // launch.
    if let Err(e) = unsafe { args.simulate(&cfg) } {
        panic!("{}: {e}", K::NAME);
    }
}

#[test]
fn miri_churn_two_warps_with_handoff_and_large_blocks() {
    // Seven size classes (a slab each) and a few large blocks fit in 16 slabs.
    let heap = SimHeap::new(SimHeapConfig {
        capacity: 16 * SLAB_SIZE,
        slots: 16,
        cache_limit: 2,
    })
    .expect("reserve host memory");
    let mut stats = vec![0u64; STATS_WORDS];
    let mut transfer = vec![0u64; 8];
    // Two blocks of one 8-lane warp each: blocks hand blocks to each other;
    // about one allocation in eight is a large block.
    run(
        &heap,
        LaunchConfig::linear(2, 8).seed(1),
        churn::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots: 8,
            seed: 1,
            iterations: 2,
            max_small: 32,
            large_one_in: 8,
        },
    );
    run(
        &heap,
        LaunchConfig::linear(1, 8),
        drain_transfer::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots: 8,
        },
    );
    let s = Stats::from_words(&stats);
    assert_eq!((s.corrupt, s.broken, s.nulls), (0, 0, 0), "{s:?}");
    assert_eq!(s.allocs, s.frees, "{s:?}");
    let h = heap.heap();
    assert_eq!(h.errors().double_frees + h.errors().invalid_frees, 0);
    assert_eq!(h.check(), Ok(()));
    assert_eq!(h.live_slabs(), 0);
    h.drain_cache();
    assert_eq!(heap.provider().stats().bytes_in_use, 0);
}

#[test]
fn miri_bad_input() {
    let heap = SimHeap::new(SimHeapConfig {
        capacity: 2 * SLAB_SIZE,
        slots: 4,
        cache_limit: 1,
    })
    .expect("reserve host memory");
    let mut stats = vec![0u64; STATS_WORDS];
    let foreign = [0u8; 16];
    run(
        &heap,
        LaunchConfig::linear(1, 4),
        bad_input::Args {
            stats: stats.as_mut_ptr(),
            foreign: foreign.as_ptr() as u64,
        },
    );
    let s = Stats::from_words(&stats);
    assert_eq!(s.broken, 0, "{s:?}");
    let e = heap.heap().errors();
    assert_eq!(e.double_frees + e.invalid_frees, 3 * 4, "{e:?}");
    assert_eq!(heap.heap().check(), Ok(()));
}
