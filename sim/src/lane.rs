//! The lane side: what device code calls. Each function finds the running lane
//! in a thread-local, and a switch point suspends the lane back to its
//! worker's scheduler with a [`Request`].
//!
//! Outside a launch every function acts for lane 0 of a one-lane warp (see the
//! crate docs).

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use corosensei::Yielder;

use crate::fiber::Baton;

/// Source location of a switch point.
pub(crate) type Site = &'static Location<'static>;

/// A warp collective that waits for every lane of its mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ballot,
    MatchAny,
    Shfl { src_lane: u32 },
    Syncwarp,
    ReduceOr,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ballot => "ballot",
            Kind::MatchAny => "match_any",
            Kind::Shfl { .. } => "shfl",
            Kind::Syncwarp => "syncwarp",
            Kind::ReduceOr => "reduce_or",
        }
    }
}

/// What a lane asks of the scheduler when it suspends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Request {
    /// First suspension of a coroutine lane: the address of its yielder.
    Hello(usize),
    /// An atomic or fence: the scheduler may run another lane first. The
    /// access the lane counted just before (`count_access_at`) and its
    /// address, which a timed schedule weighs; `None` for a bare switch.
    Switch {
        site: Site,
        access: Option<(Access, usize)>,
    },
    /// `nanosleep`: like a switch; a timed schedule waits the nanoseconds.
    Sleep { site: Site, nanoseconds: u32 },
    /// `activemask()`: park until grouped.
    Activemask { site: Site },
    /// A sync collective.
    Collective {
        kind: Kind,
        site: Site,
        lane_mask: u32,
        value: u64,
    },
}

/// The virtual or real clock of one worker.
pub(crate) struct Clock {
    pub(crate) deterministic: bool,
    pub(crate) steps: AtomicU64,
    pub(crate) start: Instant,
    /// Under a timed schedule, the worker's virtual time in nanoseconds
    /// (`Some`), which the lanes read.
    pub(crate) timed_ns: Option<AtomicU64>,
}

impl Clock {
    fn now(&self) -> u64 {
        if let Some(ns) = &self.timed_ns {
            ns.load(Ordering::Relaxed)
        } else if self.deterministic {
            // Virtual time: one tick per scheduling step, scaled to look like
            // nanoseconds so that backoff arithmetic behaves as on the GPU.
            self.steps.load(Ordering::Relaxed).wrapping_mul(32)
        } else {
            u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }
    }
}

/// Who a lane is. Immutable for the lane's life.
/// What a lane's memory access is, for the counts in `LaunchStats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// An atomic load.
    Load,
    /// An atomic store.
    Store,
    /// A read-modify-write: swap, compare-exchange, fetch-op.
    Rmw,
    /// A read-modify-write whose result the lane does not use (PTX `red`:
    /// an add to a counter, say): counted with the read-modify-writes
    /// (`rmws`, and against its address), but not as a round trip — the
    /// lane does not wait for it.
    Reduction,
    /// A memory fence (any scope).
    Fence,
}

impl Access {
    const ALL: [Access; 5] = [
        Access::Load,
        Access::Store,
        Access::Rmw,
        Access::Reduction,
        Access::Fence,
    ];

    /// The access as a non-zero word (0 says "none").
    fn code(self) -> u8 {
        match self {
            Access::Load => 1,
            Access::Store => 2,
            Access::Rmw => 3,
            Access::Reduction => 4,
            Access::Fence => 5,
        }
    }

    fn of_code(code: u8) -> Option<Access> {
        Access::ALL.into_iter().find(|a| a.code() == code)
    }
}

/// Event counters a launch keeps for the code it runs
/// ([`count_event`], `LaunchStats::events`): the code names its events by
/// index.
pub const EVENTS: usize = 16;

