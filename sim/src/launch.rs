//! `launch`: validates the shape, splits the blocks over workers, runs them and
//! turns the first failure into a [`SimError`].

use std::sync::PoisonError;
use std::time::Duration;

use crate::config::LaunchConfig;
use crate::error::{SimError, SimErrorKind};
use crate::fiber::KernelRef;
use crate::worker::{Shared, Worker, WorkerStats};

/// What a successful launch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchStats {
    /// Scheduling steps (lane resumptions), over all workers.
    pub steps: u64,
    /// Completed sync collectives (one per participating lane).
    pub collectives: u64,
    /// Atomic loads by lanes (through `warpalloc-device`'s `sync` facade).
    pub atomic_loads: u64,
    /// Atomic stores by lanes.
    pub atomic_stores: u64,
    /// Atomic read-modify-writes by lanes (swap, compare-exchange,
    /// fetch-ops).
    pub atomic_rmws: u64,
    /// Of the atomic loads, those at system scope (`.sys` on the GPU: the
    /// RPC mailbox, which the host reads while kernels run); the rest are
    /// at device scope.
    pub sys_loads: u64,
    /// Of the atomic stores, those at system scope.
    pub sys_stores: u64,
    /// Of the read-modify-writes, those at system scope.
    pub sys_rmws: u64,
    /// Nanoseconds of `nanosleep` the lanes asked for (the simulator does
    /// not wait them: a sleep is a switch point).
    pub sleep_ns: u64,
    /// Nanoseconds of `nanosleep` the lanes asked for while waiting on the
    /// host (`wait_on_host`: an RPC answer), not in `sleep_ns`.
    pub host_wait_ns: u64,
    /// Memory fences by lanes (any scope).
    pub fences: u64,
    /// Dependent global round trips, summed over the warps: a warp's is the
    /// most that one of its lanes waited for in a row — each atomic load and
    /// read-modify-write, and each plain read the code marks
    /// (`count_round_trip`), after the one before it; at a collective, its
    /// lanes go on with the most any of them had. Stores and fences are
    /// not waited for. Independent accesses that a GPU overlaps count one
    /// each, so this is an upper bound on the latency chain.
    pub round_trips: u64,
    /// The fewest round trips of one warp (0 for a launch of no warps):
    /// the path of a warp that nothing kept waiting — no poll, no second
    /// scan — where `round_trips` also holds the queueing.
    pub least_round_trips: u64,
    /// The code's own events, by index ([`crate::count_event`]).
    pub events: [u64; crate::lane::EVENTS],
    /// With `LaunchConfig::count_addresses`: the read-modify-writes on
    /// addresses in `LaunchConfig::watch`.
    pub watched_rmws: u64,
    /// With `LaunchConfig::count_addresses`: the read-modify-writes on the
    /// address in `LaunchConfig::watch` that had the most.
    pub watched_hottest: u64,
    /// Lanes run.
    pub lanes: u64,
    /// Warps run.
    pub warps: u64,
    /// Blocks run.
    pub blocks: u64,
    /// Worker threads used.
    pub workers: usize,
    /// Under a timed schedule (`LaunchConfig::timed`), the launch's
    /// makespan in cycles of the modelled clock: the virtual time of its
    /// last step (the most of any worker); 0 untimed.
    pub cycles: u64,
    /// Under a timed schedule, the warps' lives summed, in cycles: from
    /// each warp's admission to its last lane's exit (÷ `warps`: a warp's
    /// mean); 0 untimed.
    pub warp_cycles: u64,
    /// Wall time of the launch.
    pub elapsed: Duration,
}

/// CUDA's limits on a launch shape (compute capability 7.0 and later).
const MAX_THREADS_PER_BLOCK: u64 = 1024;
const MAX_BLOCK_DIM: (u32, u32, u32) = (1024, 1024, 64);
const MAX_GRID_DIM: (u32, u32, u32) = (i32::MAX as u32, 65535, 65535);

fn validate(cfg: &LaunchConfig) -> Result<(), String> {
    let (gx, gy, gz) = cfg.grid_dim;
    let (bx, by, bz) = cfg.block_dim;
    if [gx, gy, gz, bx, by, bz].contains(&0) {
        return Err(format!(
            "grid {:?} and block {:?} must have no zero dimension",
            cfg.grid_dim, cfg.block_dim
        ));
    }
    if cfg.threads_per_block() > MAX_THREADS_PER_BLOCK
        || bx > MAX_BLOCK_DIM.0
        || by > MAX_BLOCK_DIM.1
        || bz > MAX_BLOCK_DIM.2
    {
        return Err(format!(
            "block {:?} exceeds CUDA's limits ({MAX_THREADS_PER_BLOCK} threads, {MAX_BLOCK_DIM:?})",
            cfg.block_dim
        ));
    }
    if gx > MAX_GRID_DIM.0 || gy > MAX_GRID_DIM.1 || gz > MAX_GRID_DIM.2 {
        return Err(format!(
            "grid {:?} exceeds CUDA's limits {MAX_GRID_DIM:?}",
            cfg.grid_dim
        ));
    }
    Ok(())
}

