//! The user-facing API without warpalloc's `Launcher`: a program loads its
//! module on a context (the emulated one, in cudarc's shape), attaches a
//! heap, links the module, launches with the launch builder on its own
//! streams, synchronises and reads the heap's stats. Also: several modules
//! share one heap, a heap unlinks its modules when it drops, and a module
//! belongs to one heap at a time.

use std::sync::Arc;

use warpalloc::emulated::{
    CudaContext, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig, Ptx, PushKernelArg,
};
use warpalloc::{Heap, HeapConfig, HostError, KernelParam, WarpAlloc};
use warpalloc_device::kernel::Entry;
use warpalloc_kernels_tests::collections::collections;
use warpalloc_kernels_tests::stress::{
    Fill, STATS_WORDS, Stats, alloc_free, fill_with, free_only, malloc_only,
};
use warpalloc_tool::ptx::KERNELS_TESTS;

/// `collections` uses `Vec` in the kernel: the program's global allocator
/// sends it to the launch's heap.
#[global_allocator]
static GLOBAL: WarpAlloc = WarpAlloc;

/// The kernels this program launches by name.
const KERNELS: &[Entry] =
    warpalloc_device::kernels![alloc_free, collections, fill_with, malloc_only, free_only];

fn config() -> HeapConfig {
    HeapConfig {
        reserve: Some(256 << 20),
        slots: 1024,
        ..HeapConfig::default()
    }
}

fn setup() -> (Arc<CudaContext>, Arc<CudaModule>, Heap) {
    let ctx = CudaContext::new(KERNELS).expect("context");
    let module = ctx
        .load_module(Ptx::from_src(KERNELS_TESTS))
        .expect("module");
    let heap = Heap::attach(&ctx, config()).expect("heap");
    heap.link(&module).expect("link");
    (ctx, module, heap)
}

/// `fill_with`'s parameter: `value + i` into each of the words of `out`,
/// at its address as `stream` gives it (the record borrows `out` until it
/// drops, as cudarc's does).
fn fill_of(stream: &CudaStream, out: &CudaSlice<u64>, value: u64) -> Fill {
    let addr = {
        let (addr, _record) = out.device_ptr(stream);
        addr
    };
    Fill {
        out: std::ptr::with_exposed_provenance_mut(addr as usize),
        value,
        n: out.len() as u32,
        pad: 0,
    }
}

/// Queues on `s` a launch of `alloc_free` from a module of `ctx` that no
/// heap serves: its malloc fails the launch, which `s`'s next
/// `synchronize` reports.
fn queue_an_unserved_launch(ctx: &Arc<CudaContext>, s: &CudaStream, stats: &mut CudaSlice<u64>) {
    let unlinked = ctx
        .load_module(Ptx::from_src(KERNELS_TESTS))
        .expect("a module left unlinked");
    let orphan = unlinked.load_function("alloc_free").expect("alloc_free");
    // SAFETY: STATS_WORDS words of stats.
    unsafe {
        s.launch_builder(&orphan)
            .arg(stats)
            .arg(&64u32)
            .arg(&2u32)
            .launch(grid(1, 32))
    }
    .expect("queued: the error comes later");
}

