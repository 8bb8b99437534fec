//! Contention at a GPU's residency: many warps resident at once, all
//! allocating one size, as an H200 runs the benchmark's `alloc_free` (8
//! blocks of 256 threads per SM: 64 warps per SM, 8 448 on 132 SMs). The
//! simulator's default keeps 64 warps resident per worker, where a class
//! never needs more than a slab or two; here one worker keeps `RESIDENT`
//! warps resident, so that demand ÷ a slab's blocks is what the GPU sees
//! at 8 KiB (an H200's 270 336 resident threads ÷ 255 blocks a slab: 1 060
//! slabs; here 16 384 ÷ 255: 65).
//!
//! Each size runs twice on one heap: cold (a fresh heap, whose slabs are
//! created while the launch runs) and warm (the same launch again: the GPU
//! benchmark's timed launch), each held to its own bounds. A class keeps a
//! search hint per stream of 8 resident warps, as the heap's default gives
//! a GPU.
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

use support::{assert_clean, assert_empty, buffer, errors, heap_with, run, stats};
use warpalloc::{Heap, HeapConfig};
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
/// Search streams: one per 8 resident warps, as the heap's default gives
/// a GPU (an H200's 8 448 resident warps: 1 024 streams), so that as many
/// warps share a hint here as there.
const STREAMS: u32 = RESIDENT / 8;

/// What a launch must hold.
struct Bounds {
    /// The least peak slabs ÷ demand.
    growth: f64,
    /// The most read-modify-writes on slot guards per warp-pair (a lock
    /// and an unlock each when nothing queues: 3).
    guard_rmws_per_warp_pair: f64,
    /// The most atomic read-modify-writes per pair, the kernel's own
    /// counters taken out.
    rmws_per_pair: f64,
    /// The most sleep asked for per pair, in nanoseconds.
    sleep_ns_per_pair: f64,
}

/// A fresh heap's launch, whose slabs are created while it runs.
///
/// * growth: the target is 0.8 at a GPU's residency; here, where a
///   lane holds its block for only a few switch points, fewer lanes may
///   hold one at once than are resident, so the demand is an upper bound.
///   Measured 0.97 to 1.37 at 8 KiB; before growth to the demand (b98662f),
///   0.60.
/// * guard RMWs per warp-pair: measured 3.3 at 16 B, 6 to 10 at 1 KiB, 19
///   to 21 at 8 KiB with 32 streams of 16 warps; before, 63 at 8 KiB.
/// * RMWs per pair: measured 0.2 to 0.8; before, 2.2 at 8 KiB.
/// * sleep: most of it polls of slabs being created, whose number follows
///   the RPC server's real time while the simulator's polls take none (so
///   it moves with the machine's load): 0.2 to 0.5 µs at 16 and 64 B, 0.3
///   µs at 1 KiB and 0.6 µs at 8 KiB (2026-12-05; at c00e259, 4.5 to 5.0
///   µs at 1 KiB and 1.5 to 2.5 µs at 8 KiB; before growth to the demand,
///   10.5 µs at 8 KiB).
/// * guard RMWs per warp-pair at 8 KiB: 13.7 to 14.2 (c00e259: 14.1 to
///   15.6; one stream: 13.6).
const COLD: Bounds = Bounds {
    growth: 0.7,
    guard_rmws_per_warp_pair: 32.0,
    rmws_per_pair: 1.5,
    sleep_ns_per_pair: 10_000.0,
};

/// The same launch again on that heap, whose slabs are there, empty: the
/// launch the GPU benchmark times (its targets are warm). Measured twice on
/// 2026-12-05 (the build machine, `cargo test --release --test contention
/// -- --nocapture`; the figures move with the machine's load, through the
/// RPC server's real time), against HEAD c00e259 with this test (a stream
/// per 16 warps, claims made before looking for the class's slabs, twice):
///
/// * guard RMWs per warp-pair: 3.00 at 16 and 64 B, 4.5 to 4.6 at 1 KiB
///   (c00e259: 3.6 to 4.9), 8.7 at 8 KiB (c00e259: 7.2 to 13.2). With one
///   stream (spreading removed) 17.5 at 8 KiB: this bound fails. The
///   issue's target is 3.5.
/// * sleep per pair: about 50 ns at 16 B and 72 ns at 64 B (the bitfield
///   walk's drawn waits), 100 ns at 1 KiB (c00e259: 1.2 to 3.0 µs) and 175
///   to 189 ns at 8 KiB (c00e259: 0.75 to 0.78 µs): the warm launch
///   creates no slab now (c00e259: 2 to 11). The target is 50 ns.
/// * peak slabs for the demand: 11 for 9 at 1 KiB (c00e259: 18 to 20), 66
///   to 70 for 65 at 8 KiB (c00e259: 86 to 97).
/// * RMWs per pair: 0.3 to 0.5.
const WARM: Bounds = Bounds {
    growth: 0.7,
    guard_rmws_per_warp_pair: 12.0,
    rmws_per_pair: 1.0,
    sleep_ns_per_pair: 2_000.0,
};

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

/// The launch's shape, its schedule and what it watches: `RESIDENT` warps
/// on one worker, converged, read-modify-writes counted per slot guard.
fn launch_config(heap: &Heap, seed: u64) -> LaunchConfig {
    let threads = RESIDENT * 32;
    // The slot table: every guard word.
    let slots = (heap.device_heap() + LAYOUT.slots, MAX_SLOTS as u64 * 8);
    LaunchConfig::linear(threads / BLOCK, BLOCK)
        .seed(seed)
        .workers(1)
        .resident_warps(RESIDENT as usize)
        .convergence(Convergence::Converged)
        .count_addresses(slots)
}

