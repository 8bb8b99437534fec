//! `warpalloc bench`: the cases of the published GPU-allocator benchmarks —
//! per-thread allocate-then-free by size and thread count (cold: a fresh
//! heap's first launch; warm: the next), mixed sizes, fragmentation (peak
//! mapped ÷ peak requested), the footprint of one block per thread of one
//! size, out-of-memory behaviour, and RPC vs pool mode.

use serde::Serialize;
use warpalloc::{Heap, HeapConfig, HeapProfile, Mode};
use warpalloc_device::kernel::Kernel;
use warpalloc_host::device::Clock;
use warpalloc_host::{HostError, Prefer};
use warpalloc_kernels_tests::stress::{
    STATS_WORDS, alloc_free, drain, fill, free_only, malloc_only, mixed_pairs,
};

use super::common::{
    Schedule, Settings, buffer, bytes, gpu_events, launch, launch_report, launcher, mode_name,
    open_heap_with, rate, read, read_stats, target_name,
};
use warpalloc_device::event::{EVENTS, Event};

/// What `bench` measures.
#[derive(Clone, Debug, Serialize)]
pub struct BenchArgs {
    pub sizes: Vec<u32>,
    pub threads: Vec<u32>,
    pub rounds: u32,
    pub block: u32,
    /// The cases to run; empty: all.
    pub cases: Vec<Case>,
    /// Count the allocator's events in each warm launch (`--events`).
    pub events: bool,
}

/// A case of `bench`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// malloc+free pairs by size and thread count (RPC mode).
    AllocFree,
    /// The same in pool mode at the most threads, each size: the pool sized
    /// from the same launch in RPC mode (its profile, a quarter more).
    Pool,
    /// Mixed sizes, 16 B – 8 KiB (log-uniform), each block's first and last
    /// words written and checked: the peers' drivers' mixed kernel
    /// (`mixed_pairs`; `lifetimes`, which writes and checks every byte,
    /// until 2026-12-07).
    Mixed,
    /// Peak mapped ÷ peak requested, mixed sizes.
    Fragmentation,
    /// Peak mapped ÷ requested, one block per thread of 16, 64 and 256 B.
    Footprint,
    /// Filling under a 64 MiB limit: nulls, no crash; the heap's snapshot
    /// at its first out-of-memory null.
    OutOfMemory,
    /// Filling a demand far above an 8 MiB limit, with spill to host
    /// memory and without: the spilled run's throughput beside the one
    /// that got nulls.
    Spill,
    /// malloc+free pairs of the largest size on one heap: a launch at the
    /// fewest threads, then one at the most — a demand that rises past the
    /// slabs the first launch grew (the row's cold rate is the first
    /// launch's, its warm rate the second's; the note says how many slabs
    /// the second asked the host for).
    Rising,
    /// malloc+free pairs of the largest size at the most threads on a fresh
    /// heap warmed up (`Heap::warm_up`) from the profile of the same launch
    /// on another heap: the row's cold rate is the warmed-up first launch's
    /// (beside the `alloc-free` row's cold rate, what the warm-up saves).
    /// And a second row: the same launch on a fresh heap, `Heap::spread`,
    /// then the launch again: its warm rate beside the `alloc-free` row's
    /// (no spread between), what the spread saves.
    Warmed,
}

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub case: String,
    pub mode: String,
    pub threads: u64,
    /// The smallest request, in bytes.
    pub min_bytes: u64,
    /// The largest request, in bytes (equal to `min_bytes` for one size).
    pub max_bytes: u64,
    /// malloc+free pairs per second, cold (a fresh heap's first launch);
    /// in the fill cases (fragmentation, footprint, out of memory, spill),
    /// allocations per second of the launch that fills the heap.
    pub cold_pairs_per_second: f64,
    /// malloc+free pairs per second, warm (the same launch again).
    pub warm_pairs_per_second: f64,
    /// What timed the launches: "cuda events" (two events on the heap's
    /// stream around the kernel, as the peers' drivers time theirs, on a
    /// GPU) or "host clock" (around the launch and its completion, in the
    /// simulator); `None` for a failed case.
    pub timed_by: Option<&'static str>,
    pub nulls: u64,
    pub peak_mapped_bytes: u64,
    /// Peak mapped ÷ peak requested (fragmentation cases).
    pub mapped_per_requested: Option<f64>,
    /// The simulator's scheduling steps per malloc+free pair, warm (the
    /// emulated device only: a deterministic cost, not a time).
    pub sim_steps_per_pair: Option<f64>,
    /// The simulator's atomic read-modify-writes per pair, warm.
    pub sim_rmws_per_pair: Option<f64>,
    /// The simulator's atomic loads per pair, warm.
    pub sim_loads_per_pair: Option<f64>,
    /// The simulator's atomic operations at system scope per pair, warm
    /// (the RPC mailbox's; every other access is at device scope).
    pub sim_sys_per_pair: Option<f64>,
    /// Under the simulator's timed schedule (`--timed`): a warp's mean
    /// cycles per pair, warm — its life from admission to its last lane's
    /// exit over its lanes' pairs (the kernel's own work included).
    pub sim_cycles_per_pair: Option<f64>,
    /// The allocator's events in the warm launch (`--events`; the second
    /// launch's for `rising`, the cold one's when the warm one made no
    /// pair; `None` without the flag, for cases with no such launch, and
    /// on a GPU with no events build).
    pub events: Option<RowEvents>,
    pub note: String,
    /// Why the case failed (the other fields are then empty).
    pub error: Option<String>,
    /// The heap's snapshot at its first out-of-memory null, as printed
    /// (`Heap::snapshots`), when the case had one.
    pub snapshot: Option<String>,
}

