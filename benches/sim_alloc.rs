//! Simulator throughput of the real allocator, for reference only (CPU; the
//! GPU figures come from the GPU check): malloc → write → check → free
//! rounds of the churn kernel, counted as operations (one malloc plus one
//! free) per second.
//!
//! `cargo bench -p warpalloc-tool --bench sim_alloc`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use warpalloc::{Heap, HeapConfig};
use warpalloc_device::sim::{Convergence, LaunchConfig};
use warpalloc_host::{Buffer, Launcher, Prefer};
use warpalloc_kernels_tests::stress::{STATS_WORDS, churn};

fn churn_round(heap: &mut Heap, stats: &Buffer<u64>, iterations: u32, max_small: u32) -> u64 {
    let args = churn::Args {
        stats: stats.kernel_ptr(),
        transfer: std::ptr::null_mut(),
        slots: 0,
        seed: 1,
        iterations,
        max_small,
        large_one_in: 0,
    };
    // SAFETY: `stats` has the kernel's words and outlives the launch; with
    // `slots == 0` the kernel never touches `transfer`.
    unsafe { heap.launch((16, 1, 1), (128, 1, 1), args) }.expect("churn launch");
    let words = heap
        .launcher()
        .expect("a heap made with a launcher")
        .read(stats)
        .expect("read");
    assert_eq!(words[3], 0, "corruption in a benchmark run");
    words[0]
}

fn bench(c: &mut Criterion) {
    let launcher =
        Launcher::new(warpalloc_tool::ptx::KERNELS_TESTS, Prefer::Simulator).expect("launcher");
    let mut heap = Heap::new(launcher, HeapConfig::default()).expect("heap");
    let stats = heap
        .launcher()
        .expect("a heap made with a launcher")
        .alloc_zeroed::<u64>(STATS_WORDS)
        .expect("buffer");
    let mut group = c.benchmark_group("sim_churn");
    group.sample_size(10);
    for (name, max_small) in [("16B-256B", 256u32), ("16B-8KiB", 8192)] {
        for (policy, workers, convergence) in [
            ("1 worker, random", 1, Convergence::Random),
            ("2 workers, converged", 2, Convergence::Converged),
        ] {
            *heap
                .launcher_mut()
                .expect("a heap made with a launcher")
                .simulator_config() = LaunchConfig::linear(16, 128)
                .workers(workers)
                .convergence(convergence);
            let iterations = 8;
            let ops = 16 * 128 * u64::from(iterations);
            group.throughput(Throughput::Elements(ops));
            group.bench_function(BenchmarkId::new(name, policy), |b| {
                b.iter(|| churn_round(&mut heap, &stats, iterations, max_small))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
