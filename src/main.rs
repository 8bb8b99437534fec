//! `warpalloc`: the command-line front end. Runs on the GPU when one is
//! usable and in the CPU warp simulator otherwise, and says which.

mod cli;

/// Simulated kernels (the `collections` stress kernel's `Vec`, `Box` and
/// `String`) allocate through warpalloc, as they do on the GPU; the rest of
/// the program through the system allocator (see `WarpAlloc`).
#[global_allocator]
static GLOBAL: warpalloc_device::WarpAlloc = warpalloc_device::WarpAlloc;

use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use cli::bench::{self, BenchArgs};
use cli::common::{Schedule, heap_config, launcher, open_heap};
use cli::stress::{self, KERNELS, StressArgs};
use warpalloc_host::backing::CudaVmm;
use warpalloc_host::device::{Cuda, cuda};
use warpalloc_host::{HostError, Prefer};
use warpalloc_sim::Convergence;
use warpalloc_tool::ptx;

#[derive(Parser)]
#[command(
    name = "warpalloc",
    version,
    about = "malloc/free inside Rust GPU kernels"
)]
struct Cli {
    /// Run in the CPU warp simulator even when a GPU is present.
    #[arg(long, global = true, conflicts_with = "gpu")]
    simulator: bool,
    /// Require a GPU (fail instead of falling back to the simulator).
    #[arg(long, global = true)]
    gpu: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum ConvergenceArg {
    Converged,
    Random,
}

/// The simulator's schedule (ignored on a GPU).
#[derive(Args, Clone, Copy)]
struct ScheduleArgs {
    /// Simulator seed (a run replays exactly with --workers 1). `stress`
    /// also seeds its kernels' generators with its low 32 bits, on a GPU
    /// too.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulator worker threads (default: the machine's cores; at least 1).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    workers: Option<usize>,
    /// Simulator convergence: `converged` warps (lockstep, like a GPU under
    /// a uniform load) or `random` subsets at every activemask.
    #[arg(long, value_enum, default_value_t = ConvergenceArg::Converged)]
    convergence: ConvergenceArg,
    /// Simulator compute capability, MAJOR.MINOR: which architecture's
    /// device paths run (below 8.0, those of the sm_75 module: no
    /// redux.sync).
    #[arg(long, default_value = "9.0", value_parser = parse_capability)]
    capability: (u32, u32),
    /// Simulator wall-clock limit per launch, in seconds (default 120): a
    /// launch past it fails with where each lane waits.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    watchdog: Option<u64>,
    /// Simulator: schedule by time, not by turns — a round trip 300
    /// cycles, a collective 20, a nanosleep its time (an H100/H200 as far
    /// as public measurements go) — and report a warp's mean cycles per
    /// pair (bench: `sim_cycles_per_pair`).
    #[arg(long)]
    timed: bool,
}

/// A byte count: digits with an optional unit, e.g. `67108864`, `64MiB`,
/// `64 MiB`, `64M` (binary: K, M, G, T and KiB, MiB, GiB, TiB are powers of
/// 1024; KB, MB, GB, TB powers of 1000; B or nothing: bytes).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text}: expected a number of bytes, such as 67108864 or 64MiB"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "{text}: unknown unit {other:?} (B, KiB, MiB, GiB, TiB or K, M, G, T: powers of \
                 1024; KB, MB, GB, TB: powers of 1000)"
            ));
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text}: too many bytes"))
}

/// "8.6" as (8, 6).
fn parse_capability(text: &str) -> Result<(u32, u32), String> {
    let parse = |part: &str| part.parse::<u32>().ok();
    match text.split_once('.') {
        Some((major, minor)) if let (Some(a), Some(b)) = (parse(major), parse(minor)) => {
            if (a, b) >= (7, 5) {
                Ok((a, b))
            } else {
                Err(format!("{text}: warpalloc's oldest module is for 7.5"))
            }
        }
        _ => Err(format!("{text}: expected MAJOR.MINOR, such as 7.5 or 9.0")),
    }
}

