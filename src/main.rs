//! `warpalloc`: the command-line front end. Runs on the GPU when one is
//! usable and in the CPU warp simulator otherwise, and says which.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use warpalloc::ptx;
use warpalloc_host::{HostError, Launcher, Prefer, Target, gpu};
use warpalloc_kernels_tests::demo::warp_tickets;
use warpalloc_sim::Convergence;

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

#[derive(Subcommand)]
enum Command {
    /// Launch the demo kernel (warp-aggregated tickets) and check its result.
    Demo {
        /// Blocks in the grid.
        #[arg(long, default_value_t = 64)]
        blocks: u32,
        /// Threads per block (need not be a multiple of 32).
        #[arg(long, default_value_t = 96)]
        threads: u32,
        /// Simulator seed (the run replays exactly with --workers 1).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Simulator worker threads (default: the machine's cores).
        #[arg(long)]
        workers: Option<usize>,
        /// Simulator convergence: `converged` warps (lockstep, like a GPU
        /// under a uniform load) or `random` subsets at every activemask.
        #[arg(long, value_enum, default_value_t = ConvergenceArg::Converged)]
        convergence: ConvergenceArg,
    },
    /// Describe the GPU (if any) and the embedded PTX.
    Info,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let prefer = if cli.simulator {
        Prefer::Simulator
    } else if cli.gpu {
        Prefer::Gpu
    } else {
        Prefer::Auto
    };
    let result = match cli.command {
        Command::Demo {
            blocks,
            threads,
            seed,
            workers,
            convergence,
        } => demo(prefer, blocks, threads, seed, workers, convergence),
        Command::Info => info(),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warpalloc: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn demo(
    prefer: Prefer,
    blocks: u32,
    threads: u32,
    seed: u64,
    workers: Option<usize>,
    convergence: ConvergenceArg,
) -> Result<ExitCode, HostError> {
    let mut launcher = Launcher::new(ptx::KERNELS_TESTS, prefer)?;
    let workers =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let cfg = launcher.simulator_config();
    cfg.seed = seed;
    cfg.workers = workers.max(1);
    cfg.convergence = match convergence {
        ConvergenceArg::Converged => Convergence::Converged,
        ConvergenceArg::Random => Convergence::Random,
    };
    let total = u64::from(blocks) * u64::from(threads);
    let Ok(total_words) = usize::try_from(total) else {
        eprintln!("warpalloc: {blocks} × {threads} threads do not fit this machine's memory");
        return Ok(ExitCode::FAILURE);
    };
    println!(
        "warpalloc demo: warp-aggregated tickets (activemask, leader, one atomic per group, shfl)"
    );
    println!("  target : {}", launcher.target());
    if !launcher.on_gpu() {
        let policy = match convergence {
            ConvergenceArg::Converged => "converged warps",
            ConvergenceArg::Random => "random activemask subsets",
        };
        let replay = if workers == 1 { ", replayable" } else { "" };
        println!("  schedule: seed {seed:#x}, {workers} worker(s), {policy}{replay}");
    }
    println!("  grid   : {blocks} blocks × {threads} threads = {total} threads");
    let mut counter = launcher.alloc_zeroed::<u32>(1)?;
    let mut groups = launcher.alloc_zeroed::<u32>(1)?;
    let mut out = launcher.alloc_zeroed::<u32>(total_words)?;
    let args = warp_tickets::Args {
        counter: counter.kernel_ptr(),
        groups: groups.kernel_ptr(),
        out: out.kernel_ptr(),
    };
    // SAFETY: `counter` and `groups` are one word each and `out` one word per
    // thread of the grid, all alive until the launch has finished.
    let report = unsafe { launcher.launch((blocks, 1, 1), (threads, 1, 1), args) }?;
    let tickets = launcher.read(&out)?;
    let counter = launcher.read(&counter)?[0];
    let groups = launcher.read(&groups)?[0];

    let mut seen = vec![false; tickets.len()];
    let mut bad = 0u64;
    for &t in &tickets {
        match seen.get_mut(t as usize) {
            Some(s) if !*s => *s = true,
            _ => bad += 1,
        }
    }
    let ok = bad == 0 && u64::from(counter) == total;
    println!(
        "  tickets: {} distinct of {total}, counter = {counter}{}",
        total - bad,
        if ok {
            "  ✓ every thread got a unique ticket"
        } else {
            "  ✗ WRONG"
        }
    );
    println!(
        "  atomics: {groups} fetch_add for {total} threads ({:.1} threads per atomic)",
        total as f64 / f64::from(groups.max(1))
    );
    match report.simulator {
        Some(stats) => println!(
            "  time   : {:.1} ms ({} warps, {} scheduling steps, {} collective arrivals)",
            report.elapsed.as_secs_f64() * 1e3,
            stats.warps,
            stats.steps,
            stats.collectives
        ),
        None => println!(
            "  time   : {:.3} ms (launch to completion)",
            report.elapsed.as_secs_f64() * 1e3
        ),
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn info() -> Result<ExitCode, HostError> {
    println!(
        "embedded PTX: {} ({} kernels: {})",
        ptx::ARCH,
        ptx::KERNEL_NAMES.len(),
        ptx::KERNEL_NAMES.join(", ")
    );
    if !gpu::driver_present() {
        println!("GPU: none ({})", HostError::NoDriver);
        return Ok(ExitCode::SUCCESS);
    }
    match Launcher::new(ptx::KERNELS_TESTS, Prefer::Gpu) {
        Ok(launcher) => {
            if let Target::Gpu { gpu, .. } = launcher.target() {
                let i = gpu.info();
                println!("GPU: {}", launcher.target());
                println!("  resident warps: {}", i.resident_warps());
                println!(
                    "  virtual memory management: {}",
                    if i.vmm_supported {
                        "supported"
                    } else {
                        "NOT supported"
                    }
                );
            }
        }
        Err(e) => println!("GPU: none ({e})"),
    }
    Ok(ExitCode::SUCCESS)
}
