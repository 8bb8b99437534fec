//! Launch configuration: grid shape, schedule, fibers, watchdog.

use std::time::Duration;

/// How `activemask()` groups lanes (see the crate docs, "Convergence model").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Convergence {
    /// Every subset of the lanes parked at a site is possible; the seed chooses.
    Random,
    /// Lanes parked at a site are released together once the rest of the warp
    /// is blocked: the behaviour of a well-converged warp.
    Converged,
}

/// What a lane runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fibers {
    /// Stackful coroutines on the worker's OS thread (fast; the default).
    Coroutines,
    /// One OS thread per lane, handing a baton to the scheduler (slow; runs
    /// under Miri, which cannot switch stacks).
    Threads,
}

/// The costs of a timed schedule ([`LaunchConfig::timed`]), in cycles of
/// the modelled GPU's clock.
///
/// Untimed, the scheduler picks the next lane at random: every switch point
/// — an atomic, a fence, a sleep, a collective — is one turn, in which any
/// other resident lane may move once. A collective then weighs as much as
/// a round trip to memory, and a `nanosleep` nothing. Timed, every lane
/// has a time at which it is ready again, and the scheduler resumes the
/// lane that is ready first (ties broken by the seed):
///
/// ```text
///   lane at a switch point, at `now`          ready again at (i = now + issue)
///   ─────────────────────────────────────────────────────────────────────
///   atomic load                               i + rt
///   read-modify-write on `a`                  t + (rt − rt/2), t = max(i + rt/2,
///                                               busy[a] + same_address);
///                                               busy[a] = t
///   store, reduction (`red`: busy[a] too)     i + store
///   fence                                     i + fence
///   nanosleep(ns)                             i + ns · clock_mhz / 1000
///   a parked `activemask` released            now + issue
///   the last lane of a collective arrives     now + collective, every lane
///   rt: round_trip, drawn per access from ± jitter_percent / 2 around it
///   (issue and collective count at least 1 cycle, jitter at most 200 %)
/// ```
///
/// The access is made when the lane resumes, a round trip after it was
/// asked for: atomics take effect in the order of the lanes' ready times,
/// and a read-modify-write waits behind the others on its address (the L2
/// serialises them; `busy` is each worker's own, so with several workers
/// there is none between them). The launch's makespan is
/// `LaunchStats::cycles`. This is a model, not a GPU: no bandwidth, no
/// caches beyond the one latency, no issue slots shared between warps — its
/// use is to weigh a collective (a few cycles) against a round trip
/// (hundreds), which the untimed schedule cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// An atomic load's or read-modify-write's round trip to the L2.
    pub round_trip: u32,
    /// The spread of `round_trip`, in percent: each access draws from
    /// `round_trip · (1 ± jitter_percent / 200)`.
    pub jitter_percent: u32,
    /// A store or a reduction: issued, not waited for.
    pub store: u32,
    /// A memory fence.
    pub fence: u32,
    /// A warp collective, from its last lane's arrival.
    pub collective: u32,
    /// How long a read-modify-write holds its address at the L2.
    pub same_address: u32,
    /// Cycles of every request on top of its own cost (the instructions
    /// between switch points).
    pub issue: u32,
    /// The clock, for `nanosleep` and the lanes' clock readings.
    pub clock_mhz: u32,
}

impl Timing {
    /// An H100 / H200 (Hopper) as far as public measurements go: an L2 hit
    /// about 260 cycles from an SM and more from the far partition
    /// (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of
    /// Bandwidth", 2023), so a round trip of 300 with ± 25 %; a collective
    /// 20 cycles; the H200's boost clock of 1 980 MHz. The fence and the
    /// store are estimates, not measurements. No same-address hold
    /// (`same_address` 0): the H200 ran 1 M threads' four `fetch_add`s on
    /// one counter each, beside their 4 M malloc/free pairs, in 3.3 ms
    /// (1.28 G pairs/s, BENCHMARKS.md): under a cycle each, and the test
    /// kernels' counters (one word for every lane) would swamp a makespan
    /// held longer. The simulator's per-address counts
    /// (`LaunchConfig::count_addresses`) show the allocator's hot words.
    pub const fn hopper() -> Self {
        Timing {
            round_trip: 300,
            jitter_percent: 50,
            store: 10,
            fence: 300,
            collective: 20,
            same_address: 0,
            issue: 4,
            clock_mhz: 1980,
        }
    }

