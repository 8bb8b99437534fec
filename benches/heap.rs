//! CPU benchmarks of the host side (figures for reference; the GPU's come
//! from the GPU check):
//!
//! * `rpc/round_trip`: one client thread's PING call through a simulator
//!   heap's mailbox to the server thread and back;
//! * `rpc/throughput`: two client threads calling at once;
//! * `first_touch/{rpc,pool}`: a fresh heap's first launch in the simulator,
//!   where every thread's first allocation needs a new slab — mapped on demand
//!   over RPC, or popped from the pre-mapped pool;
//! * `region/large_run`: the RPC server's search for where a large block
//!   goes (1 GiB, 8 GiB) in a fresh 282 GiB region — an H200's default
//!   reservation, twice its memory — before any mapping: a limit of one
//!   granule refuses the block once it is placed, so every iteration
//!   searches the same fresh region.
//!
//! `cargo bench -p warpalloc-tool --bench heap`

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use warpalloc::{Heap, HeapConfig, Mode};
use warpalloc_device::rpc::Client;
use warpalloc_device::rpc::wire::{LANE_WORDS, Reply, Request};
use warpalloc_device::sync::AtomicU32;
use warpalloc_host::backing::{GRANULE, HostEmulated, Refusal, Region, RegionConfig};
use warpalloc_host::{Launcher, Prefer};
use warpalloc_kernels_tests::stress::{STATS_WORDS, fill};

fn emulated_heap(config: HeapConfig) -> Heap {
    let launcher =
        Launcher::new(warpalloc_tool::ptx::KERNELS_TESTS, Prefer::Simulator).expect("launcher");
    Heap::new(launcher, config).expect("heap")
}

fn ping(client: &Client<'_>, n: u64) -> u64 {
    let mut words = [0u64; LANE_WORDS];
    words[0] = n;
    client.call(1, &Request::Ping { words }, Reply::read_ping)[0]
}

fn rpc(c: &mut Criterion) {
    let heap = emulated_heap(HeapConfig {
        ports: Some(64),
        ..HeapConfig::default()
    });
    let ports = heap.ports().cast_mut();
    let locks: Vec<AtomicU32> = (0..2).map(|_| AtomicU32::new(0)).collect();
    let mut group = c.benchmark_group("rpc");
    group.throughput(Throughput::Elements(1));
    group.bench_function("round_trip", |b| {
        // SAFETY: the heap's 64 ports outlive the benchmark; its server serves
        // them, and only these clients lock them, through `locks`.
        let client = unsafe { Client::new(ports, 64, &locks) }.expect("64 ports");
        let mut n = 0;
        b.iter(|| {
            n += 1;
            assert_eq!(ping(&client, n), !n);
        })
    });
    let per_thread = 2000u64;
    group.throughput(Throughput::Elements(2 * per_thread));
    group.bench_function("throughput_2_clients", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for t in 0..2u64 {
                    let locks = &locks;
                    let ports = ports as usize;
                    s.spawn(move || {
                        // SAFETY: as above.
                        let client =
                            unsafe { Client::new(ports as *mut _, 64, locks) }.expect("64 ports");
                        for i in 0..per_thread {
                            let n = t << 32 | i;
                            assert_eq!(ping(&client, n), !n);
                        }
                    });
                }
            })
        })
    });
    group.finish();
}

fn first_touch(c: &mut Criterion) {
    let mut group = c.benchmark_group("first_touch");
    group.sample_size(10);
    let (blocks, threads) = (8u32, 128u32);
    group.throughput(Throughput::Elements(u64::from(blocks * threads)));
    for (name, mode) in [("rpc", Mode::Rpc), ("pool", Mode::Pool { slabs: 64 })] {
        group.bench_function(BenchmarkId::new(name, "8x128 threads, 16 B-8 KiB"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut heap = emulated_heap(HeapConfig {
                        mode,
                        ..HeapConfig::default()
                    });
                    heap.launcher_mut()
                        .expect("a heap made with a launcher")
                        .simulator_config()
                        .workers = 1;
                    let n = (blocks * threads) as usize;
                    let l = heap.launcher().expect("a heap made with a launcher");
                    let stats = l.alloc_zeroed::<u64>(STATS_WORDS).expect("buffer");
                    let ptrs = l.alloc_zeroed::<u64>(n).expect("buffer");
                    let sizes = l.alloc_zeroed::<u32>(n).expect("buffer");
                    let counts = l.alloc_zeroed::<u32>(n).expect("buffer");
                    let args = fill::Args {
                        stats: stats.kernel_ptr(),
                        ptrs: ptrs.kernel_ptr(),
                        sizes: sizes.kernel_ptr(),
                        counts: counts.kernel_ptr(),
                        per_thread: 1,
                        seed: 7,
                        max_small: 8192,
                    };
                    let start = Instant::now();
                    // SAFETY: the buffers hold one entry per thread and
                    // outlive the launch.
                    unsafe { heap.launch((blocks, 1, 1), (threads, 1, 1), args) }.expect("launch");
                    total += start.elapsed();
                    let stats = heap
                        .launcher()
                        .expect("a heap made with a launcher")
                        .read(&stats)
                        .expect("read");
                    assert_eq!(stats[2], 0, "out of memory in a benchmark");
                }
                total
            })
        });
    }
    group.finish();
}

fn region(c: &mut Criterion) {
    let backing = HostEmulated::new(141 << 30).expect("emulated device");
    let mut region = Region::new(
        backing,
        RegionConfig {
            reserve: Some(282 << 30),
            limit: Some(GRANULE),
            ..RegionConfig::default()
        },
    )
    .expect("region");
    let mut group = c.benchmark_group("region");
    group.sample_size(10);
    for gib in [1u64, 8] {
        group.bench_function(BenchmarkId::new("large_run", format!("{gib} GiB")), |b| {
            b.iter(|| {
                let refused = region.allocate(gib << 30, GRANULE);
                assert_eq!(refused, Err(Refusal::Limit), "placed, then refused");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, rpc, first_touch, region);
criterion_main!(benches);