impl ScheduleArgs {
    fn schedule(self) -> Schedule {
        Schedule {
            seed: self.seed,
            workers: self
                .workers
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            convergence: match self.convergence {
                ConvergenceArg::Converged => Convergence::Converged,
                ConvergenceArg::Random => Convergence::Random,
            },
            capability: self.capability,
            watchdog: self.watchdog.map(std::time::Duration::from_secs),
            timed: self.timed,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the stress kernels and check them: no corruption, no overlap, no
    /// lost memory. Exits non-zero on any failure.
    ///
    /// Columns: `allocs` successful allocations; `nulls` allocations that got
    /// null (a failure unless memory is capped); `corrupt` blocks whose
    /// owner-tagged pattern did not read back at free; `broken` promises
    /// broken (a block misaligned or smaller than asked, a bad-input call
    /// that did not return its defined result); `traffic` slabs the heap put
    /// to use and large blocks it handed out for the kernel (0 means
    /// warpalloc served none of its allocations); `peak live` the most bytes
    /// the kernel's threads held at once; `peak mapped` the heap's most
    /// device memory mapped during the kernel; `÷` its most device and
    /// host memory mapped at once (`--spill`) ÷ `peak live`; `allocs/s`
    /// allocations per second of the kernel's launch (for `collections`,
    /// threads: its counts are its threads'). `--iterations`,
    /// `--max-size` and `--large-one-in` shape `churn`, `lifetimes` and
    /// `fill`; `size_sweep` and `aligned` take large blocks whatever
    /// `--large-one-in` says.
    Stress {
        /// Kernels to run (default: all), separated by commas or spaces.
        #[arg(long, num_args = 1.., value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(KERNELS))]
        kernels: Vec<String>,
        /// Blocks (default: 8 per SM of the device; the emulated device has
        /// 2). Blocks × threads: at most 16 777 216.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_THREADS)))]
        blocks: Option<u32>,
        /// Threads per block (1 to 1 024, CUDA's most).
        #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=1024))]
        threads: u32,
        /// Allocation rounds per thread (1 to 1 000 000).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        iterations: u32,
        /// Largest small request (bytes, at least 16: the kernels' blocks
        /// carry a 16-byte owner tag; sizes are log-uniform from 16).
        #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(16..))]
        max_size: u32,
        /// One allocation in this many is a large block of 1-5 MiB (0: none).
        #[arg(long, default_value_t = 64)]
        large_one_in: u32,
        /// Pool mode with this many slabs mapped before launch (default: RPC
        /// mode, slabs mapped on demand).
        #[arg(long)]
        pool_slabs: Option<u32>,
        /// With --pool-slabs: once the pool is dry, ask the host for slabs
        /// (as RPC mode does) instead of returning null.
        #[arg(long, requires = "pool_slabs")]
        pool_fallback: bool,
        /// Cap the heap's mapped memory: bytes, or with a unit (64MiB, 2GiB).
        #[arg(long, value_parser = parse_bytes)]
        limit: Option<u64>,
        /// Back what the device's memory has no room for (past --limit)
        /// with host memory instead of returning null.
        #[arg(long)]
        spill: bool,
        /// Plant a stray write in one block in N of the `lifetimes` kernel, to
        /// see the run fail (0: never).
        #[arg(long, default_value_t = 0)]
        plant_corruption: u32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        schedule: ScheduleArgs,
    },
    /// Measure malloc+free pairs per second by size and thread count, mixed
    /// sizes, fragmentation and out-of-memory behaviour, RPC vs pool.
    ///
    /// Columns: `cold pairs` malloc+free pairs per second of a fresh heap's
    /// first launch, `warm pairs` of the same launch again; `nulls`
    /// allocations that got null; `peak map` the heap's most mapped memory;
    /// `map/req` that ÷ the bytes requested at the peak (1.0: no overhead);
    /// `sim steps/rmw/sys` in the simulator, scheduling steps, atomic
    /// read-modify-writes and system-scope accesses per pair.
    Bench {
        /// Request sizes (bytes, at least 1), separated by commas or spaces.
        #[arg(long, num_args = 1.., value_delimiter = ',', default_values_t = [4u32, 64, 1024, 8192], value_parser = clap::value_parser!(u32).range(1..))]
        sizes: Vec<u32>,
        /// Thread counts (default: a quarter of the device's resident
        /// threads, all of them, and four times as many), separated by
        /// commas or spaces; each at most 16 777 216 (0: a launch the
        /// simulator or the driver refuses, that case's row FAILED).
        #[arg(long, num_args = 1.., value_delimiter = ',', value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_THREADS)))]
        threads: Vec<u32>,
        /// malloc+free rounds per thread (at least 1).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: u32,
        /// Threads per block (1 to 1 024, CUDA's most).
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1024))]
        block: u32,
        /// The cases to run (default: all), separated by commas or spaces.
        #[arg(long, num_args = 1.., value_delimiter = ',', value_enum)]
        cases: Vec<bench::Case>,
        /// Count the allocator's events (scans, slot locks, walk rounds,
        /// looks) in each warm launch and print them under its row, per
        /// warp-pair (one size) or per free group (mixed sizes): on a GPU
        /// of compute capability 8.0 or later with the events build of the
        /// kernels (a reduction per event, so its rates are not the
        /// allocator's), in the simulator from its own counters.
        #[arg(long)]
        events: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Draw the alloc/free rows into this SVG file: pairs per second
        /// against threads, a line per size, warm solid and cold dashed.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        #[command(flatten)]
        schedule: ScheduleArgs,
    },
    /// Launch the demo kernel (warp-aggregated tickets) and check its result.
    Demo {
        /// Blocks in the grid.
        #[arg(long, default_value_t = 64)]
        blocks: u32,
        /// Threads per block (need not be a multiple of 32).
        #[arg(long, default_value_t = 96)]
        threads: u32,
        #[command(flatten)]
        schedule: ScheduleArgs,
    },
    /// Describe the GPU (if any), its VMM support, and the embedded PTX.
    Info {
        /// On a GPU, also link a heap to a module loaded through cudarc in
        /// the heap's context (accepted) and to one loaded in another
        /// context of the same GPU (refused: `WrongDevice`); exits non-zero
        /// when either goes otherwise.
        #[arg(long)]
        link_check: bool,
    },
}

