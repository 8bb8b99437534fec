//! Contention at a GPU's residency: many warps resident at once, all
//! allocating one size, as an H200 runs the benchmark's `alloc_free` (8
//! blocks of 256 threads per SM: 64 warps per SM, 8 448 on 132 SMs). The
//! simulator's default keeps 64 warps resident per worker, where a class
//! never needs more than a slab or two; here one worker keeps `RESIDENT`
//! warps resident, so that demand ÷ a slab's blocks is what the GPU sees
//! at 8 KiB (an H200's 270 336 resident threads ÷ 255 blocks a slab: 1 060
//! slabs; here 16 384 ÷ 255: 65).
//!
//! Warps are converged (lockstep, as the GPU benchmark's are and the
//! tool's `bench` runs them); read-modify-writes are counted per address
//! (`LaunchConfig::count_addresses`) over the slot table, and the sleep the
//! lanes ask for is counted (the simulator does not wait it).
//!
//! What it holds, per size (the simulator gate, those parts these
//! counters give):
//! * growth: the heap's peak slabs reach `GROWTH` of the demand (resident
//!   lanes ÷ a slab's blocks), so warps do not queue behind one creation;
//! * no queueing: guard read-modify-writes per warp-pair stay under
//!   `GUARD_RMWS_PER_WARP_PAIR`, all read-modify-writes per pair under
//!   `RMWS_PER_PAIR`, and the sleep asked for per pair under
//!   `SLEEP_NS_PER_PAIR` (a search that bounces pays its atomics and its
//!   wait again);
//! * no takeover churn: slabs taken over from other slots per 1 000 pairs
//!   stay under `TAKEOVERS_PER_1000` (one class, memory to spare: a claim
//!   finds the host, and the class's empty slabs are revived in place);
//! * every pair served (no nulls), nothing corrupt, the heap clean.
//!
//! The same test at the commit before growth and spreading (b98662f, with
//! this simulator's counters) fails at 8 KiB — 0.60 of the demand, 63
//! guard RMWs per warp-pair, 2.2 RMWs per pair, 1.22 takeovers per 1 000
//! pairs (its 10.5 µs of sleep per pair is within the bound) — and at 1 KiB
//! by takeovers (0.107 per 1 000): BENCHMARKS.md, "Growth and spreading".

mod support;

use support::{assert_clean, assert_empty, buffer, errors, heap, run, stats};
use warpalloc_device::heap::{LAYOUT, MAX_SLOTS};
use warpalloc_device::sim::{Convergence, LaunchConfig};
use warpalloc_device::size_class::{SLAB_SIZE, class_index, geometry};
use warpalloc_kernels_tests::stress::{STATS_WORDS, alloc_free};

/// Warps resident at once (one worker).
const RESIDENT: u32 = 512;
/// Threads per block, as the GPU benchmark launches.
const BLOCK: u32 = 256;
/// malloc/free rounds per thread.
const ROUNDS: u32 = 4;
/// The least peak slabs ÷ demand. The target is 0.8 at a GPU's
/// residency; here, where a lane holds its block for only a few switch
/// points, fewer lanes may hold one at once than are resident, so the
/// demand is an upper bound. Measured 0.97 to 1.37 at 8 KiB over four runs
/// (the RPC server's timing is not the simulator's to replay); before
/// growth to the demand, 0.60.
const GROWTH: f64 = 0.7;
/// The most read-modify-writes on slot guards per warp-pair: a lock and an
/// unlock when nothing queues, more for a group split over slabs with
/// little room. Measured 3.3 at 16 B, 6 to 10 at 1 KiB, 19 to 21 at 8 KiB;
/// before, 63 at 8 KiB.
const GUARD_RMWS_PER_WARP_PAIR: f64 = 32.0;
/// The most atomic read-modify-writes per pair, the kernel's own counters
/// taken out. Measured 0.2 to 0.8; before, 2.2 at 8 KiB.
const RMWS_PER_PAIR: f64 = 1.5;
/// The most sleep asked for per pair, in nanoseconds. Measured 0.2 to
/// 0.4 µs at 16 and 64 B, 2.8 to 4.7 µs at 1 KiB and 2.7 to 3.7 µs at
/// 8 KiB, most of it polls of slabs being created, whose number follows the
/// RPC server's real time while the simulator's polls take none (so it
/// moves with the machine's load); before growth to the demand, 10.5 µs at
/// 8 KiB. The target is 50 ns: far from met.
const SLEEP_NS_PER_PAIR: f64 = 20_000.0;
/// The most slabs taken over from another slot per 1 000 pairs.
const TAKEOVERS_PER_1000: f64 = 0.01;

/// What one run of `alloc_free` at `size` showed.
#[derive(Debug)]
struct Contention {
    pairs: u64,
    nulls: u64,
    /// Slabs the lanes' blocks need at once: resident lanes ÷ a slab's
    /// blocks (rounded up), at most one slab per lane.
    demand: u64,
    peak_slabs: u64,
    from_host: u64,
    takeovers: u64,
    revived: u64,
    /// The launch's atomic read-modify-writes, the kernel's own four
    /// counters per thread included.
    rmws: u64,
    /// The launch's simulator steps.
    steps: u64,
    /// Read-modify-writes on slot guards.
    guard_rmws: u64,
    /// Read-modify-writes on the guard word that had the most.
    hottest_guard: u64,
    /// Nanoseconds of sleep asked for.
    sleep_ns: u64,
}

impl Contention {
    fn growth(&self) -> f64 {
        self.peak_slabs as f64 / self.demand as f64
    }