/// A worker's counts of its lanes' atomic accesses: all of them, and of
/// those the ones at system scope (what the host sees while kernels run).
#[derive(Default)]
pub(crate) struct Accesses {
    pub(crate) loads: AtomicU64,
    pub(crate) stores: AtomicU64,
    pub(crate) rmws: AtomicU64,
    pub(crate) sys_loads: AtomicU64,
    pub(crate) sys_stores: AtomicU64,
    pub(crate) sys_rmws: AtomicU64,
    pub(crate) fences: AtomicU64,
    /// Nanoseconds of `nanosleep` the lanes asked for.
    pub(crate) sleep_ns: AtomicU64,
    /// Nanoseconds of `nanosleep` asked for while waiting on the host
    /// (`wait_on_host`), counted here instead of in `sleep_ns`.
    pub(crate) host_wait_ns: AtomicU64,
    /// The code's own events ([`count_event`]).
    pub(crate) events: [AtomicU64; EVENTS],
    /// Read-modify-writes per address, when the launch counts them (one
    /// map shared by the workers).
    pub(crate) by_address: Option<Arc<Mutex<HashMap<usize, u64>>>>,
}

pub(crate) struct LaneCtx {
    pub(crate) lane: u32,
    pub(crate) warp: u32,
    pub(crate) thread_idx: (u32, u32, u32),
    pub(crate) block_idx: (u32, u32, u32),
    pub(crate) block_dim: (u32, u32, u32),
    pub(crate) grid_dim: (u32, u32, u32),
    pub(crate) binding: usize,
    pub(crate) capability: (u32, u32),
    /// [`crate::LaunchConfig::migrating`].
    pub(crate) migrating: bool,
    pub(crate) kernel: &'static str,
    pub(crate) grid: u64,
    pub(crate) clock: Arc<Clock>,
    pub(crate) accesses: Arc<Accesses>,
    /// The lane's dependent global round trips so far: its atomic loads and
    /// read-modify-writes and the plain reads it marks
    /// ([`count_round_trip`]), each waiting for the one before; a
    /// collective raises its lanes to the most any of them had (what one
    /// lane learns from another waited for the other's trips). An atomic
    /// only its own lane touches (the worker's one thread runs it).
    pub(crate) trips: AtomicU64,
    /// Whether the lane waits on the host now (`wait_on_host`). Only its
    /// own lane touches it.
    pub(crate) on_host: std::sync::atomic::AtomicBool,
    /// The access the lane counted last (`Access::code`; 0 for none) and
    /// its address, which its next switch point hands to the scheduler.
    /// Only its own lane touches them.
    pub(crate) asked: std::sync::atomic::AtomicU8,
    pub(crate) asked_addr: std::sync::atomic::AtomicUsize,
    /// Readings of [`clock`] since the lane last suspended ([`CLOCK_SPIN`]).
    /// Only its own lane touches it.
    pub(crate) clock_reads: std::sync::atomic::AtomicU32,
}

/// Readings of [`clock`] in a row, with no switch point between, after
/// which a reading waits [`CLOCK_SPIN_WAIT`]: a lane that waits on the
/// clock (a deadline) lets time pass and the watchdog look, instead of
/// spinning for ever on a clock that moves only as the scheduler steps (a
/// review, 2026-12-07). Code that reads the clock now and then never meets
/// it, so its schedules are as before.
pub const CLOCK_SPIN: u32 = 1024;
/// Nanoseconds a lane waits (a `nanosleep`, counted as sleep) once it has
/// read the clock [`CLOCK_SPIN`] times in a row.
pub const CLOCK_SPIN_WAIT: u32 = 32;

/// How the running lane gets back to its scheduler.
#[derive(Clone, Copy)]
pub(crate) enum Link {
    Coroutine(*const Yielder<u64, Request>),
    Thread(*const Baton),
}

/// The running lane, as the thread-local sees it.
#[derive(Clone, Copy)]
pub(crate) struct Current {
    pub(crate) ctx: *const LaneCtx,
    pub(crate) link: Link,
}