impl Row {
    fn failed(case: &str, threads: u32, min: u64, max: u64, why: &HostError) -> Row {
        Row {
            case: case.into(),
            mode: "-".into(),
            threads: u64::from(threads),
            min_bytes: min,
            max_bytes: max,
            cold_pairs_per_second: 0.0,
            warm_pairs_per_second: 0.0,
            timed_by: None,
            nulls: 0,
            peak_mapped_bytes: 0,
            mapped_per_requested: None,
            sim_steps_per_pair: None,
            sim_rmws_per_pair: None,
            sim_loads_per_pair: None,
            sim_sys_per_pair: None,
            sim_cycles_per_pair: None,
            events: None,
            note: String::new(),
            error: Some(why.to_string()),
            snapshot: None,
        }
    }
}

/// A launch's allocator events (`bench --events`), by `Event`: counted on
/// a GPU by the events build of the kernels, in the simulator by the
/// simulator.
#[derive(Clone, Copy, Debug)]
struct EventCounts {
    counts: [u64; EVENTS],
    /// "gpu" or "simulator".
    counted_on: &'static str,
    /// The launch's malloc+free pairs.
    pairs: u64,
}

impl EventCounts {
    /// Per warp-pair (a warp's malloc and free: pairs ÷ 32), as the
    /// contention test counts its one-size launches, whose warps allocate
    /// together.
    fn per_warp_pair(&self) -> RowEvents {
        // A partial warp counts as one (`pairs / 32` printed totals as
        // "per warp-pair of 0" under 32 pairs; a review, 2026-12-07).
        self.per("warp-pair", self.pairs.div_ceil(32))
    }

    /// Per group the frees made (a warp's lanes freeing into one slab:
    /// `Event::FreeGroup`), as the contention test counts its mixed
    /// launch, whose warps' lanes allocate each their own class.
    fn per_free_group(&self) -> RowEvents {
        self.per("free group", self.counts[Event::FreeGroup as usize])
    }

    fn per(&self, unit: &'static str, units: u64) -> RowEvents {
        let per = |e: Event| self.counts[e as usize] as f64 / units.max(1) as f64;
        RowEvents {
            counted_on: self.counted_on,
            unit,
            units,
            scans: per(Event::Scan),
            slot_locks: per(Event::SlotLock),
            full_locks: per(Event::FullLock),
            partial_fits: per(Event::PartialFit),
            creation_waits: per(Event::CreationWait),
            claims: per(Event::Claim),
            extra_walk_rounds: per(Event::ExtraProbe),
            looks: per(Event::Look),
        }
    }
}

/// The allocator's events in a launch (`bench --events`), per `unit`: a
/// warp-pair in the one-size cases, a free group with mixed sizes — what
/// the contention test's bounds are per in each (`EventCounts`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RowEvents {
    /// "gpu" or "simulator".
    pub counted_on: &'static str,
    /// What the figures are per: "warp-pair" or "free group".
    pub unit: &'static str,
    /// How many of them the launch made.
    pub units: u64,
    /// Scans of the slot table (a malloc's search rounds).
    pub scans: f64,
    /// Slot locks.
    pub slot_locks: f64,
    /// Locks of a slab with no room for the group.
    pub full_locks: f64,
    /// Locks of a slab with room for part of the group.
    pub partial_fits: f64,
    /// Waits for (or ends at) a slot being created.
    pub creation_waits: f64,
    /// Slots claimed for a new slab.
    pub claims: f64,
    /// Rounds of the bitfield walk beyond a group's first (the issue's
    /// "extra probes").
    pub extra_walk_rounds: f64,
    /// Loads of bitfield words before or in the walk (`Slab::roomy_start`).
    pub looks: f64,
}

/// The warm run's simulator counts per pair, and its events.
#[derive(Clone, Copy, Default)]
struct PerPair {
    steps: Option<f64>,
    rmws: Option<f64>,
    loads: Option<f64>,
    sys: Option<f64>,
    cycles: Option<f64>,
    events: Option<EventCounts>,
    /// What timed the launch.
    clock: Option<Clock>,
}