fn grid(blocks: u32, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[test]
fn kernels_on_two_streams_allocate_from_one_heap() {
    let (ctx, module, heap) = setup();
    let churn = module.load_function("alloc_free").expect("alloc_free");
    let grow = module.load_function("collections").expect("collections");
    let (a, b) = (
        ctx.new_stream().expect("stream"),
        ctx.new_stream().expect("stream"),
    );
    let mut churn_stats = a.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    let mut grow_stats = b.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    let (size, rounds, n) = (96u32, 4u32, 24u32);
    // SAFETY: each kernel gets its STATS_WORDS words of stats.
    unsafe {
        a.launch_builder(&churn)
            .arg(&mut churn_stats)
            .arg(&size)
            .arg(&rounds)
            .launch(grid(2, 64))
            .expect("launch alloc_free");
        b.launch_builder(&grow)
            .arg(&mut grow_stats)
            .arg(&n)
            .launch(grid(2, 64))
            .expect("launch collections");
    }
    a.synchronize().expect("stream a");
    b.synchronize().expect("stream b");

    let churned = Stats::from_words(&a.memcpy_dtov(&churn_stats).expect("read"));
    assert_eq!(
        (churned.allocs, churned.nulls, churned.corrupt),
        (128 * u64::from(rounds), 0, 0)
    );
    let grown = b.memcpy_dtov(&grow_stats).expect("read");
    assert_eq!(grown[0], 128, "every collections thread finished");
    assert_eq!(grown[4], 0, "no collections thread saw a wrong value");

    let stats = heap.stats().expect("stats");
    assert!(stats.traffic.served() > 0, "the heap served nothing");
    assert_eq!(stats.live.live_allocations(), 0, "blocks left live");
    assert_eq!(
        (stats.device.double_frees, stats.device.invalid_frees),
        (0, 0)
    );
    assert_eq!(heap.check().expect("check"), Ok(()));
}

#[test]
fn launches_on_one_stream_run_in_order_and_report_errors_at_synchronize() {
    let (ctx, module, heap) = setup();
    let churn = module.load_function("alloc_free").expect("alloc_free");
    let s = ctx.default_stream();
    let mut st = s.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    for _ in 0..3 {
        // SAFETY: STATS_WORDS words of stats.
        unsafe {
            s.launch_builder(&churn)
                .arg(&mut st)
                .arg(&64u32)
                .arg(&2u32)
                .launch(grid(1, 32))
        }
        .expect("launch");
    }
    let words = s.memcpy_dtov(&st).expect("read");
    assert_eq!(words[0], 3 * 32 * 2, "three launches, all counted");
    // One builder launched twice, as cudarc allows (its launch keeps the
    // arguments): both run (a review, 2026-12-08: the second had none).
    {
        let mut twice = s.launch_builder(&churn);
        twice.arg(&mut st).arg(&64u32).arg(&2u32);
        for _ in 0..2 {
            // SAFETY: as above.
            unsafe { twice.launch(grid(1, 32)) }.expect("the builder's launch");
        }
    }
    s.synchronize().expect("both ran");
    let words = s.memcpy_dtov(&st).expect("read");
    assert_eq!(words[0], 5 * 32 * 2, "five launches, all counted");
    // In order: a launch that frees what the launch queued before it took.
    // Out of order, the frees would find no pointer and the blocks stay
    // live.
    let take = module.load_function("malloc_only").expect("malloc_only");
    let give = module.load_function("free_only").expect("free_only");
    let mut ptrs = s.alloc_zeros::<u64>(32).expect("buffer");
    // SAFETY: a word per thread.
    unsafe {
        s.launch_builder(&take)
            .arg(&mut ptrs)
            .arg(&48u32)
            .launch(grid(1, 32))
            .expect("launch malloc_only");
        s.launch_builder(&give)
            .arg(&mut ptrs)
            .launch(grid(1, 32))
            .expect("launch free_only");
    }
    s.synchronize().expect("both ran");
    assert!(
        s.memcpy_dtov(&ptrs).expect("read").iter().all(|&p| p != 0),
        "malloc_only served every thread"
    );
    let live = heap.stats().expect("stats").live;
    assert_eq!(live.live_allocations(), 0, "the frees ran first: {live:?}");
    // An error of a launch that was queued comes at the next synchronise:
    // a kernel of a module no heap serves, whose malloc fails its launch.
    queue_an_unserved_launch(&ctx, &s, &mut st);
    let failed = s.synchronize();
    assert!(
        matches!(&failed, Err(e) if e.to_string().contains("heap.link")),
        "{failed:?}"
    );
    s.synchronize().expect("the error was reported once");
    // A launch with a missing parameter is refused when it is built.
    // SAFETY: refused before it runs.
    let refused = unsafe { s.launch_builder(&churn).arg(&mut st).launch(grid(1, 32)) };
    assert!(
        matches!(&refused, Err(HostError::Launch { why, .. }) if why.contains("parameters")),
        "{refused:?}"
    );
    // A kernel the PTX lacks, and one the program did not compile in.
    assert!(matches!(
        module.load_function("no_such_kernel"),
        Err(HostError::MissingSymbol { .. })
    ));
    assert!(matches!(
        module.load_function("drain"),
        Err(HostError::Launch { .. })
    ));
    drop(heap);
}

#[test]
fn modules_share_a_heap_and_are_unlinked_when_it_drops() {
    let (ctx, first, heap) = setup();
    let second = ctx
        .load_module(Ptx::from_src(KERNELS_TESTS))
        .expect("second module");
    heap.link(&second).expect("link the second module");
    heap.link(&second).expect("linking twice does nothing");

    // A second heap cannot take a module the first one holds.
    let other = Heap::attach(&ctx, config()).expect("another heap");
    assert!(matches!(
        other.link(&first),
        Err(HostError::LinkedElsewhere(addr)) if addr == heap.device_heap()
    ));

    let s = ctx.default_stream();
    let mut st = s.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    for module in [&first, &second] {
        let f = module.load_function("alloc_free").expect("alloc_free");
        // SAFETY: STATS_WORDS words of stats.
        unsafe {
            s.launch_builder(&f)
                .arg(&mut st)
                .arg(&48u32)
                .arg(&2u32)
                .launch(grid(1, 64))
        }
        .expect("launch");
    }
    let words = s.memcpy_dtov(&st).expect("read");
    assert_eq!(
        (words[0], words[2]),
        (2 * 64 * 2, 0),
        "both modules allocated"
    );
    assert!(heap.stats().expect("stats").traffic.served() > 0);

    // Once the heap is gone, a kernel of its modules that allocates finds no
    // heap (not a dangling one): on a GPU its malloc returns null; the
    // simulator, not more forgiving, fails the launch with what to do. The
    // other heap may take the modules then.
    drop(heap);
    let mut after = s.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    let f = first.load_function("alloc_free").expect("alloc_free");
    // SAFETY: STATS_WORDS words of stats.
    let launched = unsafe {
        s.launch_builder(&f)
            .arg(&mut after)
            .arg(&48u32)
            .arg(&1u32)
            .launch(grid(1, 32))
    };
    let failed = launched.and_then(|_| s.synchronize());
    let Err(e) = failed else {
        panic!("a kernel of a module whose heap was dropped allocated");
    };
    assert!(e.to_string().contains("heap.link(&module)"), "{e}");
    other
        .link(&first)
        .expect("the other heap links the module now");
}

#[test]
fn a_module_of_another_context_is_refused() {
    let (_ctx, module, _heap) = setup();
    let ctx2 = CudaContext::new(KERNELS).expect("context");
    let heap2 = Heap::attach(&ctx2, config()).expect("heap");
    assert!(matches!(
        heap2.link(&module),
        Err(HostError::WrongDevice(_))
    ));
}

/// A function of one context launched on another context's stream is
/// refused, as CUDA refuses it: the launch would run with the first
/// context's heap while only the second context knew it ran, so the heap's
/// drop, which waits for its own context's work, freed the memory under
/// the kernel (a review, 2026-12-07).
#[test]
fn a_function_launched_on_another_contexts_stream_is_refused() {
    let (_ctx, module, heap) = setup();
    let churn = module.load_function("alloc_free").expect("alloc_free");
    let ctx2 = CudaContext::new(KERNELS).expect("context");
    let stream = ctx2.new_stream().expect("stream");
    let mut stats = stream.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    let (size, rounds) = (64u32, 2u32);
    // SAFETY: the kernel's STATS_WORDS words of stats (it is refused).
    let launched = unsafe {
        stream
            .launch_builder(&churn)
            .arg(&mut stats)
            .arg(&size)
            .arg(&rounds)
            .launch(grid(1, 32))
    };
    assert!(
        matches!(launched, Err(HostError::WrongDevice(_))),
        "{launched:?}"
    );
    stream.synchronize().expect("nothing ran");
    drop(heap);
}

#[test]
fn the_default_stream_is_one_stream_and_keeps_no_context_alive() {
    let ctx = CudaContext::new(KERNELS).expect("context");
    let weak = Arc::downgrade(&ctx);
    {
        let a = ctx.default_stream();
        let b = ctx.default_stream();
        assert!(Arc::ptr_eq(&a, &b), "two default streams");
    }
    drop(ctx);
    assert!(
        weak.upgrade().is_none(),
        "the context outlived the program's last handle"
    );
}

/// Opening a GPU where there may be none is an error a user can read, never
/// a panic: "no CUDA driver" without libcuda (CI), "no GPU" without a
/// device; with one, a context.
#[test]
fn opening_a_gpu_without_one_is_an_error_not_a_panic() {
    let opened = std::panic::catch_unwind(|| warpalloc::open_gpu(0));
    let Ok(result) = opened else {
        panic!("open_gpu panicked");
    };
    match result {
        Ok(ctx) => assert_eq!(ctx.ordinal(), 0),
        Err(e @ warpalloc::HostError::NoDriver) => {
            assert!(!warpalloc::driver_present());
            assert!(e.to_string().starts_with("no CUDA driver"), "{e}");
        }
        Err(e @ warpalloc::HostError::NoDevice(_)) => {
            assert!(warpalloc::driver_present());
            assert!(e.to_string().contains("sees no GPU"), "{e}");
        }
        Err(e) => panic!("an unexpected error: {e}"),
    }
    // An ordinal past every GPU is a plain error too.
    let far = std::panic::catch_unwind(|| warpalloc::open_gpu(1 << 20));
    assert!(matches!(far, Ok(Err(_))), "ordinal 2^20");
}

/// A launch whose arguments do not match the kernel's parameters is told
/// the kernel's parameters with their types, and which one is wrong.
#[test]
fn a_launch_with_the_wrong_arguments_names_the_parameters() {
    let (ctx, module, _heap) = setup();
    let f = module.load_function("alloc_free").expect("alloc_free");
    let s = ctx.default_stream();
    let mut st = s.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    // One argument short.
    // SAFETY: the launch is refused before the kernel runs.
    let short = unsafe {
        s.launch_builder(&f)
            .arg(&mut st)
            .arg(&48u32)
            .launch(grid(1, 32))
    };
    let e = short
        .and_then(|_| s.synchronize())
        .expect_err("one argument short");
    let text = e.to_string();
    assert!(
        text.contains("takes 3 parameters (stats: *mut u64, size: u32, rounds: u32)")
            && text.contains("the launch gave 2"),
        "{text}"
    );
    // A u64 where the kernel takes a u32.
    // SAFETY: as above.
    let wide = unsafe {
        s.launch_builder(&f)
            .arg(&mut st)
            .arg(&48u64)
            .arg(&1u32)
            .launch(grid(1, 32))
    };
    let e = wide
        .and_then(|_| s.synchronize())
        .expect_err("a u64 for a u32");
    let text = e.to_string();
    assert!(
        text.contains("parameter 1 of (stats: *mut u64, size: u32, rounds: u32), `size: u32`, is 4 bytes; the launch gave 8"),
        "{text}"
    );
}

/// A launch on a stream that fails is reported by the context's
/// `synchronize` too (as `cuCtxSynchronize` reports a kernel's fault), and
/// the heap's `forget_refusal` (the call a program that launches on its own
/// streams makes before a launch) repairs what such a launch leaves (a
/// slot being created, here planted: lanes stopped amid a slab's creation
/// leave one, on which the next launch's searches waited until the
/// watchdog), as `Heap::launch` does after a failed launch of its own.
#[test]
fn a_failed_stream_launch_is_reported_by_the_context_and_repaired_by_the_heap() {
    use warpalloc_device::heap::LAYOUT;
    let (ctx, _module, heap) = setup();
    // The emulated device's memory is this process's: slot 5's guard of
    // this heap's `DeviceHeap` (a `u64` a slot), aligned.
    let slot = ((heap.device_heap() + LAYOUT.slots) as *mut u64).wrapping_add(5);
    // SAFETY: as said; no kernel runs. Being created (pointer `SENTINEL`),
    // by no one.
    unsafe { slot.write(u64::from(u32::MAX)) };
    // A kernel of a module no heap serves: its malloc fails its launch.
    let s = ctx.new_stream().expect("stream");
    let mut st = s.alloc_zeros::<u64>(STATS_WORDS).expect("buffer");
    queue_an_unserved_launch(&ctx, &s, &mut st);
    assert!(s.synchronize().is_err(), "the stream reports it");
    let by_context = ctx.synchronize();
    assert!(
        matches!(&by_context, Err(e) if e.to_string().contains("heap.link")),
        "{by_context:?}"
    );
    ctx.synchronize().expect("reported once");
    assert!(!heap.forget_refusal().expect("repair"), "no refusal");
    // SAFETY: as above; no kernel runs.
    assert_ne!(unsafe { slot.read() } as u32, u32::MAX, "given up");
    assert_eq!(
        heap.check().expect("check"),
        Ok(()),
        "repaired: no slot left being created"
    );
}

/// A buffer whose size in bytes overflows is refused as such (it was "out
/// of host memory for the emulated device"; `Launcher::alloc_zeroed`, on a
/// GPU too: tests/heap.rs).
#[test]
fn a_buffer_whose_size_overflows_is_refused_as_such() {
    let (ctx, _module, _heap) = setup();
    let e = ctx
        .default_stream()
        .alloc_zeros::<u64>(usize::MAX)
        .map(|_| ())
        .expect_err("overflows");
    assert!(
        matches!(
            e,
            HostError::BufferTooLarge {
                len: usize::MAX,
                element: 8
            }
        ),
        "{e}"
    );
}

/// What a program written once for both devices uses, in cudarc's names:
/// `memset_zeros`, a slice's address through `DevicePtr::device_ptr(&stream)`,
/// a struct parameter of the program's own through `KernelParam` (cudarc's
/// `DeviceRepr` on a GPU, `Param` here), and the launch's simulator counts.
#[test]
fn one_program_for_both_devices_runs_here() {
    let (ctx, module, _heap) = setup();
    let f = module.load_function("fill_with").expect("fill_with");
    let s = ctx.new_stream().expect("stream");
    let n = 96u32;
    let mut out = s.clone_htod(&vec![u64::MAX; n as usize]).expect("buffer");
    s.memset_zeros(&mut out).expect("memset_zeros");
    assert!(s.memcpy_dtov(&out).expect("read").iter().all(|&v| v == 0));
    let args = fill_of(&s, &out, 1000);
    assert!(s.simulator_stats().is_none(), "no launch yet");
    // SAFETY: `out` has `n` words, alive until the stream is synchronised.
    unsafe {
        s.launch_builder(&f)
            .arg(&KernelParam(args))
            .launch(grid(2, 64))
            .expect("launch");
    }
    s.synchronize().expect("synchronize");
    let got = s.memcpy_dtov(&out).expect("read");
    assert!(
        got.iter().enumerate().all(|(i, &v)| v == 1000 + i as u64),
        "{got:?}"
    );
    let stats = s.simulator_stats().expect("the launch's counts");
    assert!(stats.steps > 0 && stats.lanes == 128, "{stats:?}");
}

/// A copy on one stream waits for a kernel another stream queued on its
/// slice, as cudarc's events order them: it read the slice while the
/// kernel still wrote it (a review, 2026-12-07).
#[test]
fn a_copy_on_another_stream_waits_for_the_kernel_that_writes_its_slice() {
    let (ctx, module, _heap) = setup();
    let f = module.load_function("fill_with").expect("fill_with");
    let (a, b) = (
        ctx.new_stream().expect("stream"),
        ctx.new_stream().expect("stream"),
    );
    let n = 64 * 256u32;
    let out = a.alloc_zeros::<u64>(n as usize).expect("buffer");
    let args = fill_of(&a, &out, 7);
    // SAFETY: `out` has `n` words, alive until both streams are done.
    unsafe {
        a.launch_builder(&f)
            .arg(&KernelParam(args))
            .launch(grid(64, 256))
            .expect("launch");
    }
    let got = b.memcpy_dtov(&out).expect("read");
    let wrong = got
        .iter()
        .enumerate()
        .filter(|&(i, &v)| v != 7 + i as u64)
        .count();
    assert_eq!(wrong, 0, "the copy read words the kernel had not written");
    a.synchronize().expect("stream a");
}
