//! The `Heap` end to end in the simulator: kernels ↔ RPC mailbox ↔ the
//! server thread ↔ `HostEmulated` backing, in both modes; the server stopped
//! and restarted between heaps; out-of-memory under a limit; injected mapping
//! faults; every byte accounted for, and everything unmapped after a trim.

use std::sync::Mutex;

use warpalloc::{Heap, HeapConfig, Mode};
use warpalloc_device::kernel::Kernel;
use warpalloc_host::backing::{CHUNK, Refusal};
use warpalloc_host::{Launcher, Prefer, server};
use warpalloc_kernels_tests::stress::{STATS_WORDS, Stats, churn, drain, drain_transfer, fill};

/// Tests that look at the process-wide server thread run one at a time.
static SERVER: Mutex<()> = Mutex::new(());

fn heap(config: HeapConfig, seed: u64, workers: usize) -> Heap {
    let mut launcher =
        Launcher::new(warpalloc::ptx::KERNELS_TESTS, Prefer::Simulator).expect("launcher");
    let cfg = launcher.simulator_config();
    cfg.seed = seed;
    cfg.workers = workers;
    Heap::new(launcher, config).expect("simulator heap")
}

fn launch<K: Kernel>(heap: &mut Heap, grid: u32, block: u32, args: K) {
    // SAFETY: the tests' buffers are sized for the kernels and outlive the
    // launch.
    if let Err(e) = unsafe { heap.launch((grid, 1, 1), (block, 1, 1), args) } {
        panic!("{}: {e}", K::NAME);
    }
}

/// Churns `blocks × 128` threads with handoffs, then frees what is left.
fn churn_all(heap: &mut Heap, blocks: u32, iterations: u32, large_one_in: u32, seed: u32) -> Stats {
    let mut stats = vec![0u64; STATS_WORDS];
    let slots = 256;
    let mut transfer = vec![0u64; slots as usize];
    launch(
        heap,
        blocks,
        128,
        churn::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots,
            seed,
            iterations,
            max_small: 4096,
            large_one_in,
        },
    );
    launch(
        heap,
        2,
        64,
        drain_transfer::Args {
            stats: stats.as_mut_ptr(),
            transfer: transfer.as_mut_ptr(),
            slots,
        },
    );
    Stats::from_words(&stats)
}

/// Everything freed: the region holds only the device's cached and pooled
/// slabs, and after a trim (pool mode: the pool) nothing is mapped.
#[track_caller]
fn assert_all_returned(heap: &mut Heap, context: &str) {
    let s = heap.stats().expect("stats");
    assert_eq!(
        s.device.double_frees + s.device.invalid_frees,
        0,
        "{context}: {:?}",
        s.device
    );
    assert_eq!(
        s.region.in_use_bytes,
        (s.cached_slabs + s.pool_slabs) * CHUNK,
        "{context}: bytes in use beyond the cached and pooled slabs: {s:?}"
    );
    let pooled = (s.cached_slabs + s.pool_slabs) * CHUNK;
    heap.trim().expect("trim");
    let s = heap.stats().expect("stats");
    match heap.mode() {
        // The pool's slabs stay mapped, cached or not.
        Mode::Pool { slabs } => {
            assert_eq!(
                s.region.mapped_bytes, pooled,
                "{context}: mapped after trim: {s:?}"
            );
            assert_eq!(
                pooled,
                u64::from(slabs) * CHUNK,
                "{context}: the pool lost slabs"
            );
        }
        Mode::Rpc => {
            assert_eq!(
                s.region.mapped_bytes, 0,
                "{context}: mapped after trim: {s:?}"
            );
            assert_eq!(s.cached_slabs, 0);
        }
    }
}

#[test]
fn rpc_mode_serves_thousands_of_requests() {
    let _serial = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    for (seed, workers) in [(1, 1), (2, 2)] {
        let mut heap = heap(
            HeapConfig {
                slab_cache: 0,
                ..HeapConfig::default()
            },
            seed,
            workers,
        );
        let s = churn_all(&mut heap, 16, 12, 64, seed as u32);
        let context = format!("rpc, seed {seed}, {workers} worker(s)");
        assert_eq!(
            (s.corrupt, s.broken, s.nulls),
            (0, 0, 0),
            "{context}: {s:?}"
        );
        assert_eq!(s.allocs, s.frees, "{context}");
        let st = heap.stats().unwrap();
        assert!(
            st.rpc.allocs >= 100,
            "{context}: only {} ALLOC requests",
            st.rpc.allocs
        );
        assert_eq!(
            st.rpc.allocs,
            st.region.allocations + st.region.refusals.iter().sum::<u64>()
        );
        assert_eq!(st.rpc.frees, st.region.frees, "{context}: {st:?}");
        assert!(
            st.traffic.large_allocations > 0,
            "{context}: no large block"
        );
        assert_all_returned(&mut heap, &context);
    }
}