/// Where the cases run: the launcher's preference and the simulator's
/// schedule, with which each case opens a heap of its own.
#[derive(Clone, Copy)]
struct On {
    prefer: Prefer,
    schedule: Schedule,
    /// Count events (`--events`): on a GPU, with the events build.
    events: bool,
}

impl On {
    /// A fresh heap with `config`.
    fn heap(self, config: HeapConfig) -> Result<Heap, HostError> {
        open_heap_with(self.prefer, config, self.schedule, self.events, true)
    }
}

/// The benchmark loop's launch (`alloc_free`): `threads` in blocks of
/// `block`, each thread `rounds` pairs of a malloc of `size` bytes and its
/// free.
#[derive(Clone, Copy)]
struct Shape {
    threads: u32,
    block: u32,
    size: u32,
    rounds: u32,
}

impl Shape {
    /// Blocks of `block` threads for `threads` (rounded up).
    fn blocks(self) -> u32 {
        self.threads.div_ceil(self.block)
    }

    /// The loop's kernel arguments, with the stats buffer at `stats`.
    fn kernel(self, stats: *mut u64) -> alloc_free::Args {
        alloc_free::Args {
            stats,
            size: self.size,
            rounds: self.rounds,
        }
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub target: String,
    /// The command line and the simulator's schedule.
    pub settings: Settings,
    /// What was asked for: sizes, thread counts, rounds, block, cases.
    pub args: BenchArgs,
    pub rows: Vec<Row>,
}

fn pairs_per_second(pairs: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        pairs as f64 / seconds
    } else {
        0.0
    }
}

/// Cold and warm: runs `kernel` (given a fresh stats buffer's pointer) twice
/// on `heap` — a fresh heap's first launch, then the same again, with
/// `between` done to the heap between them — and returns the two times,
/// the pairs of each (a launch that got nulls made fewer) and the nulls of
/// both. A corrupt block is an
/// error: a benchmark of a wrong allocator means nothing.
fn cold_warm<K: Kernel>(
    heap: &mut Heap,
    blocks: u32,
    block: u32,
    what: &str,
    between: impl FnOnce(&mut Heap) -> Result<(), HostError>,
    kernel: impl Fn(*mut u64) -> K,
) -> Result<([f64; 2], [u64; 2], u64, PerPair), HostError> {
    let cold = one_launch(heap, blocks, block, what, &kernel)?;
    between(heap)?;
    let warm = one_launch(heap, blocks, block, what, &kernel)?;
    // The warm launch's counts, or the cold one's if the warm made no pair.
    let per_pair = if warm.pairs > 0 {
        warm.per_pair
    } else {
        cold.per_pair
    };
    Ok((
        [cold.seconds, warm.seconds],
        [cold.pairs, warm.pairs],
        cold.nulls + warm.nulls,
        per_pair,
    ))
}

/// What [`one_launch`] measured.
struct Launch {
    seconds: f64,
    pairs: u64,
    nulls: u64,
    /// The simulator's counts per pair (none on a GPU).
    per_pair: PerPair,
}

/// One launch of `kernel` (given a fresh stats buffer's pointer) on `heap`,
/// `blocks` blocks of `block` threads; a corrupt block is an error (see
/// [`cold_warm`]).
fn one_launch<K: Kernel>(
    heap: &mut Heap,
    blocks: u32,
    block: u32,
    what: &str,
    kernel: impl Fn(*mut u64) -> K,
) -> Result<Launch, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    // On a GPU, the events build's counts before the launch (they count
    // from the module's load).
    let events_before = gpu_events(heap)?;
    let report = launch_report(heap, blocks, block, kernel(stats.kernel_ptr()))?;
    let s = read_stats(heap, &stats)?;
    let counted = |counts, counted_on| EventCounts {
        counts,
        counted_on,
        pairs: s.allocs,
    };
    let events = match (&report.simulator, events_before, gpu_events(heap)?) {
        (Some(sim), _, _) => Some(counted(std::array::from_fn(|i| sim.events[i]), "simulator")),
        (None, Some(before), Some(after)) => Some(counted(
            std::array::from_fn(|i| after[i].wrapping_sub(before[i])),
            "gpu",
        )),
        _ => None,
    };
    if s.corrupt != 0 {
        // A failed check of the allocator's results, not the build's
        // (these read "invalid PTX" until 2026-12-07; a review).
        return Err(HostError::HeapCorrupt(format!(
            "{what}: {} corrupt blocks",
            s.corrupt
        )));
    }
    let mut per_pair = PerPair {
        events,
        clock: Some(report.clock()),
        ..PerPair::default()
    };
    if let Some(sim) = report.simulator
        && s.allocs > 0
    {
        let per = |n: u64| Some(n as f64 / s.allocs as f64);
        per_pair = PerPair {
            steps: per(sim.steps),
            rmws: per(sim.atomic_rmws),
            loads: per(sim.atomic_loads),
            sys: per(sim.sys_loads + sim.sys_stores + sim.sys_rmws),
            // A warp's mean life over a lane's pairs.
            cycles: (sim.warp_cycles > 0).then(|| {
                let life = sim.warp_cycles as f64 / sim.warps.max(1) as f64;
                life / (s.allocs as f64 / sim.lanes.max(1) as f64)
            }),
            events,
            clock: Some(report.clock()),
        };
    }
    Ok(Launch {
        seconds: report.time().as_secs_f64(),
        pairs: s.allocs,
        nulls: s.nulls,
        per_pair,
    })
}

