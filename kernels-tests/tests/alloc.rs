//! The allocator in the CPU warp simulator: stress kernels over many seeds,
//! every size and alignment, fill-until-null, frees from other warps and
//! blocks, bad input — each run checked for corruption on the device and for
//! leaks and broken invariants on the host. A failure names its seed;
//! `WARPALLOC_SIM_SEED=<seed>` replays it.

use warpalloc_device::heap::Errors;
use warpalloc_device::kernel::Kernel;
use warpalloc_device::sim::{Convergence, LaunchConfig, seeds};
use warpalloc_device::sim_heap::{SimHeap, SimHeapConfig};
use warpalloc_device::size_class::SLAB_SIZE;
use warpalloc_kernels_tests::stress::{
    STATS_WORDS, SWEEP_SIZES, Stats, aligned, bad_input, churn, drain, drain_transfer, fill,
    resize, size_sweep,
};

fn heap(capacity: u64, slots: u32, cache_limit: u32) -> SimHeap {
    SimHeap::new(SimHeapConfig {
        capacity,
        slots,
        cache_limit,
    })
    .expect("reserve host memory for a simulator heap")
}

/// Runs `args` on `cfg` (bound to `heap`), panicking with the seed on failure.
fn run<K: Kernel>(heap: &SimHeap, cfg: &LaunchConfig, args: K) {
    let cfg = cfg.clone().binding(heap.binding());
    // SAFETY: every pointer in `args` addresses host buffers of the test,
    // sized for the grid and alive until this returns.
    if let Err(e) = unsafe { args.simulate(&cfg) } {
        panic!("{}: {e}", K::NAME);
    }
}

/// The heap has no live slab, the cache and provider agree on every byte,
/// its invariants hold, and after draining the cache the provider holds
/// nothing.
#[track_caller]
fn assert_empty(heap: &SimHeap, context: &str) {
    let h = heap.heap();
    assert_eq!(h.check(), Ok(()), "{context}: heap invariants");
    assert_eq!(
        h.live_slabs(),
        0,
        "{context}: live slabs after freeing everything"
    );
    let cached = h.cached_slabs() as u64;
    assert_eq!(
        heap.provider().stats().bytes_in_use,
        cached * SLAB_SIZE,
        "{context}: provider bytes beyond the cached slabs (a leak)"
    );
    h.drain_cache();
    assert_eq!(
        heap.provider().stats().bytes_in_use,
        0,
        "{context}: provider not empty after drain"
    );
    assert_eq!(
        heap.provider().stats().bad_returns,
        0,
        "{context}: bad returns to the provider"
    );
}

#[track_caller]
fn assert_clean(stats: &Stats, errors: Errors, context: &str) {
    assert_eq!(
        stats.corrupt, 0,
        "{context}: corrupt blocks (first bad {:#x}) {stats:?}",
        stats.first_bad
    );
    assert_eq!(stats.broken, 0, "{context}: broken promises {stats:?}");
    assert_eq!(
        stats.allocs, stats.frees,
        "{context}: allocations not freed {stats:?}"
    );
    assert_eq!(errors.double_frees, 0, "{context}: {errors:?}");
    assert_eq!(errors.invalid_frees, 0, "{context}: {errors:?}");
}

struct Churn {
    blocks: u32,
    threads: u32,
    iterations: u32,
    max_small: u32,
    large_one_in: u32,
}

fn churn_once(seed: u64, shape: &Churn, tune: impl Fn(LaunchConfig) -> LaunchConfig) -> Stats {
    let heap = heap(2 << 30, 32_768, 32);
    let cfg = tune(LaunchConfig::linear(shape.blocks, shape.threads).seed(seed));
    let context = format!(
        "churn seed {seed:#x} (replay: WARPALLOC_SIM_SEED={seed:#x}), workers {}, {:?}",
        cfg.workers, cfg.convergence
    );
    let mut stats = vec![0u64; STATS_WORDS];
    let slots = 512u32;
    let mut transfer = vec![0u64; slots as usize];
    run(
        &heap,
        &cfg,
        churn::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots,
            seed: seed as u32,
            iterations: shape.iterations,
            max_small: shape.max_small,
            large_one_in: shape.large_one_in,
        },
    );
    run(
        &heap,
        &LaunchConfig::linear(4, 64).seed(seed),
        drain_transfer::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots,
        },
    );
    let s = Stats::from_words(&stats);
    assert_clean(&s, heap.heap().errors(), &context);
    assert_eq!(s.nulls, 0, "{context}: out of memory with 2 GiB: {s:?}");
    assert!(s.allocs > 0);
    assert_empty(&heap, &context);
    s
}