thread_local! {
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// Installs the running lane; returns the previous one.
pub(crate) fn set_current(current: Option<Current>) -> Option<Current> {
    CURRENT.with(|c| c.replace(current))
}

fn with_ctx<R>(f: impl FnOnce(&LaneCtx) -> R) -> Option<R> {
    let current = CURRENT.with(Cell::get)?;
    // SAFETY: `Current` is installed only while its lane runs (by the
    // coroutine fiber around `resume`, or by the lane's own thread for its
    // whole life), and the fiber holds an `Arc<LaneCtx>` that outlives that.
    Some(f(unsafe { &*current.ctx }))
}

fn suspend(request: Request) -> Option<u64> {
    let current = CURRENT.with(Cell::get)?;
    let _ = with_ctx(|c| c.clock_reads.store(0, Ordering::Relaxed));
    if matches!(current.link, Link::Coroutine(_)) && std::thread::panicking() {
        // A coroutine lane unwinding from its own panic runs the unwind to
        // its end without suspending: the other lanes share its OS thread,
        // whose panic count they would see (`std::thread::panicking()`,
        // where `WarpAlloc` sends their allocations to the system), and a
        // launch that failed with the unwind half done reset the coroutine
        // with the count left raised for good (a review, 2026-12-07). Its
        // destructors' collectives answer as for a lane alone; the launch
        // fails with its panic anyway, as a GPU's trap would.
        return Some(alone(request, with_ctx(|c| c.lane).unwrap_or(0)));
    }
    let reply = match current.link {
        // SAFETY: the yielder lives on the coroutine's own stack for the
        // coroutine's whole life, and we are running on that coroutine now
        // (the link is installed only around `resume`).
        Link::Coroutine(yielder) => unsafe { (*yielder).suspend(request) },
        // SAFETY: the baton is owned by an `Arc` that the lane thread's
        // closure keeps alive for the thread's whole life.
        Link::Thread(baton) => unsafe { (*baton).suspend(request) },
    };
    Some(reply)
}

/// What `request` answers a lane alone in its warp (lane `lane`).
fn alone(request: Request, lane: u32) -> u64 {
    let me = 1u64 << lane;
    match request {
        Request::Hello(_) | Request::Switch { .. } | Request::Sleep { .. } => 0,
        Request::Activemask { .. } => me,
        Request::Collective { kind, value, .. } => match kind {
            Kind::Ballot => {
                if value != 0 {
                    me
                } else {
                    0
                }
            }
            Kind::MatchAny => me,
            Kind::Shfl { .. } | Kind::ReduceOr => value,
            Kind::Syncwarp => 0,
        },
    }
}

/// Whether the caller is a lane of a simulator launch.
pub fn in_launch() -> bool {
    CURRENT.with(Cell::get).is_some()
}

/// The caller's lane index in its warp (0 outside a launch).
pub fn lane_id() -> u32 {
    with_ctx(|c| c.lane).unwrap_or(0)
}

/// The caller's warp index in its block (0 outside a launch).
pub fn warp_id() -> u32 {
    with_ctx(|c| c.warp).unwrap_or(0)
}

/// `threadIdx` as (x, y, z).
pub fn thread_idx() -> (u32, u32, u32) {
    with_ctx(|c| c.thread_idx).unwrap_or((0, 0, 0))
}

/// `blockIdx` as (x, y, z).
pub fn block_idx() -> (u32, u32, u32) {
    with_ctx(|c| c.block_idx).unwrap_or((0, 0, 0))
}

/// `blockDim` as (x, y, z).
pub fn block_dim() -> (u32, u32, u32) {
    with_ctx(|c| c.block_dim).unwrap_or((1, 1, 1))
}

/// `gridDim` as (x, y, z).
pub fn grid_dim() -> (u32, u32, u32) {
    with_ctx(|c| c.grid_dim).unwrap_or((1, 1, 1))
}

/// The name of the kernel the calling lane runs
/// ([`crate::LaunchConfig::kernel`]); "" outside a launch or when not set.
pub fn kernel_name() -> &'static str {
    with_ctx(|c| c.kernel).unwrap_or("")
}

/// The launch's grid id, as `%gridid` on a GPU: distinct for every launch
/// of the process (1, 2, 3…); 0 outside a launch.
pub fn grid_id() -> u64 {
    with_ctx(|c| c.grid).unwrap_or(0)
}

/// The launch's binding word (see [`crate::LaunchConfig::binding`]); 0
/// outside a launch.
pub fn binding() -> usize {
    with_ctx(|c| c.binding).unwrap_or(0)
}

/// Whether the launch reads special registers as across a preemption
/// ([`crate::LaunchConfig::migrating`]): each lane a warp slot of its own.
pub fn migrating() -> bool {
    with_ctx(|c| c.migrating).unwrap_or(false)
}