fn alloc_free_case(on: On, config: HeapConfig, shape: Shape) -> Result<Row, HostError> {
    let mut heap = on.heap(config)?;
    let nothing = |_: &mut Heap| Ok(());
    alloc_free_on(&mut heap, "alloc_free", shape, nothing)
}

/// `alloc_free` of `shape` on `heap`, cold and warm with `between` done
/// to the heap between the launches (`cold_warm`), as a row called `case`.
fn alloc_free_on(
    heap: &mut Heap,
    case: &str,
    shape: Shape,
    between: impl FnOnce(&mut Heap) -> Result<(), HostError>,
) -> Result<Row, HostError> {
    let (blocks, block) = (shape.blocks(), shape.block);
    let (times, pairs, nulls, per) =
        cold_warm(heap, blocks, block, "alloc_free", between, |stats| {
            shape.kernel(stats)
        })?;
    let rates = [
        pairs_per_second(pairs[0], times[0]),
        pairs_per_second(pairs[1], times[1]),
    ];
    let threads = u64::from(blocks * block);
    alloc_free_row(
        heap,
        case,
        threads,
        shape.size,
        shape.rounds,
        rates,
        nulls,
        per,
    )
}

/// The profile of one `alloc_free` launch of `shape` on a fresh heap in
/// RPC mode: what a pool for it needs (README, "Sizing a pool from a
/// run").
fn profile_of(on: On, shape: Shape) -> Result<HeapProfile, HostError> {
    let mut heap = on.heap(HeapConfig::default())?;
    one_launch(
        &mut heap,
        shape.blocks(),
        shape.block,
        "alloc_free",
        |stats| shape.kernel(stats),
    )?;
    heap.profile()
}

/// [`Case::Pool`]: `alloc_free` of `shape` in pool mode, the pool sized
/// from the same launch's profile in RPC mode with a quarter more (a
/// launch's racing groups may create a few slabs more than the profiled
/// one did) and a fallback to the host once dry (no null: its requests,
/// if any, are in the row's note).
fn pool_case(on: On, shape: Shape) -> Result<Row, HostError> {
    let profile = profile_of(on, shape)?;
    let slabs = profile.slabs() + profile.slabs() / 4 + 1;
    let config = HeapConfig {
        mode: Mode::Pool { slabs },
        pool_fallback: true,
        ..HeapConfig::default()
    };
    let mut row = alloc_free_case(on, config, shape)?;
    row.case = "alloc_free pool".into();
    row.note = join_notes(
        &format!(
            "pool: {slabs} slabs mapped before launch (an RPC run's profile, {} slabs, and a \
             quarter more)",
            profile.slabs()
        ),
        &row.note,
    );
    Ok(row)
}

/// [`Case::Warmed`]: `alloc_free` of `shape` on a heap in RPC mode (its
/// profile taken), then on a fresh heap warmed up from that profile: cold
/// and warm, as an `alloc-free` row.
fn warmed_case(on: On, shape: Shape) -> Result<Row, HostError> {
    let profile = profile_of(on, shape)?;
    let mut heap = on.heap(HeapConfig::default())?;
    let published = heap.warm_up(&profile)?;
    let nothing = |_: &mut Heap| Ok(());
    let case = "alloc_free warmed up";
    let mut row = alloc_free_on(&mut heap, case, shape, nothing)?;
    row.note = join_notes(
        &format!("warmed up: {published} slabs published before the first launch"),
        &row.note,
    );
    Ok(row)
}

/// [`Case::Warmed`]'s second row: `alloc_free` of `shape` on a fresh heap
/// in RPC mode, [`Heap::spread`], then the same launch again (cold and
/// warm, as an `alloc-free` row).
fn spread_case(on: On, shape: Shape) -> Result<Row, HostError> {
    let mut heap = on.heap(HeapConfig::default())?;
    let case = "alloc_free spread";
    let mut row = alloc_free_on(&mut heap, case, shape, Heap::spread)?;
    row.note = join_notes("Heap::spread between the launches", &row.note);
    Ok(row)
}