const CHURN: Churn = Churn {
    blocks: 16,
    threads: 128,
    iterations: 10,
    max_small: 8192,
    large_one_in: 200,
};

#[test]
fn churn_64_warps_many_seeds() {
    let mut total = Stats::default();
    for seed in seeds(0xc4u64, 6) {
        let s = churn_once(seed, &CHURN, |c| c);
        total.allocs += s.allocs;
        total.large += s.large;
    }
    assert!(
        total.large > 0,
        "the size distribution reached no large block"
    );
    eprintln!("churn: {} allocations, {} large", total.allocs, total.large);
}

#[test]
fn churn_converged_and_parallel() {
    for seed in seeds(0xc5u64, 2) {
        churn_once(seed, &CHURN, |c| c.convergence(Convergence::Converged));
        churn_once(seed, &CHURN, |c| c.workers(2));
    }
}

#[test]
fn churn_tiny_sizes_fill_slabs() {
    // Small sizes, many per slab: contention on few slabs and bitfield words.
    let shape = Churn {
        blocks: 8,
        threads: 96,
        iterations: 24,
        max_small: 64,
        large_one_in: 0,
    };
    for seed in seeds(0xc6u64, 3) {
        churn_once(seed, &shape, |c| c);
    }
}

#[test]
fn every_size_from_1_byte_to_3_mib() {
    let heap = heap(1 << 30, 32_768, 8);
    let mut stats = vec![0u64; STATS_WORDS];
    let blocks = SWEEP_SIZES.div_ceil(64) * 2;
    for seed in seeds(0x51u64, 2) {
        stats.fill(0);
        run(
            &heap,
            &LaunchConfig::linear(blocks, 64).seed(seed),
            size_sweep::Args {
                stats: stats.as_mut_ptr(),
            },
        );
        let s = Stats::from_words(&stats);
        let context = format!("size sweep, seed {seed:#x}");
        assert_clean(&s, heap.heap().errors(), &context);
        assert_eq!(s.allocs, u64::from(blocks * 64), "{context}: {s:?}");
    }
    assert_empty(&heap, "size sweep");
}

#[test]
fn alignments_from_1_byte_to_4_mib() {
    let heap = heap(1 << 30, 32_768, 8);
    let mut stats = vec![0u64; STATS_WORDS];
    for seed in seeds(0xa1u64, 3) {
        stats.fill(0);
        run(
            &heap,
            &LaunchConfig::linear(6, 96).seed(seed),
            aligned::Args {
                stats: stats.as_mut_ptr(),
                seed: seed as u32,
            },
        );
        let s = Stats::from_words(&stats);
        let context = format!("alignment, seed {seed:#x}");
        assert_clean(&s, heap.heap().errors(), &context);
        assert_eq!(s.allocs, 6 * 96, "{context}: {s:?}");
    }
    assert_empty(&heap, "alignment");
}

struct Filled {
    ptrs: Vec<u64>,
    sizes: Vec<u32>,
    counts: Vec<u32>,
    stats: Vec<u64>,
}

fn fill_heap(heap: &SimHeap, cfg: &LaunchConfig, per_thread: u32, max_small: u32) -> Filled {
    let threads = (cfg.blocks() * cfg.threads_per_block()) as usize;
    let mut f = Filled {
        ptrs: vec![0; threads * per_thread as usize],
        sizes: vec![0; threads * per_thread as usize],
        counts: vec![0; threads],
        stats: vec![0; STATS_WORDS],
    };
    run(
        heap,
        cfg,
        fill::Args {
            stats: f.stats.as_mut_ptr(),
            ptrs: f.ptrs.as_mut_ptr(),
            sizes: f.sizes.as_mut_ptr(),
            counts: f.counts.as_mut_ptr(),
            per_thread,
            seed: cfg.seed as u32,
            max_small,
        },
    );
    f
}

