//! What the subcommands share: opening a heap on the GPU or the simulator,
//! device buffers, running one kernel and reading its counters.

use std::time::Duration;

use warpalloc::{Heap, HeapConfig, Mode};
use warpalloc_device::event::{EVENT_ROWS, EVENT_STRIDE, EVENTS, EVENTS_SYMBOL};
use warpalloc_device::heap::stream_count_for;
use warpalloc_device::kernel::Kernel;
use warpalloc_host::device::{GlobalRead, read_global};
use warpalloc_host::{Buffer, HostError, Launcher, Prefer};
use warpalloc_kernels_tests::stress::{STATS_WORDS, Stats};
use warpalloc_sim::{Convergence, LaunchConfig, Timing};

/// The simulator's schedule for a run.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub seed: u64,
    pub workers: usize,
    pub convergence: Convergence,
    /// The compute capability the simulated lanes see (which architecture's
    /// device paths run).
    pub capability: (u32, u32),
    /// The simulator's wall-clock limit per launch (`None`: its default).
    pub watchdog: Option<Duration>,
    /// The simulator schedules by time (`Timing::hopper`), and a launch
    /// reports its cycles.
    pub timed: bool,
}

/// A run's settings, as its JSON report records them: the command line and
/// the simulator's schedule (the seed is also the kernels' own seed).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    pub command_line: Vec<String>,
    pub seed: u64,
    pub simulator_workers: usize,
    pub simulator_convergence: &'static str,
    /// MAJOR.MINOR, the architecture whose device paths the simulated lanes
    /// take.
    pub simulator_capability: String,
    pub simulator_watchdog_seconds: Option<u64>,
    /// The simulator's timed schedule (`--timed`), or `None`.
    pub simulator_timing: Option<String>,
}

impl Schedule {
    /// This schedule and the process's command line, for a report.
    pub fn settings(&self) -> Settings {
        Settings {
            // `args_os`: `args` panics on an argument that is not UTF-8
            // (a `--plot` path, say), after the whole run.
            command_line: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            seed: self.seed,
            simulator_workers: self.workers,
            simulator_convergence: match self.convergence {
                Convergence::Converged => "converged",
                Convergence::Random => "random",
            },
            simulator_capability: format!("{}.{}", self.capability.0, self.capability.1),
            simulator_watchdog_seconds: self.watchdog.map(|d| d.as_secs()),
            simulator_timing: self.timed.then(|| format!("{:?}", Timing::hopper())),
        }
    }

    /// Writes the schedule into a simulator launch configuration.
    pub fn apply(&self, cfg: &mut LaunchConfig) {
        cfg.seed = self.seed;
        cfg.workers = self.workers.max(1);
        cfg.convergence = self.convergence;
        cfg.capability = self.capability;
        if let Some(limit) = self.watchdog {
            cfg.watchdog = limit;
        }
        cfg.timing = self.timed.then(Timing::hopper);
    }
}

/// Opens a heap where `prefer` says, with the simulator's `schedule`.
pub fn open_heap(
    prefer: Prefer,
    config: HeapConfig,
    schedule: Schedule,
) -> Result<Heap, HostError> {
    open_heap_with(prefer, config, schedule, false, false)
}

/// [`open_heap`], with the kernels' events build on a GPU that has one
/// (`events`: `warpalloc_tool::ptx::events_for_capability`), and with
/// `stream_a_warp`, on the emulated device, a search stream for each warp
/// the simulator runs at once (its workers × their resident warps) unless
/// `config` names the streams — as a GPU's heap has for its resident warps.
/// Without, the emulated device's default is its own residency's, 32
/// streams, which the simulator's 64 warps a worker share: on two
/// workers, four warps a stream take the runs each other freed (the
/// bench's 64 B case, 4 096 threads: 0.40 extra walk rounds per warp-pair,
/// 0.16 on one worker; BENCHMARKS.md, "The GPU check counts the
/// allocator's events on the GPU").
pub fn open_heap_with(
    prefer: Prefer,
    mut config: HeapConfig,
    schedule: Schedule,
    events: bool,
    stream_a_warp: bool,
) -> Result<Heap, HostError> {
    let mut launcher = Launcher::new_with(prefer, |info| {
        let cc = info.compute_capability;
        if events {
            warpalloc_tool::ptx::events_for_capability(cc)
        } else {
            warpalloc_tool::ptx::for_capability(cc)
        }
    })?;
    schedule.apply(launcher.simulator_config());
    if stream_a_warp && !launcher.on_gpu() && config.streams.is_none() {
        let sim = launcher.simulator_config();
        let at_once = sim.resident_warps.saturating_mul(sim.workers.max(1)) as u64;
        config.streams = Some(stream_count_for(at_once));
    }
    Heap::new(launcher, config)
}

