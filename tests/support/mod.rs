//! What the heap tests share: a heap on the emulated device (the embedded
//! PTX's module, its WARPALLOC_HEAP), launches with a given simulator
//! schedule, device buffers, and the "everything came back" check.

#![allow(dead_code)]

use warpalloc::{Heap, HeapConfig, Mode};
use warpalloc_device::Errors;
use warpalloc_device::kernel::Kernel;
use warpalloc_device::sim::{LaunchConfig, LaunchStats};
use warpalloc_host::backing::GRANULE;
use warpalloc_host::{Buffer, Launcher, Prefer};
use warpalloc_kernels_tests::stress::Stats;

/// The module the tests load: the embedded PTX (under Miri its
/// declarations only, which Miri parses in seconds rather than minutes: the
/// same globals and entry points).
pub const PTX: &str = if cfg!(miri) {
    warpalloc_tool::ptx::KERNELS_TESTS_DECLARATIONS
} else {
    warpalloc_tool::ptx::KERNELS_TESTS
};

/// A heap on the emulated device with `config`.
pub fn heap_with(config: HeapConfig) -> Heap {
    let launcher = Launcher::new(PTX, Prefer::Simulator).expect("launcher");
    Heap::new(launcher, config).expect("a heap on the emulated device")
}

/// A heap of `capacity` bytes of address space (whole slabs) and `slots`
/// slots.
pub fn heap(capacity: u64, slots: u32) -> Heap {
    heap_with(HeapConfig {
        reserve: Some(capacity),
        slots,
        ..HeapConfig::default()
    })
}

/// Runs `args` with `cfg`'s grid, block and schedule, panicking with the
/// seed on failure; the simulator's counts of the launch.
#[track_caller]
pub fn run<K: Kernel>(heap: &mut Heap, cfg: &LaunchConfig, args: K) -> Option<LaunchStats> {
    *heap
        .launcher_mut()
        .expect("a heap made with a launcher")
        .simulator_config() = cfg.clone();
    // SAFETY: every pointer in `args` comes from buffers of this heap's
    // launcher, sized for the grid and alive until this returns.
    match unsafe { heap.launch(cfg.grid_dim, cfg.block_dim, args) } {
        Ok(report) => report.simulator,
        Err(e) => panic!("{}: {e}", K::NAME),
    }
}

/// A zeroed device buffer of `n` elements.
pub fn buffer<T: bytemuck::Pod>(heap: &Heap, n: usize) -> Buffer<T> {
    heap.launcher()
        .expect("a heap made with a launcher")
        .alloc_zeroed(n)
        .expect("device buffer")
}

/// A device buffer's contents.
pub fn read<T: bytemuck::Pod>(heap: &Heap, b: &Buffer<T>) -> Vec<T> {
    heap.launcher()
        .expect("a heap made with a launcher")
        .read(b)
        .expect("read a device buffer")
}

/// A stats buffer's counters.
pub fn stats(heap: &Heap, b: &Buffer<u64>) -> Stats {
    Stats::from_words(&read(heap, b))
}

/// The device's error record.
pub fn errors(heap: &Heap) -> Errors {
    heap.stats().expect("stats").device
}