/// No two live blocks overlap, and each lies in the heap's region with a
/// usable size at least its request.
fn assert_disjoint(heap: &SimHeap, f: &Filled, per_thread: u32, context: &str) -> usize {
    let (base, len) = heap.heap().region();
    let mut blocks = Vec::new();
    for (t, &n) in f.counts.iter().enumerate() {
        for k in 0..n as usize {
            let at = t * per_thread as usize + k;
            blocks.push((f.ptrs[at], u64::from(f.sizes[at])));
        }
    }
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "{context}: blocks overlap: {:#x}+{} and {:#x}",
            w[0].0,
            w[0].1,
            w[1].0
        );
    }
    for &(p, size) in &blocks {
        assert!(
            p >= base && p + size <= base + len,
            "{context}: block {p:#x} outside the region"
        );
        let usable = heap
            .heap()
            .usable_size(std::ptr::with_exposed_provenance(p as usize));
        assert!(
            usable >= size,
            "{context}: usable {usable} < {size} at {p:#x}"
        );
    }
    blocks.len()
}

fn drain_heap(heap: &SimHeap, cfg: &LaunchConfig, f: &mut Filled, per_thread: u32) {
    let threads = (cfg.blocks() * cfg.threads_per_block()) as u32;
    run(
        heap,
        cfg,
        drain::Args {
            stats: f.stats.as_mut_ptr(),
            ptrs: f.ptrs.as_mut_ptr(),
            sizes: f.sizes.as_mut_ptr(),
            counts: f.counts.as_mut_ptr(),
            per_thread,
            // Another warp of another block frees each thread's blocks.
            shift: threads / 2 + 37,
        },
    );
}

#[test]
fn fill_until_null_then_free_everything_then_fill_again() {
    // 24 slabs of host memory: the provider runs dry long before the table.
    for seed in seeds(0xf111u64, 3) {
        let heap = heap(24 * SLAB_SIZE, 256, 4);
        let cfg = LaunchConfig::linear(8, 64).seed(seed);
        let context = format!("fill, seed {seed:#x} (replay: WARPALLOC_SIM_SEED={seed:#x})");
        let per_thread = 64;
        let mut first = fill_heap(&heap, &cfg, per_thread, 16 << 10);
        let s = Stats::from_words(&first.stats);
        assert!(s.nulls > 0, "{context}: the fill never reached null: {s:?}");
        assert_disjoint(&heap, &first, per_thread, &context);
        assert_eq!(heap.heap().check(), Ok(()), "{context}");
        // Null means the provider is dry: every slab is in use.
        assert_eq!(
            heap.provider().stats().bytes_in_use,
            24 * SLAB_SIZE,
            "{context}"
        );
        drain_heap(&heap, &cfg, &mut first, per_thread);
        let s = Stats::from_words(&first.stats);
        assert_clean(&s, heap.heap().errors(), &context);
        assert_eq!(heap.heap().live_slabs(), 0, "{context}");

        let mut again = fill_heap(&heap, &cfg, per_thread, 16 << 10);
        assert_disjoint(&heap, &again, per_thread, &context);
        assert!(Stats::from_words(&again.stats).nulls > 0, "{context}");
        // The refill reaches null only once all 24 slabs are in use again:
        // the drain gave every byte back (to the cache or the provider).
        assert_eq!(
            heap.provider().stats().bytes_in_use,
            24 * SLAB_SIZE,
            "{context}: the refill ran dry before using all memory: memory lost"
        );
        drain_heap(&heap, &cfg, &mut again, per_thread);
        assert_clean(
            &Stats::from_words(&again.stats),
            heap.heap().errors(),
            &context,
        );
        assert_empty(&heap, &context);
    }
}