/// The launch's compute capability (see [`crate::LaunchConfig::capability`]);
/// [`crate::DEFAULT_CAPABILITY`] outside a launch.
pub fn capability() -> (u32, u32) {
    with_ctx(|c| c.capability).unwrap_or(crate::DEFAULT_CAPABILITY)
}

/// A clock in nanoseconds: the worker's virtual time under a timed schedule;
/// else virtual (scheduling steps) in deterministic launches, so that
/// replays see the same readings; real time otherwise.
#[track_caller]
pub fn clock() -> u64 {
    let spinning = with_ctx(|c| c.clock_reads.fetch_add(1, Ordering::Relaxed) + 1 >= CLOCK_SPIN);
    if spinning == Some(true) {
        // A wait, not a bare switch: under the timed schedule a switch
        // costs no time, and lanes that all spin would see none pass.
        sleep(CLOCK_SPIN_WAIT);
    }
    with_ctx(|c| c.clock.now()).unwrap_or_else(|| {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let start = START.get_or_init(Instant::now);
        u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    })
}

/// Counts one atomic access of the calling lane at `addr` (nothing outside
/// a launch): the sums are the launch's `atomic_loads`, `atomic_stores`,
/// `atomic_rmws`, and, when `sys` (on the GPU a `.sys` operation: memory
/// the host reads while kernels run), its `sys_loads`, `sys_stores`,
/// `sys_rmws`; when the launch counts addresses
/// (`LaunchConfig::count_addresses`), a read-modify-write is counted
/// against its address too.
pub fn count_access_at(access: Access, sys: bool, addr: usize) {
    count(access, sys);
    let _ = with_ctx(|c| {
        c.asked.store(access.code(), Ordering::Relaxed);
        c.asked_addr.store(addr, Ordering::Relaxed);
    });
    if matches!(access, Access::Rmw | Access::Reduction) {
        let _ = with_ctx(|c| {
            if let Some(map) = &c.accesses.by_address {
                *map.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(addr)
                    .or_default() += 1;
            }
        });
    }
}