#[test]
fn pool_mode_needs_no_rpc_for_slabs() {
    let _serial = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let mut heap = heap(
        HeapConfig {
            mode: Mode::Pool { slabs: 64 },
            ..HeapConfig::default()
        },
        3,
        1,
    );
    assert_eq!(heap.stats().unwrap().pool_slabs, 64);
    let s = churn_all(&mut heap, 8, 10, 0, 3);
    assert_eq!((s.corrupt, s.broken, s.nulls), (0, 0, 0), "{s:?}");
    let st = heap.stats().unwrap();
    assert_eq!(
        st.rpc.allocs + st.rpc.frees,
        0,
        "pool mode used RPC for slabs: {st:?}"
    );
    assert!(st.traffic.slabs_from_provider > 0);
    assert_all_returned(&mut heap, "pool");
    // Large blocks still go to the server.
    let s = churn_all(&mut heap, 4, 6, 8, 4);
    assert_eq!((s.corrupt, s.broken, s.nulls), (0, 0, 0), "{s:?}");
    assert!(heap.stats().unwrap().rpc.allocs > 0);
    assert_all_returned(&mut heap, "pool with large blocks");
}

#[test]
fn the_server_stops_with_the_last_heap_and_restarts() {
    let _serial = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    for round in 0..3 {
        let (_, starts) = server::running();
        let mut heap = heap(HeapConfig::default(), round, 1);
        let (running, now) = server::running();
        assert!(running);
        assert_eq!(now, starts + 1, "round {round}: the server did not restart");
        let s = churn_all(&mut heap, 2, 4, 0, round as u32);
        assert_eq!((s.corrupt, s.nulls), (0, 0));
        drop(heap);
        assert!(
            !server::running().0,
            "round {round}: the server outlived its last heap"
        );
    }
}

#[test]
fn a_small_limit_gives_nulls_and_refusals_not_crashes() {
    let _serial = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let mut heap = heap(
        HeapConfig {
            limit: Some(8 * CHUNK),
            slab_cache: 2,
            slots: 256,
            ..HeapConfig::default()
        },
        5,
        1,
    );
    let threads = 4 * 64;
    let per_thread = 48u32;
    let mut stats = vec![0u64; STATS_WORDS];
    let mut ptrs = vec![0u64; threads * per_thread as usize];
    let mut sizes = vec![0u32; threads * per_thread as usize];
    let mut counts = vec![0u32; threads];
    let args =
        |stats: &mut Vec<u64>, ptrs: &mut Vec<u64>, sizes: &mut Vec<u32>, counts: &mut Vec<u32>| {
            (
                stats.as_mut_ptr(),
                ptrs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                counts.as_mut_ptr(),
            )
        };
    let (st, p, sz, c) = args(&mut stats, &mut ptrs, &mut sizes, &mut counts);
    launch(
        &mut heap,
        4,
        64,
        fill::Args {
            stats: st,
            ptrs: p,
            sizes: sz,
            counts: c,
            per_thread,
            seed: 5,
            max_small: 32 << 10,
        },
    );
    let s = Stats::from_words(&stats);
    assert!(s.nulls > 0, "{s:?}");
    let hs = heap.stats().unwrap();
    assert!(hs.region.refused(Refusal::Limit) > 0, "{hs:?}");
    assert!(hs.region.mapped_bytes <= 8 * CHUNK);
    launch(
        &mut heap,
        4,
        64,
        drain::Args {
            stats: st,
            ptrs: p,
            sizes: sz,
            counts: c,
            per_thread,
            shift: 131,
        },
    );
    let s = Stats::from_words(&stats);
    assert_eq!((s.corrupt, s.broken), (0, 0), "{s:?}");
    assert_eq!(s.allocs, s.frees);
    assert_all_returned(&mut heap, "limit");
}

#[test]
fn injected_mapping_faults_give_nulls_and_leak_nothing() {
    let _serial = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let mut heap = heap(
        HeapConfig {
            slab_cache: 1,
            ..HeapConfig::default()
        },
        6,
        1,
    );
    heap.fail_every(3);
    let s = churn_all(&mut heap, 8, 10, 16, 6);
    assert_eq!((s.corrupt, s.broken), (0, 0), "{s:?}");
    assert!(s.nulls > 0, "no allocation saw an injected fault: {s:?}");
    assert_eq!(s.allocs, s.frees);
    let hs = heap.stats().unwrap();
    assert!(hs.region.refused(Refusal::InjectedFault) > 0);
    assert_eq!(hs.device.out_of_memory, s.nulls, "{hs:?}");
    heap.fail_every(0);
    assert_all_returned(&mut heap, "faults");
}

#[test]
fn thousands_of_pings_from_many_warps_each_answered_once() {
    use warpalloc_kernels_tests::rpc::rpc_ping;
    let _serial = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    // Fewer ports than warps: warps contend for ports.
    for (seed, workers, ports) in [(7, 1, 16), (8, 2, 64)] {
        let mut heap = heap(
            HeapConfig {
                ports: Some(ports),
                ..HeapConfig::default()
            },
            seed,
            workers,
        );
        let mut locks = vec![0u32; (ports as usize).div_ceil(32)];
        let mut stats = vec![0u64; 2];
        let (blocks, threads, rounds) = (16u32, 128u32, 3u32);
        let mailbox = heap.ports().cast_mut();
        launch(
            &mut heap,
            blocks,
            threads,
            rpc_ping::Args {
                ports: mailbox,
                port_count: ports,
                locks: locks.as_mut_ptr(),
                stats: stats.as_mut_ptr(),
                rounds,
            },
        );
        let calls = u64::from(blocks * threads * rounds);
        assert_eq!(
            stats,
            [0, calls],
            "seed {seed}: mismatched echoes or missing calls"
        );
        assert_eq!(
            heap.stats().unwrap().rpc.pings,
            calls,
            "seed {seed}: requests lost or duplicated"
        );
        assert!(locks.iter().all(|&w| w == 0), "a port left locked");
    }
}