#[test]
fn a_full_slot_table_is_a_clean_out_of_memory() {
    // 4 slots and plenty of memory: the table fills first.
    let heap = heap(64 * SLAB_SIZE, 4, 0);
    let cfg = LaunchConfig::linear(4, 64).seed(7);
    let per_thread = 64;
    let mut f = fill_heap(&heap, &cfg, per_thread, 64 << 10);
    let s = Stats::from_words(&f.stats);
    assert!(s.nulls > 0, "{s:?}");
    assert!(heap.heap().live_slabs() <= 4);
    assert!(heap.provider().stats().bytes_in_use <= 4 * SLAB_SIZE);
    assert_disjoint(&heap, &f, per_thread, "full table");
    drain_heap(&heap, &cfg, &mut f, per_thread);
    assert_clean(
        &Stats::from_words(&f.stats),
        heap.heap().errors(),
        "full table",
    );
    assert_empty(&heap, "full table");
}

#[test]
fn bad_input_is_refused_and_counted_without_corruption() {
    let heap = heap(64 * SLAB_SIZE, 64, 4);
    let mut stats = vec![0u64; STATS_WORDS];
    let outside = [0x5au8; 64];
    let foreign = outside.as_ptr() as u64;
    run(
        &heap,
        &LaunchConfig::linear(1, 32).seed(3),
        bad_input::Args {
            stats: stats.as_mut_ptr(),
            foreign,
        },
    );
    let s = Stats::from_words(&stats);
    assert_eq!(s.broken, 0, "bad input accepted: {s:?}");
    assert!(
        outside.iter().all(|&b| b == 0x5a),
        "memory outside the heap was written"
    );
    let e = heap.heap().errors();
    // Per thread: one double free (the second free), one double or invalid
    // free of the interior pointer, one invalid free of the foreign pointer.
    assert!(e.double_frees >= 32, "{e:?}");
    assert_eq!(e.double_frees + e.invalid_frees, 3 * 32, "{e:?}");
    assert_ne!(e.first_bad_address, 0);
    assert_eq!(heap.heap().check(), Ok(()));
    // The heap still works, and nothing leaked.
    let mut stats = vec![0u64; STATS_WORDS];
    let mut transfer = vec![0u64; 64];
    run(
        &heap,
        &LaunchConfig::linear(2, 64).seed(4),
        churn::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots: 64,
            seed: 4,
            iterations: 8,
            max_small: 2048,
            large_one_in: 0,
        },
    );
    run(
        &heap,
        &LaunchConfig::linear(1, 64),
        drain_transfer::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots: 64,
        },
    );
    let s = Stats::from_words(&stats);
    assert_eq!((s.corrupt, s.broken, s.nulls), (0, 0, 0), "{s:?}");
    assert_eq!(s.allocs, s.frees);
    assert_empty(&heap, "after bad input");
}

#[test]
fn an_unbound_launch_gets_null() {
    // A launch with no heap bound: malloc returns null, free does nothing.
    let mut stats = vec![0u64; STATS_WORDS];
    let cfg = LaunchConfig::linear(1, 32);
    // SAFETY: `stats` is sized for the kernel and outlives the launch.
    unsafe {
        size_sweep::Args {
            stats: stats.as_mut_ptr(),
        }
        .simulate(&cfg)
    }
    .unwrap();
    let s = Stats::from_words(&stats);
    assert_eq!((s.allocs, s.nulls), (0, 32), "{s:?}");
}

#[test]
fn realloc_keeps_contents_and_calloc_zeroes() {
    let heap = heap(1 << 30, 32_768, 8);
    for seed in seeds(0x4e51u64, 3) {
        let mut stats = vec![0u64; STATS_WORDS];
        run(
            &heap,
            &LaunchConfig::linear(3, 64).seed(seed),
            resize::Args {
                stats: stats.as_mut_ptr(),
                max: 3 << 20,
            },
        );
        let s = Stats::from_words(&stats);
        let context = format!("resize, seed {seed:#x}");
        assert_clean(&s, heap.heap().errors(), &context);
        assert_eq!((s.allocs, s.nulls), (2 * 3 * 64, 0), "{context}: {s:?}");
    }
    assert_empty(&heap, "resize");
}
