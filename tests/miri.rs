//! The allocator's unsafe code under Miri, through the path a program runs:
//! a `Heap` on the emulated device (the module's WARPALLOC_HEAP, the RPC
//! server thread, the region's backing — Miri's stand-in for `mmap`), small
//! workloads in the simulator's OS-thread mode (Miri cannot switch stacks),
//! checked for undefined behaviour and data races by Miri and for
//! corruption and leaks by the kernels and the heap. Also runs natively, as
//! a plain test.

mod support;

use support::{assert_empty, buffer, errors, run, stats};
use warpalloc::{HeapConfig, Mode};
use warpalloc_device::sim::{Fibers, LaunchConfig};
use warpalloc_device::size_class::SLAB_SIZE;
use warpalloc_kernels_tests::stress::{STATS_WORDS, bad_input, churn, drain_transfer};

fn small(mode: Mode, slabs: u64, slots: u32) -> warpalloc::Heap {
    support::heap_with(HeapConfig {
        mode,
        reserve: Some(slabs * SLAB_SIZE),
        slots,
        ports: Some(2),
        ..HeapConfig::default()
    })
}

fn threads(cfg: LaunchConfig) -> LaunchConfig {
    cfg.fibers(Fibers::Threads).workers(1)
}

#[test]
fn miri_churn_two_warps_with_handoff_and_large_blocks() {
    // Seven size classes (a slab each) and a few large blocks fit in 16
    // slabs; slabs come over RPC.
    let mut heap = small(Mode::Rpc, 16, 16);
    let stats_buf = buffer::<u64>(&heap, STATS_WORDS);
    let transfer = buffer::<u64>(&heap, 8);
    // Two blocks of one 8-lane warp each: blocks hand blocks to each other;
    // about one allocation in four is a large block.
    run(
        &mut heap,
        &threads(LaunchConfig::linear(2, 8).seed(1)),
        churn::Args {
            stats: stats_buf.kernel_ptr(),
            transfer: transfer.kernel_ptr(),
            slots: 8,
            seed: 1,
            iterations: 1,
            max_small: 32,
            large_one_in: 4,
        },
    );
    run(
        &mut heap,
        &threads(LaunchConfig::linear(1, 8)),
        drain_transfer::Args {
            stats: stats_buf.kernel_ptr(),
            transfer: transfer.kernel_ptr(),
            slots: 8,
        },
    );
    let s = stats(&heap, &stats_buf);
    assert_eq!((s.corrupt, s.broken, s.nulls), (0, 0, 0), "{s:?}");
    assert_eq!(s.allocs, s.frees, "{s:?}");
    let e = errors(&heap);
    assert_eq!(e.double_frees + e.invalid_frees, 0);
    let h = heap.stats().expect("stats");
    assert!(h.rpc.allocs > 0);
    assert!(h.traffic.large_allocations > 0, "no large block: {h:?}");
    // A trim that keeps a slab a class (each has one): the hint table read,
    // pointed at the kept slabs, and written back.
    heap.trim_keeping(1).expect("trim");
    let kept = heap.stats().expect("stats").live.empty_slabs;
    assert!(kept > 0 && kept == h.live.empty_slabs, "{kept} kept: {h:?}");
    assert_empty(&mut heap, "miri churn");
}

#[test]
fn miri_pool_mode_and_bad_input() {
    let mut heap = small(Mode::Pool { slabs: 2 }, 4, 4);
    let stats_buf = buffer::<u64>(&heap, STATS_WORDS);
    let foreign = buffer::<u8>(&heap, 16);
    run(
        &mut heap,
        &threads(LaunchConfig::linear(1, 4)),
        bad_input::Args {
            stats: stats_buf.kernel_ptr(),
            foreign: foreign.kernel_ptr().addr() as u64,
        },
    );
    let s = stats(&heap, &stats_buf);
    assert_eq!(s.broken, 0, "{s:?}");
    let e = errors(&heap);
    assert_eq!((e.double_frees, e.invalid_frees), (4, 4 * 4), "{e:?}");
    let h = heap.stats().expect("stats");
    assert_eq!(h.rpc.allocs, 0, "pool mode asked the host for a slab");
    assert!(h.traffic.slabs_from_provider > 0);
    assert_empty(&mut heap, "miri bad input");
}

/// The user-facing path: an emulated context, a module, a heap attached and
/// linked, a launch by name with the launch builder on a stream (its worker
/// thread), parameters passed as bytes and rebuilt in the kernel.
#[test]
fn miri_launch_builder_on_a_stream() {
    use warpalloc::emulated::{CudaContext, LaunchConfig as Grid, Ptx, PushKernelArg};
    use warpalloc_kernels_tests::stress::alloc_free;

    const KERNELS: &[warpalloc_device::kernel::Entry] = warpalloc_device::kernels![alloc_free];
    let ctx = CudaContext::new(KERNELS).expect("context");
    ctx.set_simulator(threads(LaunchConfig::linear(1, 1)));
    let module = ctx
        .load_module(Ptx::from_src(support::PTX))
        .expect("module");
    let heap = warpalloc::Heap::attach(
        &ctx,
        HeapConfig {
            reserve: Some(4 * SLAB_SIZE),
            slots: 4,
            ports: Some(2),
            ..HeapConfig::default()
        },
    )
    .expect("heap");
    heap.link(&module).expect("link");
    let f = module.load_function("alloc_free").expect("alloc_free");
    let stream = ctx.new_stream().expect("stream");
    let mut out = stream.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    // SAFETY: STATS_WORDS words of stats.
    unsafe {
        stream
            .launch_builder(&f)
            .arg(&mut out)
            .arg(&32u32)
            .arg(&2u32)
            .launch(Grid {
                grid_dim: (1, 1, 1),
                block_dim: (4, 1, 1),
                shared_mem_bytes: 0,
            })
    }
    .expect("launch");
    let words = stream.clone_dtoh(&out).expect("read");
    assert_eq!((words[0], words[2], words[3]), (8, 0, 0), "{words:?}");
    let h = heap.stats().expect("stats");
    assert!(h.traffic.served() > 0);
    assert_eq!(h.live.live_allocations(), 0);
}
