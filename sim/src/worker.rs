//! One worker: a seeded scheduler over the lanes of the blocks it owns.
//!
//! ```text
//!   runnable: [(warp, lane), ...]      pick one at random (seeded) — or, under
//!        │                             a timed schedule, the one ready first —
//!        │                             resume it, and act on the request it
//!        │                             suspends with
//!        ▼
//!   Switch / Sleep ──► runnable again
//!   Activemask     ──► parked at its site until grouped (convergence policy)
//!   Collective     ──► waits until every lane of its mask is there, then all
//!                      of them get their results and are runnable again
//!   Done           ──► exited; a warp whose lanes all exited retires, and the
//!                      block's last warp makes room for the next block
//! ```
//!
//! Timed (`LaunchConfig::timed`), `runnable` is a heap ordered by the time
//! each lane is ready again (`config::Timing` has the costs), and `now`
//! is the time of the lane last resumed: never decreasing, the launch's
//! makespan at its end.
//!
//! Invariants (checked by `check` in debug builds):
//! `warp.active == |{entries of runnable for that warp}|`, and a lane is in
//! `runnable` iff its state is `Ready`, or `Activemask` under
//! `Convergence::Random`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::config::{CONVERGED_PATIENCE, Convergence, Fibers, LaunchConfig};
use crate::error::{LaneReport, LaneState, SimErrorKind};
use crate::fiber::{CoroutineFiber, Fiber, KernelRef, Resumed, ThreadFiber};
use crate::lane::{Access, Accesses, Clock, Kind, LaneCtx, Request, Site};

/// State shared by the workers of one launch.
pub(crate) struct Shared {
    /// Set when any worker fails; the others stop at their next check.
    pub(crate) abort: AtomicBool,
    /// The first failure.
    pub(crate) error: Mutex<Option<SimErrorKind>>,
    /// Lanes of the other workers, gathered when the watchdog fires.
    pub(crate) stuck: Mutex<Vec<LaneReport>>,
    pub(crate) start: Instant,
    /// Read-modify-writes per address, when the launch counts them.
    pub(crate) by_address: Option<Arc<Mutex<HashMap<usize, u64>>>>,
    /// The launch's grid id ([`crate::grid_id`]).
    pub(crate) grid: u64,
}

/// The last grid id handed out: launches of one process get 1, 2, 3…
static GRIDS: AtomicU64 = AtomicU64::new(0);

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            abort: AtomicBool::new(false),
            error: Mutex::new(None),
            stuck: Mutex::new(Vec::new()),
            start: Instant::now(),
            by_address: None,
            grid: GRIDS.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    fn fail(&self, kind: SimErrorKind) {
        let mut error = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        if error.is_none() {
            *error = Some(kind);
        }
        // ORDERING: a plain flag; the error itself is published by the mutex.
        self.abort.store(true, Ordering::Relaxed);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    kind: Kind,
    site: Site,
    lane_mask: u32,
    value: u64,
}

impl Pending {
    /// Whether `other` is the same collective instance (syncwarp matches at
    /// any site, as on sm_70+).
    fn joins(&self, other: &Pending) -> bool {
        // Lanes of one shfl may read from different source lanes.
        core::mem::discriminant(&self.kind) == core::mem::discriminant(&other.kind)
            && self.lane_mask == other.lane_mask
            && (self.kind == Kind::Syncwarp || self.site == other.site)
    }
}

#[derive(Clone, Copy, Debug)]
enum SlotState {
    Ready,
    Activemask(Site),
    Collective(Pending),
    Exited,
}

struct LaneSlot {
    fiber: Fiber,
    ctx: Arc<LaneCtx>,
    state: SlotState,
    reply: u64,
    site: Option<Site>,
    started: bool,
}

struct Warp {
    block_slot: usize,
    block_idx: (u32, u32, u32),
    warp: u32,
    lanes: Vec<LaneSlot>,
    /// Lanes that exist (a partial last warp has fewer than 32).
    present: u32,
    exited: u32,
    /// Lanes parked in `activemask()`.
    parked: u32,
    /// Entries of `runnable` that belong to this warp.
    active: u32,
    /// Steps of this warp's lanes since the oldest parked lane parked.
    patience: u32,
    /// The virtual time it was admitted at (timed).
    admitted: u64,
}