/// No corruption, no broken promise, every allocation freed, no bad free.
#[track_caller]
pub fn assert_clean(stats: &Stats, errors: Errors, context: &str) {
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

/// The heap served what its launches so far asked for (a stress run's
/// results could be right with the allocator bypassed): slabs from its
/// provider, and large blocks too where `large`.
#[track_caller]
#[allow(dead_code)]
pub fn assert_served(heap: &Heap, large: bool, context: &str) {
    let t = heap.stats().expect("stats").traffic;
    assert!(
        t.slabs_from_provider > 0,
        "{context}: no slab served: {t:?}"
    );
    assert!(
        !large || t.large_allocations > 0,
        "{context}: no large block served: {t:?}"
    );
}

/// The heap's invariants hold, nothing is live, the region holds only the
/// empty and pooled slabs, and after a trim only the pool stays mapped.
#[track_caller]
pub fn assert_empty(heap: &mut Heap, context: &str) {
    assert_eq!(
        heap.check().expect("check"),
        Ok(()),
        "{context}: invariants"
    );
    let s = heap.stats().expect("stats");
    assert_eq!(
        (s.live.live_slabs, s.live.live_allocations()),
        (0, 0),
        "{context}: live after freeing everything: {:?}",
        s.live
    );
    let held = s.live.empty_slabs + s.live.pool_slabs;
    assert_eq!(
        s.region.in_use_bytes,
        held * GRANULE,
        "{context}: bytes in use beyond the empty and pooled slabs (a leak): {s:?}"
    );
    assert_eq!(
        s.region
            .refused(warpalloc_host::backing::Refusal::BadRequest),
        0,
        "{context}: bad returns to the region"
    );
    heap.trim().expect("trim");
    let s = heap.stats().expect("stats");
    let pooled = match heap.mode() {
        Mode::Pool { .. } => (s.live.pool_slabs + s.live.empty_slabs) * GRANULE,
        Mode::Rpc => 0,
    };
    assert_eq!(
        s.region.mapped_bytes, pooled,
        "{context}: mapped after trim: {s:?}"
    );
    assert_eq!(s.spill.bytes, 0, "{context}: spilled after trim: {s:?}");
}

/// Whether this process is the child that [`run_child`] started for the
/// test whose switch is `env`.
pub fn is_child(env: &str) -> bool {
    std::env::var_os(env).is_some()
}

/// Runs this test binary again for the test `name` alone, with `env` set (so
/// that the test knows, by [`is_child`], that it is the child): for what ends
/// a process, or writes to its stderr. Its exit status and output.
pub fn run_child(name: &str, env: &str) -> std::process::Output {
    std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env, "1")
        .output()
        .expect("run the child")
}

/// [`run_child`] for a child that must end the program (a GPU would trap):
/// asserts that it failed; its stdout and stderr.
#[track_caller]
pub fn run_ending_child(name: &str, env: &str) -> (String, String) {
    let out = run_child(name, env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "the child went on: {stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// `malloc_sizes` of `sizes` (a thread each) with `cfg`'s grid and
/// schedule: the addresses (0: null), and the simulator's counts.
pub fn malloc_sizes_with(
    heap: &mut Heap,
    cfg: &LaunchConfig,
    sizes: &[u32],
) -> (Vec<u64>, Option<LaunchStats>) {
    let launcher = heap.launcher().expect("a heap made with a launcher");
    let sizes_buf = launcher.upload(sizes).expect("upload");
    let ptrs = buffer::<u64>(heap, sizes.len());
    let counts = run(
        heap,
        cfg,
        warpalloc_kernels_tests::stress::malloc_sizes::Args {
            ptrs: ptrs.kernel_ptr(),
            sizes: sizes_buf.kernel_ptr(),
        },
    );
    (read(heap, &ptrs), counts)
}

/// `malloc_sizes` of `sizes` (a thread each, one block); the addresses.
pub fn malloc_sizes_run(heap: &mut Heap, sizes: &[u32]) -> Vec<u64> {
    let cfg = LaunchConfig::linear(1, sizes.len() as u32).seed(3);
    malloc_sizes_with(heap, &cfg, sizes).0
}

/// `free_only` of `ptrs` (a thread each; 0: nothing) with `cfg`'s grid and
/// schedule: the simulator's counts.
pub fn free_with(heap: &mut Heap, cfg: &LaunchConfig, ptrs: &[u64]) -> Option<LaunchStats> {
    let launcher = heap.launcher().expect("a heap made with a launcher");
    let buf = launcher.upload(ptrs).expect("upload");
    run(
        heap,
        cfg,
        warpalloc_kernels_tests::stress::free_only::Args {
            ptrs: buf.kernel_ptr(),
        },
    )
}

/// `free_only` of `ptrs` (a thread each, one block; 0: nothing).
pub fn free_run(heap: &mut Heap, ptrs: &[u64]) {
    free_with(
        heap,
        &LaunchConfig::linear(1, ptrs.len() as u32).seed(5),
        ptrs,
    );
}