fn count(access: Access, sys: bool) {
    let _ = with_ctx(|c| {
        let a = &c.accesses;
        let (all, system) = match access {
            Access::Load => (&a.loads, Some(&a.sys_loads)),
            Access::Store => (&a.stores, Some(&a.sys_stores)),
            Access::Rmw | Access::Reduction => (&a.rmws, Some(&a.sys_rmws)),
            // Fences are counted whatever their scope.
            Access::Fence => (&a.fences, None),
        };
        all.fetch_add(1, Ordering::Relaxed);
        if matches!(access, Access::Load | Access::Rmw) {
            c.trips.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(system) = system.filter(|_| sys) {
            system.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Counts a plain (non-atomic) read of global memory whose value the lane
/// waits for — a slab header, say — as a dependent round trip
/// (`LaunchStats::round_trips`); atomic loads and read-modify-writes count
/// by themselves. Outside a launch, nothing. Not a switch point.
pub fn count_round_trip() {
    let _ = with_ctx(|c| c.trips.fetch_add(1, Ordering::Relaxed));
}

/// Counts one occurrence of event `index` (taken modulo [`EVENTS`]) of the
/// running lane's launch (`LaunchStats::events`): what the simulated code
/// wants counted beyond memory accesses — a search's rounds, say. Outside
/// a launch, nothing. Not a switch point.
pub fn count_event(index: usize) {
    let _ = with_ctx(|c| c.accesses.events[index % EVENTS].fetch_add(1, Ordering::Relaxed));
}

/// Marks the running lane as waiting on the host (an RPC answer) until
/// called again with `false`: the sleep it asks for meanwhile is counted in
/// `LaunchStats::host_wait_ns`, not `sleep_ns` — the host's latency (real
/// time, which a simulator's steps do not follow) apart from the waits of
/// the code's own protocols. Outside a launch, nothing.
pub fn wait_on_host(waiting: bool) {
    let _ = with_ctx(|c| c.on_host.store(waiting, Ordering::Relaxed));
}

/// Forgets the access counted last (`count_access_at`) if no switch point
/// took it: the next bare switch point is not weighed as that access.
fn forget_access() {
    let _ = with_ctx(|c| c.asked.store(0, Ordering::Relaxed));
}

/// A switch point: call before every atomic and fence. The scheduler may run
/// other lanes before this one goes on; a timed schedule weighs the access
/// the lane counted just before with [`count_access_at`].
#[track_caller]
pub fn switch_point() {
    let access = with_ctx(|c| {
        let code = c.asked.swap(0, Ordering::Relaxed);
        Access::of_code(code).map(|a| (a, c.asked_addr.load(Ordering::Relaxed)))
    })
    .flatten();
    let _ = suspend(Request::Switch {
        site: Location::caller(),
        access,
    });
}

/// `nanosleep`: a switch point; the nanoseconds asked for are counted
/// (`LaunchStats::sleep_ns`), and a timed schedule
/// ([`crate::LaunchConfig::timed`]) waits them in virtual time.
#[track_caller]
pub fn sleep(nanoseconds: u32) {
    forget_access();
    let _ = with_ctx(|c| {
        let counter = if c.on_host.load(Ordering::Relaxed) {
            &c.accesses.host_wait_ns
        } else {
            &c.accesses.sleep_ns
        };
        counter.fetch_add(u64::from(nanoseconds), Ordering::Relaxed)
    });
    if suspend(Request::Sleep {
        site: Location::caller(),
        nanoseconds,
    })
    .is_none()
    {
        std::hint::spin_loop();
    }
}

/// `activemask()`: the lanes of the caller's warp that the scheduler groups
/// with it at this call site.
#[track_caller]
pub fn activemask() -> u32 {
    forget_access();
    suspend(Request::Activemask {
        site: Location::caller(),
    })
    .map_or(1, |mask| mask as u32)
}

#[track_caller]
fn collective(kind: Kind, lane_mask: u32, value: u64) -> u64 {
    forget_access();
    let site = Location::caller();
    match suspend(Request::Collective {
        kind,
        site,
        lane_mask,
        value,
    }) {
        Some(reply) => reply,
        None => {
            assert!(
                lane_mask == 1,
                "{}(lane_mask={lane_mask:#x}) at {site} outside a simulator launch: \
                 the caller is lane 0 of a one-lane warp, so the mask must be 1",
                kind.name()
            );
            match kind {
                Kind::Ballot => value & 1,
                Kind::MatchAny => 1,
                Kind::Shfl { src_lane } => {
                    assert!(
                        src_lane == 0,
                        "shfl from lane {src_lane} at {site} outside a simulator launch"
                    );
                    value
                }
                Kind::Syncwarp => 0,
                Kind::ReduceOr => value,
            }
        }
    }
}

/// `vote.sync.ballot`: bit `i` set when lane `i` of `lane_mask` has `pred`.
#[track_caller]
pub fn ballot(lane_mask: u32, pred: bool) -> u32 {
    collective(Kind::Ballot, lane_mask, u64::from(pred)) as u32
}

/// `match.any.sync`: the lanes of `lane_mask` whose `key` equals the caller's.
#[track_caller]
pub fn match_any(lane_mask: u32, key: u64) -> u32 {
    collective(Kind::MatchAny, lane_mask, key) as u32
}

/// `shfl.sync.idx`: `value` as held by lane `src_lane` (which must be in
/// `lane_mask`).
#[track_caller]
pub fn shfl(lane_mask: u32, value: u64, src_lane: u32) -> u64 {
    collective(Kind::Shfl { src_lane }, lane_mask, value)
}

/// `redux.sync.or.b32` (sm_80 and later): the OR of `value` over the lanes
/// of `lane_mask`, one collective.
#[track_caller]
pub fn reduce_or(lane_mask: u32, value: u32) -> u32 {
    collective(Kind::ReduceOr, lane_mask, u64::from(value)) as u32
}

/// `bar.warp.sync`: waits for every lane of `lane_mask` (at any `syncwarp`).
#[track_caller]
pub fn syncwarp(lane_mask: u32) {
    collective(Kind::Syncwarp, lane_mask, 0);
}