/// The row of an `alloc_free` case on `heap` (its peak mapped bytes read
/// now): `rates` are the cold and the warm pairs per second.
#[allow(clippy::too_many_arguments)]
fn alloc_free_row(
    heap: &Heap,
    case: &str,
    threads: u64,
    size: u32,
    rounds: u32,
    rates: [f64; 2],
    nulls: u64,
    per: PerPair,
) -> Result<Row, HostError> {
    let stats = heap.stats()?;
    // The heap's traffic over both launches: slabs from the provider (the
    // host, or the pool), requests to the host, takeovers.
    let traffic = format!(
        "heap: {} slabs from the provider, {} requests to the host, {} taken over",
        stats.traffic.slabs_from_provider, stats.rpc.allocs, stats.traffic.slabs_reclaimed
    );
    Ok(Row {
        case: case.into(),
        mode: mode_name(heap.mode()),
        threads,
        min_bytes: u64::from(size),
        max_bytes: u64::from(size),
        cold_pairs_per_second: rates[0],
        warm_pairs_per_second: rates[1],
        timed_by: per.clock.map(Clock::name),
        nulls,
        peak_mapped_bytes: stats.region.peak_mapped_bytes,
        mapped_per_requested: None,
        sim_steps_per_pair: per.steps,
        sim_rmws_per_pair: per.rmws,
        sim_loads_per_pair: per.loads,
        sim_sys_per_pair: per.sys,
        sim_cycles_per_pair: per.cycles,
        events: per.events.map(|e| e.per_warp_pair()),
        // The kernel adds its four counters once per thread.
        note: join_notes(
            &traffic,
            &kernel_rmws_note(per.rmws, 4.0 / f64::from(rounds.max(1))),
        ),
        error: None,
        snapshot: None,
    })
}

/// What part of a simulated row's atomics per pair are the kernel's own
/// counters rather than the allocator's (empty on a GPU, which has no
/// counts).
fn kernel_rmws_note(rmws: Option<f64>, kernel_per_pair: f64) -> String {
    match rmws {
        Some(_) => format!("RMWs include the kernel's counters: {kernel_per_pair:.1}/pair"),
        None => String::new(),
    }
}

/// `first`, then `rest` after a semicolon when there is one.
fn join_notes(first: &str, rest: &str) -> String {
    if rest.is_empty() {
        first.into()
    } else {
        format!("{first}; {rest}")
    }
}

/// One block of `size` bytes per thread, all live at once, then freed: peak
/// mapped ÷ bytes requested (`threads × size`): the slabs' headers and
/// bitfields, partly filled slabs, and slabs made by warps racing for room.
fn footprint_case(on: On, threads: u32, block: u32, size: u32) -> Result<Row, HostError> {
    let mut heap = on.heap(HeapConfig::default())?;
    let blocks = threads.div_ceil(block);
    let n = blocks * block;
    let ptrs = buffer::<u64>(&heap, n as usize)?;
    let filled = launch_report(
        &mut heap,
        blocks,
        block,
        malloc_only::Args {
            ptrs: ptrs.kernel_ptr(),
            size,
        },
    )?;
    let got = read(&heap, &ptrs)?;
    let nulls = got.iter().filter(|&&p| p == 0).count() as u64;
    launch(
        &mut heap,
        blocks,
        block,
        free_only::Args {
            ptrs: ptrs.kernel_ptr(),
        },
    )?;
    let st = heap.stats()?;
    if st.live.live_allocations() != 0 {
        return Err(HostError::HeapCorrupt(format!(
            "footprint: {} allocations live after the frees",
            st.live.live_allocations()
        )));
    }
    // What the threads got: a null requested nothing that was mapped.
    let requested = (u64::from(n) - nulls) * u64::from(size);
    Ok(Row {
        case: "footprint".into(),
        mode: mode_name(heap.mode()),
        threads: u64::from(n),
        min_bytes: u64::from(size),
        max_bytes: u64::from(size),
        cold_pairs_per_second: pairs_per_second(u64::from(n) - nulls, filled.time().as_secs_f64()),
        warm_pairs_per_second: 0.0,
        timed_by: Some(filled.clock().name()),
        nulls,
        peak_mapped_bytes: st.region.peak_mapped_bytes,
        mapped_per_requested: (requested > 0)
            .then(|| st.region.peak_backed_bytes as f64 / requested as f64),
        sim_steps_per_pair: None,
        sim_rmws_per_pair: None,
        sim_loads_per_pair: None,
        sim_sys_per_pair: None,
        sim_cycles_per_pair: None,
        events: None,
        note: format!("{} requested: one block per thread", bytes(requested)),
        error: None,
        snapshot: None,
    })
}