/// The most threads a launch of `stress` or `bench` may have: their
/// kernels index per-thread buffers by a 32-bit thread id (`fill`: 16
/// entries a thread), and 16 Mi threads is 62 times an H200's resident
/// threads.
const MAX_THREADS: u32 = 1 << 24;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Stress {
        blocks: Some(blocks),
        threads,
        ..
    } = &cli.command
        && blocks.checked_mul(*threads).is_none_or(|n| n > MAX_THREADS)
    {
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "--blocks {blocks} × --threads {threads} is more than {MAX_THREADS} threads"
                ),
            )
            .exit();
    }
    let prefer = if cli.simulator {
        Prefer::Simulator
    } else if cli.gpu {
        Prefer::Gpu
    } else {
        Prefer::Auto
    };
    let result = match cli.command {
        Command::Stress {
            kernels,
            blocks,
            threads,
            iterations,
            max_size,
            large_one_in,
            pool_slabs,
            pool_fallback,
            limit,
            spill,
            plant_corruption,
            json,
            schedule,
        } => (|| {
            let schedule = schedule.schedule();
            let mut heap = open_heap(
                prefer,
                heap_config(pool_slabs, limit, spill, pool_fallback),
                schedule,
            )?;
            let kernels: Vec<String> = if kernels.is_empty() {
                KERNELS.iter().map(|k| k.to_string()).collect()
            } else {
                kernels
            };
            if plant_corruption != 0 && !kernels.iter().any(|k| k == "lifetimes") {
                // It plants in `lifetimes` only: without it the run would
                // pass with nothing planted.
                return Err(warpalloc::HostError::Config(
                    "--plant-corruption plants in the `lifetimes` kernel, which --kernels \
                     leaves out"
                        .into(),
                ));
            }
            let sms = launcher(&heap).info().multiprocessors;
            let args = StressArgs {
                kernels,
                blocks: blocks
                    .unwrap_or(8u32.saturating_mul(sms.max(1)).min(MAX_THREADS / threads)),
                threads,
                iterations,
                max_size,
                large_one_in,
                seed: schedule.seed as u32,
                plant_corruption,
                limit,
                pool_slabs,
                spill,
                pool_fallback,
                // Spilling, a limit gives no null while the host has room;
                // a pool with fallback none while the host has memory.
                capped: (pool_slabs.is_some() && !pool_fallback) || (limit.is_some() && !spill),
            };
            let report = stress::stress(&mut heap, &args, schedule.settings(), !json)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                stress::print(&report);
            }
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        })(),
        Command::Bench {
            sizes,
            threads,
            rounds,
            block,
            cases,
            events,
            json,
            plot,
            schedule,
        } => (|| {
            let args = BenchArgs {
                sizes,
                threads,
                rounds,
                block,
                cases,
                events,
            };
            let mut started = false;
            let report = bench::bench(prefer, schedule.schedule(), &args, |target, row| {
                if json {
                    return;
                }
                if !started {
                    bench::print_header(target);
                    started = true;
                }
                bench::print_row(row);
            })?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            }
            if let Some(path) = &plot {
                if let Err(e) = cli::plot::plot(&report, path) {
                    eprintln!("warpalloc bench: --plot: {e}");
                    return Ok(ExitCode::FAILURE);
                }
                if !json {
                    println!("plot: {}", path.display());
                }
            }
            let failed = report.rows.iter().filter(|r| r.error.is_some()).count();
            if failed > 0 {
                eprintln!("warpalloc bench: {failed} case(s) failed (see their rows)");
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        })(),
        Command::Demo {
            blocks,
            threads,
            schedule,
        } => cli::demo::demo(prefer, blocks, threads, schedule.schedule()),
        Command::Info { link_check } => info(prefer, link_check),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warpalloc: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info(prefer: Prefer, link_check: bool) -> Result<ExitCode, HostError> {
    // `--gpu` asks for the GPU, as everywhere: none is a failure, after
    // the lines that say why.
    let no_gpu = |why: &dyn std::fmt::Display| {
        println!("GPU: none ({why})");
        if link_check {
            println!("cudarc link check: not run (no GPU)");
        }
        if prefer == Prefer::Gpu {
            eprintln!("warpalloc: error: --gpu: no GPU ({why})");
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    };
    println!(
        "embedded PTX: {} and sm_80 (loaded on compute capability 8.0 and later) \
         ({} kernels: {})",
        ptx::ARCH,
        ptx::KERNEL_NAMES.len(),
        ptx::KERNEL_NAMES.join(", ")
    );
    println!("stress runs (stress --kernels): {}", KERNELS.join(", "));
    if !cuda::driver_present() {
        return Ok(no_gpu(&HostError::NoDriver));
    }
    match Cuda::open(0) {
        Ok(gpu) => {
            use warpalloc_host::device::Device;
            let i = gpu.info();
            println!("GPU: {i}");
            let module = ptx::for_capability(i.compute_capability);
            let arch = if module == ptx::KERNELS_TESTS_SM80 {
                "sm_80"
            } else {
                ptx::ARCH
            };
            println!("  loads the PTX for {arch}");
            println!(
                "  resident warps: {} (RPC ports: {})",
                i.resident_warps(),
                warpalloc_device::rpc::wire::port_count_for(i.resident_warps())
            );
            match CudaVmm::new(std::sync::Arc::clone(gpu.context())) {
                Ok(vmm) => println!(
                    "  virtual memory management: supported, granularity {} bytes",
                    vmm.granularity()
                ),
                Err(e) => println!("  virtual memory management: {e}"),
            }
            if link_check {
                let found = cudarc_link_check(gpu.context(), module);
                println!("cudarc link check: {found}");
                if found.starts_with("FAILED") {
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        Err(e) => return Ok(no_gpu(&e)),
    }
    Ok(ExitCode::SUCCESS)
}

/// `info --link-check`: a heap attached to `ctx` links a module of `ptx`'s
/// heap globals (`ptx::link_only`) loaded through cudarc in `ctx`, and
/// refuses one loaded in a second context of the same GPU (a cudarc
/// module's context is the one the driver says owns its `WARPALLOC_HEAP`).
/// What happened, in words: "ok: …" when both went as they should.
fn cudarc_link_check(ctx: &std::sync::Arc<cudarc::driver::CudaContext>, ptx: &str) -> String {
    use cudarc::driver::CudaContext;
    use cudarc::nvrtc::Ptx;
    let text = ptx::link_only(ptx);
    let run = || -> Result<String, String> {
        let heap = warpalloc::Heap::attach(ctx, warpalloc::HeapConfig::default())
            .map_err(|e| format!("attach: {e}"))?;
        let own = ctx
            .load_module(Ptx::from_src(text.clone()))
            .map_err(|e| format!("loading the module in the heap's context: {e}"))?;
        heap.link(&own)
            .map_err(|e| format!("a module of the heap's own context was refused: {e}"))?;
        let other = CudaContext::new_non_primary(ctx.ordinal(), 0)
            .map_err(|e| format!("a second context: {e}"))?;
        let theirs = other
            .load_module(Ptx::from_src(text.clone()))
            .map_err(|e| format!("loading the module in a second context: {e}"))?;
        match heap.link(&theirs) {
            Err(HostError::WrongDevice(why)) => Ok(format!(
                "ok: a module of the heap's context linked; one of a second context refused ({why})"
            )),
            Err(e) => Err(format!(
                "a module of a second context was refused, but not as WrongDevice: {e}"
            )),
            Ok(()) => Err("a module of a second context was LINKED: nothing refused it".into()),
        }
    };
    // cudarc panics where the driver lacks a symbol (`cuCtxCreate_v4`
    // before CUDA 12.5): a line that says so, not an `info` cut short.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(done) => done.unwrap_or_else(|why| format!("FAILED: {why}")),
        Err(payload) => format!(
            "FAILED: panicked: {}",
            warpalloc_sim::panic_message(payload.as_ref())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_take_units() {
        for (text, bytes) in [
            ("67108864", 64 << 20),
            ("64MiB", 64 << 20),
            ("64 MiB", 64 << 20),
            ("64m", 64 << 20),
            ("2GiB", 2 << 30),
            ("512K", 512 << 10),
            ("3MB", 3_000_000),
            ("7B", 7),
        ] {
            assert_eq!(parse_bytes(text), Ok(bytes), "{text}");
        }
        for bad in ["", "MiB", "64XB", "-1", "99999999999999TiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