    /// `ns` nanoseconds in cycles.
    pub(crate) fn cycles_of_ns(&self, ns: u64) -> u64 {
        ns.saturating_mul(u64::from(self.clock_mhz)) / 1000
    }

    /// `cycles` in nanoseconds.
    pub(crate) fn ns_of_cycles(&self, cycles: u64) -> u64 {
        cycles.saturating_mul(1000) / u64::from(self.clock_mhz.max(1))
    }
}

/// Under [`Convergence::Converged`], how many scheduling steps of a warp's
/// other lanes a parked `activemask()` waits before it is released anyway.
pub const CONVERGED_PATIENCE: u32 = 256;

/// A simulator launch: the CUDA launch shape plus the schedule.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    /// Blocks in the grid (x, y, z).
    pub grid_dim: (u32, u32, u32),
    /// Threads in a block (x, y, z).
    pub block_dim: (u32, u32, u32),
    /// Seed of the schedule (and of the virtual clock's readings).
    pub seed: u64,
    /// Worker OS threads. 1 makes the launch deterministic: the same seed
    /// replays the same schedule.
    pub workers: usize,
    /// How `activemask()` groups lanes.
    pub convergence: Convergence,
    /// What lanes run on.
    pub fibers: Fibers,
    /// Stack bytes per lane.
    pub stack_size: usize,
    /// Warps resident at once per worker (whole blocks are admitted; at least
    /// one block is always resident).
    pub resident_warps: usize,
    /// Wall-clock limit of the launch.
    pub watchdog: Duration,
    /// Limit on scheduling steps (per worker), a deterministic watchdog.
    pub max_steps: Option<u64>,
    /// An opaque word every lane can read with [`crate::binding`]: how a host
    /// binds per-launch device state (a heap) to the kernel.
    pub binding: usize,
    /// The compute capability (major, minor) the lanes see with
    /// [`crate::capability`]: device code that takes a different path per
    /// architecture (`redux.sync` from 8.0 on) takes the one a GPU of this
    /// capability would.
    pub capability: (u32, u32),
    /// An address range `(start, bytes)` whose read-modify-writes are
    /// counted per address (`LaunchStats::watched_rmws`,
    /// `watched_hottest`): a contention measurement; it costs a lock per
    /// read-modify-write, so it is off (`None`) unless asked for.
    pub watch: Option<(u64, u64)>,
    /// The kernel's name, which lanes read with [`crate::kernel_name`] (for
    /// messages that name the kernel; "" when not set).
    pub kernel: &'static str,
    /// A timed schedule ([`Timing`]), or `None`: the next lane at random.
    pub timing: Option<Timing>,
    /// Special registers as a GPU may read them across a preemption: each
    /// lane of a warp reads a slot of its own ([`crate::migrating`]), as
    /// lanes whose reads of `%smid`/`%warpid` fall on either side of a
    /// warp's move would. Code that needs one value for the warp must
    /// share one lane's reading. Off by default.
    pub migrating: bool,
}

/// The simulator's default [`LaunchConfig::capability`]: 9.0, the Hopper
/// GPUs the project checks on.
pub const DEFAULT_CAPABILITY: (u32, u32) = (9, 0);