/// [`Case::Rising`]: `alloc_free` of `shape` on one heap at `fewest`
/// threads, then at the shape's.
fn rising_case(on: On, fewest: u32, shape: Shape) -> Result<Row, HostError> {
    let Shape {
        threads: most,
        block,
        size,
        rounds,
    } = shape;
    let mut heap = on.heap(HeapConfig::default())?;
    let kernel = |stats| shape.kernel(stats);
    // A launch at `threads`: its threads, what it measured, and the slabs
    // it took from the host.
    let mut taken = heap.stats()?.traffic.slabs_from_provider;
    let mut launch = |heap: &mut Heap, threads: u32| -> Result<(u32, Launch, u64), HostError> {
        let blocks = threads.div_ceil(block);
        let launch = one_launch(heap, blocks, block, "rising", kernel)?;
        let now = heap.stats()?.traffic.slabs_from_provider;
        let slabs = now - std::mem::replace(&mut taken, now);
        Ok((blocks * block, launch, slabs))
    };
    let (few, first, first_slabs) = launch(&mut heap, fewest)?;
    let (all, second, second_slabs) = launch(&mut heap, most)?;
    let rates = [
        pairs_per_second(first.pairs, first.seconds),
        pairs_per_second(second.pairs, second.seconds),
    ];
    let nulls = first.nulls + second.nulls;
    let mut row = alloc_free_row(
        &heap,
        "rising",
        u64::from(all),
        size,
        rounds,
        rates,
        nulls,
        second.per_pair,
    )?;
    let launches = format!(
        "{few} threads (slabs from the host: {first_slabs}), then {all} (slabs from the host: {second_slabs})"
    );
    row.note = join_notes(&launches, &row.note);
    Ok(row)
}

fn mixed_case(on: On, threads: u32, block: u32, rounds: u32) -> Result<Row, HostError> {
    let mut heap = on.heap(HeapConfig::default())?;
    let blocks = threads.div_ceil(block);
    let nothing = |_: &mut Heap| Ok(());
    let (times, pairs, nulls, per) =
        cold_warm(&mut heap, blocks, block, "mixed sizes", nothing, |stats| {
            mixed_pairs::Args {
                stats,
                seed: 1,
                rounds,
                max_small: 8192,
            }
        })?;
    Ok(Row {
        case: "mixed 16 B-8 KiB".into(),
        mode: mode_name(heap.mode()),
        threads: u64::from(blocks * block),
        min_bytes: 16,
        max_bytes: 8192,
        cold_pairs_per_second: pairs_per_second(pairs[0], times[0]),
        warm_pairs_per_second: pairs_per_second(pairs[1], times[1]),
        timed_by: per.clock.map(Clock::name),
        nulls,
        peak_mapped_bytes: heap.stats()?.region.peak_mapped_bytes,
        mapped_per_requested: None,
        sim_steps_per_pair: per.steps,
        sim_rmws_per_pair: per.rmws,
        sim_loads_per_pair: per.loads,
        sim_sys_per_pair: per.sys,
        sim_cycles_per_pair: per.cycles,
        events: per.events.map(|e| e.per_free_group()),
        // `mixed_pairs` counts once a thread, at its end: four atomics
        // (`count_rounds`), 4 ÷ rounds a pair (it said 3 a pair, which
        // was `lifetimes`'; a review, 2026-12-07).
        note: join_notes(
            "pattern written and checked per block",
            &kernel_rmws_note(per.rmws, 4.0 / f64::from(rounds.max(1))),
        ),
        error: None,
        snapshot: None,
    })
}