struct Block {
    warps_alive: u32,
}

/// Counters of one worker's run.
#[derive(Default, Clone, Copy)]
pub(crate) struct WorkerStats {
    pub(crate) steps: u64,
    pub(crate) atomic_loads: u64,
    pub(crate) atomic_stores: u64,
    pub(crate) atomic_rmws: u64,
    pub(crate) sys_loads: u64,
    pub(crate) sys_stores: u64,
    pub(crate) sys_rmws: u64,
    pub(crate) sleep_ns: u64,
    pub(crate) host_wait_ns: u64,
    pub(crate) fences: u64,
    pub(crate) round_trips: u64,
    /// The fewest of one warp (`u64::MAX` before a warp retires).
    pub(crate) least_round_trips: u64,
    pub(crate) events: [u64; crate::lane::EVENTS],
    pub(crate) collectives: u64,
    /// Under a timed schedule, the virtual time of the last step (cycles).
    pub(crate) cycles: u64,
    /// Under a timed schedule, the warps' lives (admission to retirement)
    /// summed, in cycles.
    pub(crate) warp_cycles: u64,
    pub(crate) lanes: u64,
    pub(crate) warps: u64,
    pub(crate) blocks: u64,
}

pub(crate) struct Worker<'a> {
    cfg: &'a LaunchConfig,
    shared: &'a Shared,
    kernel: KernelRef,
    rng: Pcg64Mcg,
    clock: Arc<Clock>,
    accesses: Arc<Accesses>,
    /// Linear indices of the blocks still to admit, in order.
    queue: std::iter::StepBy<std::ops::Range<u64>>,
    blocks: Vec<Option<Block>>,
    warps: Vec<Option<Warp>>,
    free_warps: Vec<usize>,
    resident_warps: usize,
    runnable: Vec<(u32, u8)>,
    /// Under a timed schedule (`cfg.timing`): the runnable lanes by the
    /// time they are ready (then a draw of the seed, for ties).
    ready: BinaryHeap<Reverse<(u64, u64, u32, u8)>>,
    /// The virtual time (cycles) of the lane last resumed.
    now: u64,
    /// When each address's last read-modify-write took effect (timed).
    busy: HashMap<usize, u64>,
    stats: WorkerStats,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        cfg: &'a LaunchConfig,
        shared: &'a Shared,
        kernel: KernelRef,
        index: usize,
    ) -> Self {
        let workers = cfg.workers.max(1) as u64;
        // Lazy: a grid of billions of blocks (a valid CUDA grid) is not a
        // list of them.
        let blocks = (index as u64..cfg.blocks()).step_by(workers as usize);
        let mut seed = cfg.seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407);
        Worker {
            cfg,
            shared,
            kernel,
            rng: Pcg64Mcg::seed_from_u64(crate::splitmix64(&mut seed)),
            clock: Arc::new(Clock {
                deterministic: cfg.is_deterministic(),
                steps: AtomicU64::new(0),
                start: shared.start,
                timed_ns: cfg.timing.map(|_| AtomicU64::new(0)),
            }),
            accesses: Arc::new(Accesses {
                by_address: shared.by_address.clone(),
                ..Accesses::default()
            }),
            queue: blocks,
            blocks: Vec::new(),
            warps: Vec::new(),
            free_warps: Vec::new(),
            resident_warps: 0,
            runnable: Vec::new(),
            ready: BinaryHeap::new(),
            now: 0,
            busy: HashMap::new(),
            stats: WorkerStats {
                least_round_trips: u64::MAX,
                ..WorkerStats::default()
            },
        }
    }

    /// Runs every block of this worker to completion, or records a failure in
    /// the shared state.
    pub(crate) fn run(mut self) -> WorkerStats {
        if let Err(kind) = self.run_inner() {
            if matches!(kind, SimErrorKind::Watchdog { .. }) {
                // Keep this worker's lanes for the report.
                self.record_stuck();
            }
            self.shared.fail(kind);
        } else if self.shared.abort.load(Ordering::Relaxed) {
            // Another worker failed; if it was the watchdog, say where we are.
            self.record_stuck();
        }
        self.stats.atomic_loads = self.accesses.loads.load(Ordering::Relaxed);
        self.stats.atomic_stores = self.accesses.stores.load(Ordering::Relaxed);
        self.stats.atomic_rmws = self.accesses.rmws.load(Ordering::Relaxed);
        self.stats.sys_loads = self.accesses.sys_loads.load(Ordering::Relaxed);
        self.stats.sys_stores = self.accesses.sys_stores.load(Ordering::Relaxed);
        self.stats.sys_rmws = self.accesses.sys_rmws.load(Ordering::Relaxed);
        self.stats.sleep_ns = self.accesses.sleep_ns.load(Ordering::Relaxed);
        self.stats.host_wait_ns = self.accesses.host_wait_ns.load(Ordering::Relaxed);
        self.stats.fences = self.accesses.fences.load(Ordering::Relaxed);
        self.stats.cycles = self.now;
        for (total, event) in self.stats.events.iter_mut().zip(&self.accesses.events) {
            *total = event.load(Ordering::Relaxed);
        }
        self.stats
    }

    /// Adds this worker's live lanes to the watchdog's report.
    fn record_stuck(&mut self) {
        let lanes = self.reports();
        self.shared
            .stuck
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(lanes);
    }

    fn run_inner(&mut self) -> Result<(), SimErrorKind> {
        self.admit()?;
        loop {
            if self.runnable.is_empty() && self.ready.is_empty() {
                if self.resident_warps == 0 {
                    return Ok(());
                }
                // Every resident warp is blocked; per-warp checks report
                // deadlocks as they happen, so this is a logic error.
                return Err(self.deadlock_of_first_warp());
            }
            if self.stats.steps.is_multiple_of(256) && self.should_stop()? {
                return Ok(());
            }
            self.stats.steps += 1;
            self.clock.steps.store(self.stats.steps, Ordering::Relaxed);
            let (w, l) = self.pick();
            self.step(w as usize, l as usize)?;
            #[cfg(debug_assertions)]
            if self.stats.steps.is_multiple_of(4096) {
                self.check();
            }
        }
    }

    /// The next lane to resume, taken off `runnable`: at random, or the
    /// one ready first (the clock moves to its time).
    fn pick(&mut self) -> (u32, u8) {
        if self.cfg.timing.is_some() {
            let Some(Reverse((at, _, w, l))) = self.ready.pop() else {
                unreachable!("picked from an empty heap");
            };
            self.now = self.now.max(at);
            if let Some(ns) = &self.clock.timed_ns
                && let Some(timing) = &self.cfg.timing
            {
                ns.store(timing.ns_of_cycles(self.now), Ordering::Relaxed);
            }
            return (w, l);
        }
        let pick = self.rng.random_range(0..self.runnable.len());
        self.runnable.swap_remove(pick)
    }

    /// Under a timed schedule, when a lane at `now` that asks for `access`
    /// at `addr` (or sleeps `sleep` ns; a bare switch with neither) is ready
    /// again (`config::Timing` has the model); `now` untimed.
    fn ready_after(&mut self, access: Option<(Access, usize)>, sleep: u32) -> u64 {
        let Some(t) = self.cfg.timing else {
            return self.now;
        };
        // At least a cycle a request, so that a lane spinning on a bare
        // switch point lets time move; a spread of at most the whole
        // round trip (jitter_percent ≤ 200).
        let issue = self.now + u64::from(t.issue.max(1));
        let spread = u64::from(t.round_trip) * u64::from(t.jitter_percent.min(200)) / 100;
        let mut round_trip = || {
            let low = u64::from(t.round_trip) - spread / 2;
            low + self.rng.random_range(0..=spread)
        };
        match access {
            None => issue + t.cycles_of_ns(u64::from(sleep)),
            Some((Access::Load, _)) => issue + round_trip(),
            Some((Access::Fence, _)) => issue + u64::from(t.fence),
            Some((Access::Store, _)) => issue + u64::from(t.store),
            Some((kind @ (Access::Rmw | Access::Reduction), addr)) => {
                let trip = round_trip();
                // At the L2 half a round trip on, behind the address's last.
                let arrive = issue + trip / 2;
                let at = match self.busy.get(&addr) {
                    Some(&last) => arrive.max(last + u64::from(t.same_address)),
                    None => arrive,
                };
                self.busy.insert(addr, at);
                if kind == Access::Reduction {
                    issue + u64::from(t.store)
                } else {
                    at + (trip - trip / 2)
                }
            }
        }
    }

    /// Whether to stop: another worker failed (Ok(true)) or the watchdog
    /// fired (Err).
    fn should_stop(&mut self) -> Result<bool, SimErrorKind> {
        if self.shared.abort.load(Ordering::Relaxed) {
            return Ok(true);
        }
        if let Some(max) = self.cfg.max_steps
            && self.stats.steps >= max
        {
            return Err(SimErrorKind::Watchdog {
                limit: format!("{max} scheduling steps"),
                lanes: Vec::new(),
            });
        }
        let elapsed = self.shared.start.elapsed();
        if elapsed > self.cfg.watchdog {
            return Err(SimErrorKind::Watchdog {
                limit: format!("{:?} of wall time", self.cfg.watchdog),
                lanes: Vec::new(),
            });
        }
        Ok(false)
    }

    /// Admits blocks while there is room (at least one block always).
    fn admit(&mut self) -> Result<(), SimErrorKind> {
        let per_block = self.cfg.warps_per_block() as usize;
        while self.resident_warps == 0 || self.resident_warps + per_block <= self.cfg.resident_warps
        {
            let Some(linear) = self.queue.next() else {
                return Ok(());
            };
            self.admit_block(linear)?;
        }
        Ok(())
    }

    fn admit_block(&mut self, linear: u64) -> Result<(), SimErrorKind> {
        let cfg = self.cfg;
        let (gx, gy, _) = cfg.grid_dim;
        let (bx, by, _) = cfg.block_dim;
        let block_idx = (
            (linear % u64::from(gx)) as u32,
            ((linear / u64::from(gx)) % u64::from(gy)) as u32,
            (linear / (u64::from(gx) * u64::from(gy))) as u32,
        );
        let threads = cfg.threads_per_block();
        let warps = cfg.warps_per_block();
        let block_slot = match self.blocks.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                self.blocks.push(None);
                self.blocks.len() - 1
            }
        };
        self.blocks[block_slot] = Some(Block {
            warps_alive: warps as u32,
        });
        self.stats.blocks += 1;
        for warp in 0..warps {
            let first = warp * 32;
            let count = (threads - first).min(32) as u32;
            let mut lanes = Vec::with_capacity(count as usize);
            for lane in 0..count {
                let t = first + u64::from(lane);
                let thread_idx = (
                    (t % u64::from(bx)) as u32,
                    ((t / u64::from(bx)) % u64::from(by)) as u32,
                    (t / (u64::from(bx) * u64::from(by))) as u32,
                );
                let ctx = Arc::new(LaneCtx {
                    lane,
                    warp: warp as u32,
                    thread_idx,
                    block_idx,
                    block_dim: cfg.block_dim,
                    grid_dim: cfg.grid_dim,
                    binding: cfg.binding,
                    capability: cfg.capability,
                    migrating: cfg.migrating,
                    kernel: cfg.kernel,
                    grid: self.shared.grid,
                    clock: Arc::clone(&self.clock),
                    accesses: Arc::clone(&self.accesses),
                    trips: AtomicU64::new(0),
                    on_host: AtomicBool::new(false),
                    asked: std::sync::atomic::AtomicU8::new(0),
                    asked_addr: std::sync::atomic::AtomicUsize::new(0),
                    clock_reads: std::sync::atomic::AtomicU32::new(0),
                });
                let fiber = match cfg.fibers {
                    Fibers::Coroutines => {
                        CoroutineFiber::new(Arc::clone(&ctx), self.kernel, cfg.stack_size)
                            .map(Fiber::Coroutine)
                    }
                    Fibers::Threads => {
                        ThreadFiber::new(Arc::clone(&ctx), self.kernel, cfg.stack_size)
                            .map(Fiber::Thread)
                    }
                }
                .map_err(|e| SimErrorKind::Spawn(format!("lane stack or thread: {e}")))?;
                lanes.push(LaneSlot {
                    fiber,
                    ctx,
                    state: SlotState::Ready,
                    reply: 0,
                    site: None,
                    started: false,
                });
            }
            let present = if count == 32 {
                u32::MAX
            } else {
                (1u32 << count) - 1
            };
            let w = Warp {
                block_slot,
                block_idx,
                warp: warp as u32,
                lanes,
                present,
                exited: 0,
                parked: 0,
                active: count,
                patience: 0,
                admitted: self.now,
            };
            let index = match self.free_warps.pop() {
                Some(index) => {
                    self.warps[index] = Some(w);
                    index
                }
                None => {
                    self.warps.push(Some(w));
                    self.warps.len() - 1
                }
            };
            let at = self.now;
            for lane in 0..count {
                self.queue_lane(index as u32, lane as u8, at);
            }
            self.resident_warps += 1;
            self.stats.warps += 1;
            self.stats.lanes += u64::from(count);
        }
        Ok(())
    }

    fn warp_mut(&mut self, w: usize) -> &mut Warp {
        // Entries of `runnable` only name live warps (a warp retires when its
        // last lane exits, and exited lanes are never runnable).
        match self.warps.get_mut(w).and_then(Option::as_mut) {
            Some(warp) => warp,
            None => unreachable!("runnable names a retired warp"),
        }
    }

    fn push_runnable(&mut self, w: usize, lane: usize) {
        let at = self.now + self.cfg.timing.map_or(0, |t| u64::from(t.issue.max(1)));
        self.push_runnable_at(w, lane, at);
    }

    /// Puts lane `lane` of warp `w` on `runnable`, ready at `at` (timed).
    fn push_runnable_at(&mut self, w: usize, lane: usize, at: u64) {
        self.warp_mut(w).active += 1;
        self.queue_lane(w as u32, lane as u8, at);
    }

    fn queue_lane(&mut self, w: u32, lane: u8, at: u64) {
        if self.cfg.timing.is_some() {
            let tie = self.rng.random::<u64>();
            self.ready.push(Reverse((at, tie, w, lane)));
        } else {
            self.runnable.push((w, lane));
        }
    }

    /// Runs lane `l` of warp `w` (just taken off `runnable`) to its next
    /// switch point and acts on its request.
    fn step(&mut self, w: usize, l: usize) -> Result<(), SimErrorKind> {
        let random = self.cfg.convergence == Convergence::Random;
        {
            let warp = self.warp_mut(w);
            warp.active -= 1;
            if warp.parked != 0 {
                warp.patience += 1;
            }
        }
        if let SlotState::Activemask(site) = self.warp_mut(w).lanes[l].state {
            // Random convergence: the scheduler picked a parked lane; group it.
            debug_assert!(random);
            let group = self.choose_group(w, l, site);
            self.release_group(w, group, false);
        }
        let reply = {
            let slot = &mut self.warp_mut(w).lanes[l];
            slot.started = true;
            slot.reply
        };
        let resumed = self.warp_mut(w).lanes[l].fiber.resume(reply);
        match resumed {
            Resumed::Request(Request::Hello(_)) => {
                unreachable!("a coroutine announces its yielder when created")
            }
            Resumed::Request(
                request @ (Request::Switch { site, .. } | Request::Sleep { site, .. }),
            ) => {
                let slot = &mut self.warp_mut(w).lanes[l];
                slot.site = Some(site);
                slot.reply = 0;
                let at = match request {
                    Request::Switch { access, .. } => self.ready_after(access, 0),
                    Request::Sleep { nanoseconds, .. } => self.ready_after(None, nanoseconds),
                    _ => unreachable!("matched above"),
                };
                self.push_runnable_at(w, l, at);
            }
            Resumed::Request(Request::Activemask { site }) => {
                let warp = self.warp_mut(w);
                warp.lanes[l].site = Some(site);
                warp.lanes[l].state = SlotState::Activemask(site);
                if warp.parked == 0 {
                    warp.patience = 0;
                }
                warp.parked |= 1 << l;
                if random {
                    self.push_runnable(w, l);
                }
            }
            Resumed::Request(Request::Collective {
                kind,
                site,
                lane_mask,
                value,
            }) => {
                self.stats.collectives += 1;
                self.warp_mut(w).lanes[l].site = Some(site);
                let pending = Pending {
                    kind,
                    site,
                    lane_mask,
                    value,
                };
                self.warp_mut(w).lanes[l].state = SlotState::Collective(pending);
                self.validate(w, l, &pending)?;
                self.try_complete(w, &pending);
            }
            Resumed::Done(Ok(())) => {
                let warp = self.warp_mut(w);
                warp.lanes[l].state = SlotState::Exited;
                warp.exited |= 1 << l;
                if warp.exited == warp.present {
                    self.retire(w)?;
                    return Ok(());
                }
                self.check_exit(w, l)?;
            }
            Resumed::Done(Err(message)) => {
                return Err(SimErrorKind::LanePanicked {
                    lane: self.report(w, l),
                    message,
                });
            }
        }
        self.unblock(w)
    }

    /// When no lane of warp `w` can run: release parked lanes (converged
    /// policy), or report a deadlock.
    fn unblock(&mut self, w: usize) -> Result<(), SimErrorKind> {
        let random = self.cfg.convergence == Convergence::Random;
        let warp = self.warp_mut(w);
        if random || warp.parked == 0 {
            if warp.active == 0 && warp.exited != warp.present {
                return Err(self.deadlock(w));
            }
            return Ok(());
        }
        if warp.active == 0 || warp.patience >= CONVERGED_PATIENCE {
            // Release every site's parked lanes, each site as one group.
            while self.warp_mut(w).parked != 0 {
                let warp = self.warp_mut(w);
                let first = warp.parked.trailing_zeros() as usize;
                let SlotState::Activemask(site) = warp.lanes[first].state else {
                    unreachable!("parked lanes are in activemask");
                };
                let group = self.parked_at(w, site);
                self.release_group(w, group, true);
            }
        }
        Ok(())
    }

    /// Lanes of warp `w` parked at `site`.
    fn parked_at(&mut self, w: usize, site: Site) -> u32 {
        let warp = self.warp_mut(w);
        let mut group = 0;
        let mut bits = warp.parked;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if matches!(warp.lanes[j].state, SlotState::Activemask(s) if s == site) {
                group |= 1 << j;
            }
        }
        group
    }

    /// Random convergence: the group that lane `l` joins at `site` — all
    /// lanes parked there, `l` alone, or a random subset with `l`.
    fn choose_group(&mut self, w: usize, l: usize, site: Site) -> u32 {
        let there = self.parked_at(w, site);
        let me = 1u32 << l;
        match self.rng.random_range(0..3u32) {
            0 => there,
            1 => me,
            _ => (there & self.rng.random::<u32>()) | me,
        }
    }

    /// Gives every lane of `group` (parked in warp `w`) the mask `group`.
    /// `push`: whether the lanes must be put on `runnable` (converged policy;
    /// under random convergence parked lanes are on it already).
    fn release_group(&mut self, w: usize, group: u32, push: bool) {
        let warp = self.warp_mut(w);
        warp.parked &= !group;
        if warp.parked == 0 {
            warp.patience = 0;
        }
        let mut bits = group;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let warp = self.warp_mut(w);
            warp.lanes[j].state = SlotState::Ready;
            warp.lanes[j].reply = u64::from(group);
            if push {
                self.push_runnable(w, j);
            }
        }
    }

    fn validate(&mut self, w: usize, l: usize, p: &Pending) -> Result<(), SimErrorKind> {
        let warp = self.warp_mut(w);
        let mask = p.lane_mask;
        let problem = if mask & (1 << l) == 0 {
            Some(format!("the mask does not contain the calling lane {l}"))
        } else if mask & !warp.present != 0 {
            Some(format!(
                "the mask names lanes {:#010x} that this warp does not have (it has {:#010x})",
                mask & !warp.present,
                warp.present
            ))
        } else if mask & warp.exited != 0 {
            let j = (mask & warp.exited).trailing_zeros() as usize;
            Some(format!(
                "lane {j} of the mask has exited{}",
                warp.lanes[j]
                    .site
                    .map(|s| format!(" (its last switch point: {s})"))
                    .unwrap_or_default()
            ))
        } else if let Kind::Shfl { src_lane } = p.kind
            && mask & (1 << (src_lane & 31)) == 0
        {
            Some(format!("the source lane {src_lane} is not in the mask"))
        } else {
            None
        };
        match problem {
            Some(problem) => Err(SimErrorKind::CollectiveMisuse {
                lane: self.report(w, l),
                problem,
            }),
            None => Ok(()),
        }
    }

    /// Completes the collective `p` if every lane of its mask waits in it.
    fn try_complete(&mut self, w: usize, p: &Pending) {
        let warp = self.warp_mut(w);
        let mut values = [0u64; 32];
        let mut kinds = [p.kind; 32];
        let mut bits = p.lane_mask;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            match warp.lanes[j].state {
                SlotState::Collective(q) if q.joins(p) => {
                    values[j] = q.value;
                    kinds[j] = q.kind;
                }
                _ => return,
            }
        }
        let mask = p.lane_mask;
        // What one lane learns from another waited for the other's round
        // trips: the lanes go on with the most any of them had.
        let mut trips = 0;
        let mut bits = mask;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            trips = trips.max(warp.lanes[j].ctx.trips.load(Ordering::Relaxed));
        }
        let mut bits = mask;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            warp.lanes[j].ctx.trips.store(trips, Ordering::Relaxed);
        }
        let mut bits = mask;
        let ballot = {
            let mut b = 0u32;
            let mut m = mask;
            while m != 0 {
                let j = m.trailing_zeros();
                m &= m - 1;
                if values[j as usize] & 1 != 0 {
                    b |= 1 << j;
                }
            }
            b
        };
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let reply = match kinds[j] {
                Kind::Ballot => u64::from(ballot),
                Kind::MatchAny => {
                    let mut same = 0u32;
                    let mut m = mask;
                    while m != 0 {
                        let k = m.trailing_zeros() as usize;
                        m &= m - 1;
                        if values[k] == values[j] {
                            same |= 1 << k;
                        }
                    }
                    u64::from(same)
                }
                Kind::Shfl { src_lane } => values[(src_lane & 31) as usize],
                Kind::Syncwarp => 0,
                Kind::ReduceOr => {
                    let mut or = 0u64;
                    let mut m = mask;
                    while m != 0 {
                        let k = m.trailing_zeros() as usize;
                        m &= m - 1;
                        or |= values[k];
                    }
                    or
                }
            };
            let warp = self.warp_mut(w);
            warp.lanes[j].state = SlotState::Ready;
            warp.lanes[j].reply = reply;
            let at = self.now
                + self
                    .cfg
                    .timing
                    .map_or(0, |t| u64::from(t.collective.max(1)));
            self.push_runnable_at(w, j, at);
        }
    }

    /// Lane `l` of warp `w` exited: no waiting collective may count on it.
    fn check_exit(&mut self, w: usize, l: usize) -> Result<(), SimErrorKind> {
        let warp = self.warp_mut(w);
        for (j, slot) in warp.lanes.iter().enumerate() {
            if let SlotState::Collective(p) = slot.state
                && p.lane_mask & (1 << l) != 0
            {
                let exit_site = warp.lanes[l]
                    .site
                    .map(|s| format!(" (its last switch point: {s})"))
                    .unwrap_or_default();
                let problem = format!("lane {l} of the mask exited{exit_site}");
                return Err(SimErrorKind::CollectiveMisuse {
                    lane: self.report(w, j),
                    problem,
                });
            }
        }
        Ok(())
    }

    fn retire(&mut self, w: usize) -> Result<(), SimErrorKind> {
        let Some(warp) = self.warps[w].take() else {
            unreachable!("retiring a retired warp");
        };
        self.free_warps.push(w);
        self.resident_warps -= 1;
        // The warp's critical path: its lane with the most round trips.
        let trips = warp
            .lanes
            .iter()
            .map(|slot| slot.ctx.trips.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        self.stats.round_trips += trips;
        self.stats.least_round_trips = self.stats.least_round_trips.min(trips);
        self.stats.warp_cycles += self.now - warp.admitted;
        let block_slot = warp.block_slot;
        drop(warp);
        let done = match self.blocks[block_slot].as_mut() {
            Some(block) => {
                block.warps_alive -= 1;
                block.warps_alive == 0
            }
            None => unreachable!("a live warp's block is resident"),
        };
        if done {
            self.blocks[block_slot] = None;
            self.admit()?;
        }
        Ok(())
    }

    fn deadlock(&mut self, w: usize) -> SimErrorKind {
        let warp = self.warp_mut(w);
        let (block, index) = (warp.block_idx, warp.warp);
        let count = warp.lanes.len();
        SimErrorKind::Deadlock {
            block,
            warp: index,
            lanes: (0..count).map(|l| self.report(w, l)).collect(),
        }
    }

    fn deadlock_of_first_warp(&mut self) -> SimErrorKind {
        match self.warps.iter().position(Option::is_some) {
            Some(w) => self.deadlock(w),
            None => SimErrorKind::InvalidLaunch("scheduler lost its warps".into()),
        }
    }

    fn report(&mut self, w: usize, l: usize) -> LaneReport {
        let warp = self.warp_mut(w);
        let slot = &warp.lanes[l];
        LaneReport {
            block: warp.block_idx,
            thread: slot.ctx.thread_idx,
            warp: warp.warp,
            lane: l as u32,
            state: match slot.state {
                SlotState::Ready if !slot.started => LaneState::NotStarted,
                SlotState::Ready => LaneState::Runnable,
                SlotState::Activemask(_) => LaneState::Activemask,
                SlotState::Collective(p) => LaneState::Collective {
                    kind: p.kind.name(),
                    lane_mask: p.lane_mask,
                },
                SlotState::Exited => LaneState::Exited,
            },
            site: slot.site,
        }
    }

    /// Reports of every live lane of this worker.
    fn reports(&mut self) -> Vec<LaneReport> {
        let mut out = Vec::new();
        for w in 0..self.warps.len() {
            if self.warps[w].is_none() {
                continue;
            }
            let count = self.warp_mut(w).lanes.len();
            for l in 0..count {
                let report = self.report(w, l);
                if report.state != LaneState::Exited {
                    out.push(report);
                }
            }
        }
        out
    }

    #[cfg(debug_assertions)]
    fn check(&self) {
        let mut counts = vec![0u32; self.warps.len()];
        let timed = self.ready.iter().map(|&Reverse((_, _, w, l))| (w, l));
        for (w, l) in self.runnable.iter().copied().chain(timed) {
            counts[w as usize] += 1;
            let warp = self.warps[w as usize].as_ref();
            let state = warp.map(|warp| warp.lanes[l as usize].state);
            debug_assert!(
                matches!(state, Some(SlotState::Ready | SlotState::Activemask(_))),
                "runnable lane in state {state:?}"
            );
        }
        for (w, warp) in self.warps.iter().enumerate() {
            if let Some(warp) = warp {
                debug_assert_eq!(warp.active, counts[w], "warp {w} active count");
            }
        }
    }
}