impl LaunchConfig {
    /// A deterministic launch of `grid_dim` blocks of `block_dim` threads, with
    /// the seed from `WARPALLOC_SIM_SEED` or 0, random convergence and
    /// coroutines (threads under Miri).
    pub fn new(grid_dim: (u32, u32, u32), block_dim: (u32, u32, u32)) -> Self {
        LaunchConfig {
            grid_dim,
            block_dim,
            seed: crate::seed_from_env().unwrap_or(0),
            workers: 1,
            convergence: Convergence::Random,
            fibers: if cfg!(miri) {
                Fibers::Threads
            } else {
                Fibers::Coroutines
            },
            stack_size: 512 * 1024,
            resident_warps: 64,
            // Miri interprets every instruction: give it hours, not minutes.
            watchdog: Duration::from_secs(if cfg!(miri) { 4 * 3600 } else { 120 }),
            max_steps: None,
            binding: 0,
            capability: DEFAULT_CAPABILITY,
            watch: None,
            kernel: "",
            timing: None,
            migrating: false,
        }
    }

    /// A one-dimensional launch: `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        Self::new((blocks, 1, 1), (threads, 1, 1))
    }

    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Runs on `workers` OS threads (no longer deterministic when > 1).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Sets the convergence policy.
    pub fn convergence(mut self, convergence: Convergence) -> Self {
        self.convergence = convergence;
        self
    }

    /// Sets what lanes run on.
    pub fn fibers(mut self, fibers: Fibers) -> Self {
        self.fibers = fibers;
        self
    }

    /// Sets the wall-clock watchdog.
    pub fn watchdog(mut self, limit: Duration) -> Self {
        self.watchdog = limit;
        self
    }

    /// Sets the step watchdog.
    pub fn max_steps(mut self, steps: u64) -> Self {
        self.max_steps = Some(steps);
        self
    }

    /// Counts read-modify-writes per address in `watch` (`start`,
    /// `bytes`): `LaunchStats::watched_rmws`, `watched_hottest`.
    pub fn count_addresses(mut self, watch: (u64, u64)) -> Self {
        self.watch = Some(watch);
        self
    }

    /// Schedules by time ([`Timing`]): the lane that is ready first goes
    /// next, and the launch reports its makespan (`LaunchStats::cycles`).
    /// Each worker keeps its own time: with several, their lanes meet in
    /// real time, and the makespan is the longest worker's.
    pub fn timed(mut self, timing: Timing) -> Self {
        self.timing = Some(timing);
        self
    }

    /// Makes each lane read a warp slot of its own ([`LaunchConfig::migrating`]).
    pub fn migrating(mut self, on: bool) -> Self {
        self.migrating = on;
        self
    }

    /// Sets the resident warps per worker.
    pub fn resident_warps(mut self, warps: usize) -> Self {
        self.resident_warps = warps.max(1);
        self
    }

    /// Sets the stack bytes per lane.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// Names the kernel the lanes run ([`crate::kernel_name`]).
    pub fn kernel(mut self, name: &'static str) -> Self {
        self.kernel = name;
        self
    }

    /// Sets the word lanes read with [`crate::binding`].
    pub fn binding(mut self, binding: usize) -> Self {
        self.binding = binding;
        self
    }

    /// Sets the compute capability lanes see with [`crate::capability`].
    pub fn capability(mut self, major: u32, minor: u32) -> Self {
        self.capability = (major, minor);
        self
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        let (x, y, z) = self.block_dim;
        // Saturating: three `u32`s can overflow a `u64` (a block that
        // `validate` refuses).
        u64::from(x)
            .saturating_mul(u64::from(y))
            .saturating_mul(u64::from(z))
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        let (x, y, z) = self.grid_dim;
        u64::from(x)
            .saturating_mul(u64::from(y))
            .saturating_mul(u64::from(z))
    }

    /// Warps per block.
    pub fn warps_per_block(&self) -> u64 {
        self.threads_per_block().div_ceil(32)
    }

    /// Whether the same seed replays the same schedule.
    pub fn is_deterministic(&self) -> bool {
        self.workers == 1
    }
}