/// Fills with `per_thread` mixed-size blocks per thread (or until null under
/// `limit`), then frees them; peak mapped ÷ bytes requested at the peak.
fn fill_case(
    case: &str,
    on: On,
    threads: u32,
    block: u32,
    per_thread: u32,
    limit: Option<u64>,
    spill: bool,
) -> Result<Row, HostError> {
    let mut heap: Heap = on.heap(HeapConfig {
        limit,
        spill,
        ..HeapConfig::default()
    })?;
    let blocks = threads.div_ceil(block);
    let n = (blocks * block) as usize;
    let stats = buffer::<u64>(&heap, STATS_WORDS)?;
    let ptrs = buffer::<u64>(&heap, n * per_thread as usize)?;
    let sizes = buffer::<u32>(&heap, n * per_thread as usize)?;
    let counts = buffer::<u32>(&heap, n)?;
    let filled = launch_report(
        &mut heap,
        blocks,
        block,
        fill::Args {
            stats: stats.kernel_ptr(),
            ptrs: ptrs.kernel_ptr(),
            sizes: sizes.kernel_ptr(),
            counts: counts.kernel_ptr(),
            per_thread,
            seed: 3,
            max_small: 8192,
        },
    )?;
    let requested: u64 = {
        let (s, c) = (read(&heap, &sizes)?, read(&heap, &counts)?);
        c.iter()
            .enumerate()
            .map(|(t, &k)| {
                (0..k as usize)
                    .map(|j| u64::from(s[t * per_thread as usize + j]))
                    .sum::<u64>()
            })
            .sum()
    };
    launch(
        &mut heap,
        blocks,
        block,
        drain::Args {
            stats: stats.kernel_ptr(),
            ptrs: ptrs.kernel_ptr(),
            sizes: sizes.kernel_ptr(),
            counts: counts.kernel_ptr(),
            per_thread,
            shift: n as u32 / 2 + 1,
        },
    )?;
    let s = read_stats(&heap, &stats)?;
    let st = heap.stats()?;
    if s.corrupt != 0 || s.allocs != s.frees {
        return Err(HostError::HeapCorrupt(format!(
            "fill: blocks corrupt, or allocations and frees apart: {s:?}"
        )));
    }
    let oom = limit.is_some();
    let snapshot = heap
        .snapshots()?
        .into_iter()
        .find(|s| s.moment == warpalloc::Moment::FirstOutOfMemory)
        .map(|s| s.to_string());
    Ok(Row {
        case: case.into(),
        mode: mode_name(heap.mode()),
        threads: n as u64,
        min_bytes: 16,
        max_bytes: 8192,
        cold_pairs_per_second: pairs_per_second(s.allocs, filled.time().as_secs_f64()),
        warm_pairs_per_second: 0.0,
        timed_by: Some(filled.clock().name()),
        nulls: s.nulls,
        peak_mapped_bytes: st.region.peak_mapped_bytes,
        // Device and host memory together: with spill, the device's alone
        // put the ratio below 1 (a review, 2026-12-07).
        mapped_per_requested: (requested > 0)
            .then(|| st.region.peak_backed_bytes as f64 / requested as f64),
        sim_steps_per_pair: None,
        sim_rmws_per_pair: None,
        sim_loads_per_pair: None,
        sim_sys_per_pair: None,
        sim_cycles_per_pair: None,
        events: None,
        error: None,
        snapshot,
        note: if spill {
            format!(
                "limit {}: {} spilled to host memory at the peak, {} nulls, {} spills refused; \
                 every block freed",
                bytes(limit.unwrap_or(0)),
                bytes(st.spill.peak_bytes),
                s.nulls,
                st.spill.refused
            )
        } else if oom {
            format!(
                "limit {}: {} nulls, {} refusals, no crash; every block freed",
                bytes(limit.unwrap_or(0)),
                s.nulls,
                st.region.refusals.iter().sum::<u64>()
            )
        } else {
            format!("{} requested at the peak", bytes(requested))
        },
    })
}

/// Runs every case, handing each row (with the target's name) to `on_row`
/// as it finishes. A case that
/// fails becomes a row with its error, and the run goes on; only failing to
/// open the device at all is an error.
pub fn bench(
    prefer: Prefer,
    schedule: Schedule,
    a: &BenchArgs,
    mut on_row: impl FnMut(&str, &Row),
) -> Result<BenchReport, HostError> {
    let mut rows = Vec::new();
    let on = On {
        prefer,
        schedule,
        events: a.events,
    };
    let probe = on.heap(HeapConfig::default())?;
    let target = target_name(&probe);
    let resident = launcher(&probe).info().resident_warps() as u32 * 32;
    drop(probe);
    // Default: a quarter of the device's resident threads, all of them, and
    // four times as many.
    let threads = if a.threads.is_empty() {
        vec![resident / 4, resident, resident * 4]
    } else {
        a.threads.clone()
    };
    let a = &BenchArgs {
        threads,
        ..a.clone()
    };
    let wanted = |c: Case| a.cases.is_empty() || a.cases.contains(&c);
    let shape = |threads, size| Shape {
        threads,
        block: a.block,
        size,
        rounds: a.rounds,
    };
    let mut push = |row: Result<Row, HostError>, case: &str, threads: u32, min: u64, max: u64| {
        let mut row = row.unwrap_or_else(|e| Row::failed(case, threads, min, max, &e));
        // The simulator counts events in every launch: shown when asked.
        if !a.events {
            row.events = None;
        }
        on_row(&target, &row);
        rows.push(row);
    };
    if wanted(Case::AllocFree) {
        for &threads in &a.threads {
            for &size in &a.sizes {
                let row = alloc_free_case(on, HeapConfig::default(), shape(threads, size));
                push(row, "alloc_free", threads, size.into(), size.into());
            }
        }
    }
    let most = a.threads.iter().copied().max().unwrap_or(1024);
    if wanted(Case::Pool) {
        for &size in &a.sizes {
            let row = pool_case(on, shape(most, size));
            push(row, "alloc_free pool", most, size.into(), size.into());
        }
    }
    if wanted(Case::Rising) {
        // The fewest threads of a launch (a count of 0 is another case's
        // failure, not this one's).
        let fewest = a
            .threads
            .iter()
            .copied()
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(most);
        let largest = a.sizes.iter().copied().max().unwrap_or(8192);
        let row = rising_case(on, fewest, shape(most, largest));
        push(row, "rising", most, largest.into(), largest.into());
    }
    if wanted(Case::Warmed) {
        let largest = a.sizes.iter().copied().max().unwrap_or(8192);
        let row = warmed_case(on, shape(most, largest));
        push(
            row,
            "alloc_free warmed up",
            most,
            largest.into(),
            largest.into(),
        );
        let row = spread_case(on, shape(most, largest));
        push(
            row,
            "alloc_free spread",
            most,
            largest.into(),
            largest.into(),
        );
    }
    if wanted(Case::Mixed) {
        let row = mixed_case(on, most, a.block, a.rounds);
        push(row, "mixed 16 B-8 KiB", most, 16, 8192);
    }
    if wanted(Case::Fragmentation) {
        let row = fill_case("fragmentation", on, most, a.block, 8, None, false);
        push(row, "fragmentation", most, 16, 8192);
    }
    if wanted(Case::Footprint) {
        for size in [16, 64, 256] {
            let row = footprint_case(on, most, a.block, size);
            push(row, "footprint", most, size.into(), size.into());
        }
    }
    if wanted(Case::OutOfMemory) {
        let row = fill_case(
            "out of memory",
            on,
            most,
            a.block,
            64,
            Some(64 << 20),
            false,
        );
        push(row, "out of memory", most, 16, 8192);
    }
    if wanted(Case::Spill) {
        // Four blocks a thread under an 8 MiB limit: in the simulator's
        // 4 096 threads about 50 MiB spilled (a slab per class), at a
        // million threads on a GPU some GiB — within a GPU machine's host
        // memory.
        for (case, spill) in [("spill off", false), ("spill", true)] {
            let row = fill_case(case, on, most, a.block, 4, Some(8 << 20), spill);
            push(row, case, most, 16, 8192);
        }
    }
    Ok(BenchReport {
        target,
        settings: schedule.settings(),
        args: a.clone(),
        rows,
    })
}