/// One launch of `alloc_free` at `size` on `heap`: what it showed (the
/// heap's traffic as this launch's, its peak as this launch's).
fn measure(heap: &mut Heap, size: u32, seed: u64, context: &str) -> Contention {
    let before = heap.stats().expect("stats").traffic;
    heap.reset_peaks();
    let stats_buf = buffer::<u64>(heap, STATS_WORDS);
    let launch = run(
        heap,
        &launch_config(heap, seed),
        alloc_free::Args {
            stats: stats_buf.kernel_ptr(),
            size,
            rounds: ROUNDS,
        },
    )
    .expect("simulator counts");
    let s = stats(heap, &stats_buf);
    assert_clean(&s, errors(heap), context);
    let st = heap.stats().expect("stats");
    let usable = u64::from(geometry(class_index(size)).usable);
    Contention {
        pairs: s.allocs,
        nulls: s.nulls,
        demand: u64::from(RESIDENT * 32).div_ceil(usable).max(1),
        peak_slabs: st.region.peak_mapped_bytes / SLAB_SIZE,
        from_host: st.traffic.slabs_from_provider - before.slabs_from_provider,
        takeovers: st.traffic.slabs_reclaimed - before.slabs_reclaimed,
        revived: st.traffic.slabs_revived - before.slabs_revived,
        rmws: launch.atomic_rmws,
        steps: launch.steps,
        guard_rmws: launch.watched_rmws,
        hottest_guard: launch.watched_hottest,
        sleep_ns: launch.sleep_ns,
    }
}

/// `alloc_free` at `size` on a fresh heap (cold: its slabs are created
/// during the launch), then the same launch again on that heap (warm: its
/// slabs are there, empty — the launch the GPU benchmark times).
fn contention(size: u32, seed: u64) -> (Contention, Contention) {
    let mut heap = heap_with(HeapConfig {
        reserve: Some(16 << 30),
        streams: Some(STREAMS),
        ..HeapConfig::default()
    });
    let context = format!("contention at {size} B, seed {seed:#x}");
    let cold = measure(&mut heap, size, seed, &format!("{context}, cold"));
    let warm = measure(&mut heap, size, seed ^ 1, &format!("{context}, warm"));
    assert_empty(&mut heap, &context);
    (cold, warm)
}

impl Contention {
    fn line(&self) -> String {
        format!(
            "{} pairs, {} nulls; {:.1} RMWs and {:.0} steps per pair; per warp-pair {:.2} guard \
             RMWs, {:.3} on the hottest guard; {:.0} ns of sleep per pair; peak {} slabs for a \
             demand of {} ({:.2}); {} from the host, {} taken over ({:.3} per 1 000 pairs), {} \
             revived",
            self.pairs,
            self.nulls,
            self.rmws_per_pair(),
            self.steps_per_pair(),
            self.guard_rmws_per_warp_pair(),
            self.hottest_guard_per_warp_pair(),
            self.sleep_ns_per_pair(),
            self.peak_slabs,
            self.demand,
            self.growth(),
            self.from_host,
            self.takeovers,
            self.takeovers_per_1000(),
            self.revived
        )
    }

    /// What breaks `bounds`, a line each.
    fn failures(&self, what: &str, bounds: &Bounds) -> String {
        let mut failures = String::new();
        let mut fail = |line: String| failures.push_str(&format!("{what}: {line} ({self:?})\n"));
        if self.nulls != 0 {
            fail(format!("{} nulls with memory to spare", self.nulls));
        }
        if self.growth() < bounds.growth {
            fail(format!(
                "peak slabs ÷ demand {:.2} < {}",
                self.growth(),
                bounds.growth
            ));
        }
        if self.guard_rmws_per_warp_pair() > bounds.guard_rmws_per_warp_pair {
            fail(format!(
                "{:.2} guard RMWs per warp-pair > {}",
                self.guard_rmws_per_warp_pair(),
                bounds.guard_rmws_per_warp_pair
            ));
        }
        if self.sleep_ns_per_pair() > bounds.sleep_ns_per_pair {
            fail(format!(
                "{:.0} ns of sleep per pair > {}",
                self.sleep_ns_per_pair(),
                bounds.sleep_ns_per_pair
            ));
        }
        if self.rmws_per_pair() > bounds.rmws_per_pair {
            fail(format!(
                "{:.2} RMWs per pair > {}",
                self.rmws_per_pair(),
                bounds.rmws_per_pair
            ));
        }
        if self.takeovers_per_1000() > TAKEOVERS_PER_1000 {
            fail(format!(
                "{:.3} takeovers per 1 000 pairs > {TAKEOVERS_PER_1000}",
                self.takeovers_per_1000()
            ));
        }
        failures
    }
}

#[test]
fn the_heap_grows_to_the_demand_without_takeover_churn() {
    let mut failures = String::new();
    for size in [16, 64, 1024, 8192] {
        let (cold, warm) = contention(size, 0xc0de ^ u64::from(size));
        println!("{size} B cold: {}", cold.line());
        println!("{size} B warm: {}", warm.line());
        failures.push_str(&cold.failures(&format!("{size} B cold"), &COLD));
        failures.push_str(&warm.failures(&format!("{size} B warm"), &WARM));
    }
    assert!(failures.is_empty(), "{failures}");
}