    /// The allocator's atomic read-modify-writes per pair (the kernel's
    /// own counters taken out): a search that bounces off a creation, a
    /// full slab or a lost word pays them again each time, so queueing
    /// shows here.
    fn rmws_per_pair(&self) -> f64 {
        let kernel = 4 * u64::from(RESIDENT * 32);
        self.rmws.saturating_sub(kernel) as f64 / self.pairs.max(1) as f64
    }

    /// Pairs of a whole warp: a warp's malloc and free are one group's
    /// (a lock and an unlock of a guard each, when nothing queues).
    fn warp_pairs(&self) -> f64 {
        self.pairs.max(1) as f64 / 32.0
    }

    fn guard_rmws_per_warp_pair(&self) -> f64 {
        self.guard_rmws as f64 / self.warp_pairs()
    }

    fn hottest_guard_per_warp_pair(&self) -> f64 {
        self.hottest_guard as f64 / self.warp_pairs()
    }

    fn sleep_ns_per_pair(&self) -> f64 {
        self.sleep_ns as f64 / self.pairs.max(1) as f64
    }

    fn steps_per_pair(&self) -> f64 {
        self.steps as f64 / self.pairs.max(1) as f64
    }

    fn takeovers_per_1000(&self) -> f64 {
        self.takeovers as f64 * 1000.0 / self.pairs.max(1) as f64
    }
}

fn contention(size: u32, seed: u64) -> Contention {
    let threads = RESIDENT * 32;
    let blocks = threads / BLOCK;
    let mut heap = heap(16 << 30, 32_768);
    let stats_buf = buffer::<u64>(&heap, STATS_WORDS);
    // The slot table: every guard word.
    let slots = (heap.device_heap() + LAYOUT.slots, MAX_SLOTS as u64 * 8);
    let cfg = LaunchConfig::linear(blocks, BLOCK)
        .seed(seed)
        .workers(1)
        .resident_warps(RESIDENT as usize)
        .convergence(Convergence::Converged)
        .count_addresses(slots);
    let launch = run(
        &mut heap,
        &cfg,
        alloc_free::Args {
            stats: stats_buf.kernel_ptr(),
            size,
            rounds: ROUNDS,
        },
    )
    .expect("simulator counts");
    let s = stats(&heap, &stats_buf);
    let context = format!("contention at {size} B, seed {seed:#x}");
    assert_clean(&s, errors(&heap), &context);
    let st = heap.stats().expect("stats");
    let usable = u64::from(geometry(class_index(size)).usable);
    let c = Contention {
        pairs: s.allocs,
        nulls: s.nulls,
        demand: u64::from(threads).div_ceil(usable).max(1),
        peak_slabs: st.region.peak_mapped_bytes / SLAB_SIZE,
        from_host: st.traffic.slabs_from_provider,
        takeovers: st.traffic.slabs_reclaimed,
        revived: st.traffic.slabs_revived,
        rmws: launch.atomic_rmws,
        steps: launch.steps,
        guard_rmws: launch.watched_rmws,
        hottest_guard: launch.watched_hottest,
        sleep_ns: launch.sleep_ns,
    };
    assert_empty(&mut heap, &context);
    c
}

#[test]
fn the_heap_grows_to_the_demand_without_takeover_churn() {
    let mut failures = String::new();
    for size in [16, 64, 1024, 8192] {
        let c = contention(size, 0xc0de ^ u64::from(size));
        println!(
            "{size} B: {} pairs, {} nulls; {:.1} RMWs and {:.0} steps per pair; per warp-pair {:.2} \
             guard RMWs, {:.3} on the hottest guard; {:.0} ns of sleep per pair; peak {} slabs for a \
             demand of {} ({:.2}); {} from the host, {} taken over ({:.3} per 1 000 pairs), {} revived",
            c.pairs,
            c.nulls,
            c.rmws_per_pair(),
            c.steps_per_pair(),
            c.guard_rmws_per_warp_pair(),
            c.hottest_guard_per_warp_pair(),
            c.sleep_ns_per_pair(),
            c.peak_slabs,
            c.demand,
            c.growth(),
            c.from_host,
            c.takeovers,
            c.takeovers_per_1000(),
            c.revived
        );
        if c.nulls != 0 {
            failures.push_str(&format!(
                "{size} B: {} nulls with memory to spare\n",
                c.nulls
            ));
        }
        if c.growth() < GROWTH {
            failures.push_str(&format!(
                "{size} B: peak slabs ÷ demand {:.2} < {GROWTH} ({c:?})\n",
                c.growth()
            ));
        }
        if c.guard_rmws_per_warp_pair() > GUARD_RMWS_PER_WARP_PAIR {
            failures.push_str(&format!(
                "{size} B: {:.1} guard RMWs per warp-pair > {GUARD_RMWS_PER_WARP_PAIR} ({c:?})\n",
                c.guard_rmws_per_warp_pair()
            ));
        }
        if c.sleep_ns_per_pair() > SLEEP_NS_PER_PAIR {
            failures.push_str(&format!(
                "{size} B: {:.0} ns of sleep per pair > {SLEEP_NS_PER_PAIR} ({c:?})\n",
                c.sleep_ns_per_pair()
            ));
        }
        if c.rmws_per_pair() > RMWS_PER_PAIR {
            failures.push_str(&format!(
                "{size} B: {:.1} RMWs per pair > {RMWS_PER_PAIR} ({c:?})\n",
                c.rmws_per_pair()
            ));
        }
        if c.takeovers_per_1000() > TAKEOVERS_PER_1000 {
            failures.push_str(&format!(
                "{size} B: {:.3} takeovers per 1 000 pairs > {TAKEOVERS_PER_1000} ({c:?})\n",
                c.takeovers_per_1000()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures}");
}