/// The allocator's events so far on a GPU, summed over the rows of the
/// module's `WARPALLOC_EVENTS` (`warpalloc_device::event`); `None` in the
/// simulator (whose launches report their own) and for a module with no
/// such global (not the events build). Read when no kernel runs.
pub fn gpu_events(heap: &Heap) -> Result<Option<[u64; EVENTS]>, HostError> {
    let launcher = launcher(heap);
    if !launcher.on_gpu() {
        return Ok(None);
    }
    let mut words = vec![0u64; EVENT_STRIDE * EVENT_ROWS];
    // SAFETY: the launcher's module, on its device, read after the launch
    // that wrote it completed (`Heap::launch` waits for it).
    match unsafe {
        read_global(
            &**launcher.device(),
            &**launcher.module(),
            EVENTS_SYMBOL,
            &mut words,
        )
    }? {
        GlobalRead::Read => {}
        // Not the events build.
        GlobalRead::Missing => return Ok(None),
        GlobalRead::Size(size) => {
            return Err(HostError::InvalidPtx(format!(
                "{EVENTS_SYMBOL} is {size} bytes, expected {}",
                8 * words.len()
            )));
        }
    }
    let mut sums = [0u64; EVENTS];
    for row in words.chunks_exact(EVENT_STRIDE) {
        // The row's first `EVENTS` counters; the rest is padding.
        for (sum, n) in sums.iter_mut().zip(row) {
            *sum += n;
        }
    }
    Ok(Some(sums))
}

/// The launcher of a heap from [`open_heap`] (which always has one).
pub fn launcher(heap: &Heap) -> &Launcher {
    heap.launcher()
        .expect("open_heap makes every heap with a launcher")
}

/// Where the heap's kernels run, in words.
pub fn target_name(heap: &Heap) -> String {
    launcher(heap).to_string()
}

/// A zeroed buffer of `n` elements where the heap's kernels can reach it.
pub fn buffer<T>(heap: &Heap, n: usize) -> Result<Buffer<T>, HostError>
where
    T: bytemuck::Pod,
{
    launcher(heap).alloc_zeroed(n.max(1))
}

/// Copies a buffer of the heap's launcher back to the host.
pub fn read<T: bytemuck::Pod>(heap: &Heap, buffer: &Buffer<T>) -> Result<Vec<T>, HostError> {
    launcher(heap).read(buffer)
}

/// Launches `args` and returns what the launch did (its times, and the
/// simulator's counts on the emulated device).
pub fn launch_report<K: Kernel>(
    heap: &mut Heap,
    blocks: u32,
    threads: u32,
    args: K,
) -> Result<warpalloc_host::device::LaunchReport, HostError> {
    // SAFETY: every caller builds `args` from buffers of this module, sized
    // for the grid, alive until this returns.
    unsafe { heap.launch((blocks, 1, 1), (threads, 1, 1), args) }
}

/// Launches `args` and returns its time (`LaunchReport::time`: the
/// kernel's own between CUDA events on a GPU, the wall time elsewhere).
pub fn launch<K: Kernel>(
    heap: &mut Heap,
    blocks: u32,
    threads: u32,
    args: K,
) -> Result<Duration, HostError> {
    Ok(launch_report(heap, blocks, threads, args)?.time())
}

/// Reads a stats buffer.
pub fn read_stats(heap: &Heap, stats: &Buffer<u64>) -> Result<Stats, HostError> {
    let words = read(heap, stats)?;
    let mut w = [0u64; STATS_WORDS];
    for (o, v) in w.iter_mut().zip(words) {
        *o = v;
    }
    Ok(Stats::from_words(&w))
}

/// A heap configuration for `mode` ("rpc" or "pool") and an optional limit.
pub fn heap_config(
    pool_slabs: Option<u32>,
    limit: Option<u64>,
    spill: bool,
    pool_fallback: bool,
) -> HeapConfig {
    HeapConfig {
        mode: match pool_slabs {
            Some(slabs) => Mode::Pool { slabs },
            None => Mode::Rpc,
        },
        limit,
        spill,
        pool_fallback,
        ..HeapConfig::default()
    }
}

/// Bytes in binary units, for tables: the heap's own format.
pub use warpalloc_host::heap::bytes;

/// A rate with an SI prefix.
pub fn rate(per_second: f64) -> String {
    if per_second >= 1e9 {
        format!("{:.2} G/s", per_second / 1e9)
    } else if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.1} k/s", per_second / 1e3)
    } else {
        format!("{per_second:.0} /s")
    }
}

/// A heap mode in words: "rpc" or "pool(N)".
pub fn mode_name(mode: Mode) -> String {
    match mode {
        Mode::Rpc => "rpc".into(),
        Mode::Pool { slabs } => format!("pool({slabs})"),
    }
}