/// Prints the table's heading.
pub fn print_header(target: &str) {
    println!("warpalloc bench — {target}");
    println!(
        "{:<20} {:<9} {:>9} {:>10} {:>12} {:>12} {:>7} {:>11} {:>9} {:>19}  note",
        "case",
        "mode",
        "threads",
        "size",
        "cold pairs",
        "warm pairs",
        "nulls",
        "peak map",
        "map/req",
        "sim steps/rmw/sys"
    );
}

/// Prints one row of the table.
pub fn print_row(r: &Row) {
    let size = if r.min_bytes == r.max_bytes {
        bytes(r.min_bytes)
    } else {
        format!("{}-{}", bytes(r.min_bytes), bytes(r.max_bytes))
    };
    if let Some(e) = &r.error {
        println!(
            "{:<20} {:<9} {:>9} {:>10}  FAILED: {e}",
            r.case, r.mode, r.threads, size
        );
        return;
    }
    let sim = match (
        r.sim_steps_per_pair,
        r.sim_rmws_per_pair,
        r.sim_sys_per_pair,
    ) {
        (Some(steps), Some(rmws), Some(sys)) => format!("{steps:.0}/{rmws:.1}/{sys:.2}"),
        _ => "-".into(),
    };
    println!(
        "{:<20} {:<9} {:>9} {:>10} {:>12} {:>12} {:>7} {:>11} {:>9} {:>19}  {}",
        r.case,
        r.mode,
        r.threads,
        size,
        rate(r.cold_pairs_per_second),
        if r.warm_pairs_per_second > 0.0 {
            rate(r.warm_pairs_per_second)
        } else {
            "-".into()
        },
        r.nulls,
        bytes(r.peak_mapped_bytes),
        r.mapped_per_requested
            .map_or("-".into(), |m| format!("{m:.2}")),
        sim,
        match r.sim_cycles_per_pair {
            Some(cycles) => join_notes(&format!("timed: {cycles:.0} cycles a pair"), &r.note),
            None => r.note.clone(),
        }
    );
    if let Some(e) = &r.events {
        println!(
            "    events ({}, per {} of {}): {:.3} scans, {:.3} slot locks ({:.3} full, {:.3} partial), \
             {:.3} creation waits, {:.3} claims, {:.3} extra walk rounds, {:.3} looks",
            e.counted_on,
            e.unit,
            e.units,
            e.scans,
            e.slot_locks,
            e.full_locks,
            e.partial_fits,
            e.creation_waits,
            e.claims,
            e.extra_walk_rounds,
            e.looks
        );
    }
    if let Some(snapshot) = &r.snapshot {
        for line in snapshot.lines() {
            println!("    {line}");
        }
    }
}