/// Runs `kernel` on every thread of the grid that `cfg` describes.
///
/// Every lane calls `kernel` once; inside it, the `warpalloc-device` SIMT
/// functions (or this crate's lane functions) see the lane's indices and
/// synchronise with its warp. Returns when every lane has returned, or with the
/// first failure: a lane's panic, a misused collective, a deadlock or the
/// watchdog. Either way no lane runs after `launch` returns.
pub fn launch<F: Fn() + Sync>(cfg: &LaunchConfig, kernel: F) -> Result<LaunchStats, SimError> {
    let fail = |kind| SimError {
        seed: cfg.seed,
        deterministic: cfg.is_deterministic(),
        kind,
    };
    validate(cfg).map_err(|e| fail(SimErrorKind::InvalidLaunch(e)))?;

    let kernel: &(dyn Fn() + Sync) = &kernel;
    // SAFETY: lanes hold this reference only inside fibers owned by the
    // workers below. Every worker is dropped — and with it every fiber:
    // coroutines reset, lane threads joined — before this function returns
    // (the workers run on this thread or in a `thread::scope`), so no lane can
    // call the kernel after `kernel` is gone.
    let kernel: KernelRef = unsafe { std::mem::transmute::<&(dyn Fn() + Sync), KernelRef>(kernel) };

    let mut shared = Shared::new();
    if cfg.watch.is_some() {
        shared.by_address = Some(Default::default());
    }
    let workers = cfg.workers.max(1);
    let mut totals = WorkerStats {
        least_round_trips: u64::MAX,
        ..WorkerStats::default()
    };
    let mut add = |s: WorkerStats| {
        totals.steps += s.steps;
        totals.collectives += s.collectives;
        totals.cycles = totals.cycles.max(s.cycles);
        totals.warp_cycles += s.warp_cycles;
        totals.atomic_loads += s.atomic_loads;
        totals.atomic_stores += s.atomic_stores;
        totals.atomic_rmws += s.atomic_rmws;
        totals.sys_loads += s.sys_loads;
        totals.sys_stores += s.sys_stores;
        totals.sys_rmws += s.sys_rmws;
        totals.sleep_ns += s.sleep_ns;
        totals.host_wait_ns += s.host_wait_ns;
        totals.fences += s.fences;
        totals.round_trips += s.round_trips;
        totals.least_round_trips = totals.least_round_trips.min(s.least_round_trips);
        for (total, n) in totals.events.iter_mut().zip(s.events) {
            *total += n;
        }
        totals.lanes += s.lanes;
        totals.warps += s.warps;
        totals.blocks += s.blocks;
    };
    if workers == 1 {
        add(Worker::new(cfg, &shared, kernel, 0).run());
    } else {
        let spawned = std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(workers);
            for index in 0..workers {
                let shared = &shared;
                let handle = std::thread::Builder::new()
                    .name(format!("warpalloc-sim-worker-{index}"))
                    .spawn_scoped(scope, move || {
                        // A worker's own panic (a bug of the simulator's,
                        // not a lane's, which the lane catches) stops the
                        // other workers at once, rather than at the
                        // watchdog (a review, 2026-12-07).
                        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            Worker::new(cfg, shared, kernel, index).run()
                        }));
                        if run.is_err() {
                            shared
                                .abort
                                .store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        run
                    });
                match handle {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        shared
                            .abort
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        return Err(e.to_string());
                    }
                }
            }
            let mut all = Vec::with_capacity(workers);
            for h in handles {
                match h.join() {
                    Ok(Ok(stats)) => all.push(stats),
                    Ok(Err(panic)) => {
                        return Err(format!(
                            "a worker thread panicked: {}",
                            crate::fiber::panic_message(panic.as_ref())
                        ));
                    }
                    Err(_) => return Err("a worker thread panicked".to_string()),
                }
            }
            Ok(all)
        });
        match spawned {
            Ok(all) => all.into_iter().for_each(&mut add),
            Err(e) => return Err(fail(SimErrorKind::Spawn(e))),
        }
    }

    // The watched range's sum and its hottest address.
    let (watched_rmws, watched_hottest) = match (&shared.by_address, cfg.watch) {
        (Some(map), Some((start, bytes))) => {
            let map = map.lock().unwrap_or_else(PoisonError::into_inner);
            let watched = || {
                map.iter()
                    .filter(|&(&addr, _)| (addr as u64).wrapping_sub(start) < bytes)
                    .map(|(_, &n)| n)
            };
            (watched().sum(), watched().max().unwrap_or(0))
        }
        _ => (0, 0),
    };
    let error = shared
        .error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match error {
        Some(SimErrorKind::Watchdog { limit, .. }) => {
            let lanes =
                std::mem::take(&mut *shared.stuck.lock().unwrap_or_else(PoisonError::into_inner));
            Err(fail(SimErrorKind::Watchdog { limit, lanes }))
        }
        Some(kind) => Err(fail(kind)),
        None => Ok(LaunchStats {
            sleep_ns: totals.sleep_ns,
            host_wait_ns: totals.host_wait_ns,
            fences: totals.fences,
            round_trips: totals.round_trips,
            least_round_trips: match totals.least_round_trips {
                u64::MAX => 0,
                least => least,
            },
            events: totals.events,
            watched_rmws,
            watched_hottest,
            steps: totals.steps,
            collectives: totals.collectives,
            atomic_loads: totals.atomic_loads,
            atomic_stores: totals.atomic_stores,
            atomic_rmws: totals.atomic_rmws,
            sys_loads: totals.sys_loads,
            sys_stores: totals.sys_stores,
            sys_rmws: totals.sys_rmws,
            lanes: totals.lanes,
            warps: totals.warps,
            blocks: totals.blocks,
            workers,
            cycles: totals.cycles,
            warp_cycles: totals.warp_cycles,
            elapsed: shared.start.elapsed(),
        }),
    }
}
