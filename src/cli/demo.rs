//! `warpalloc demo`: the warp-aggregated tickets kernel (activemask, a
//! leader, one atomic per group, shfl) — the pattern at the heart of the
//! allocator — launched and checked.

use std::process::ExitCode;

use warpalloc_host::{HostError, Launcher, Prefer};
use warpalloc_kernels_tests::demo::warp_tickets;
use warpalloc_sim::Convergence;
use warpalloc_tool::ptx;

use super::common::Schedule;

/// Runs the demo.
pub fn demo(
    prefer: Prefer,
    blocks: u32,
    threads: u32,
    schedule: Schedule,
) -> Result<ExitCode, HostError> {
    let mut launcher =
        Launcher::new_with(prefer, |info| ptx::for_capability(info.compute_capability))?;
    schedule.apply(launcher.simulator_config());
    let (seed, workers) = (schedule.seed, schedule.workers.max(1));
    let total = u64::from(blocks) * u64::from(threads);
    // The kernel's tickets and counter are 32-bit: past 2^32 threads they
    // wrap, and a correct run read "WRONG" (a review, 2026-12-07).
    if total > u64::from(u32::MAX) {
        eprintln!(
            "warpalloc: demo: {blocks} × {threads} threads: at most {} (32-bit tickets)",
            u32::MAX
        );
        return Ok(ExitCode::FAILURE);
    }
    let Ok(total_words) = usize::try_from(total) else {
        eprintln!("warpalloc: {blocks} × {threads} threads do not fit this machine's memory");
        return Ok(ExitCode::FAILURE);
    };
    println!(
        "warpalloc demo: warp-aggregated tickets (activemask, leader, one atomic per group, shfl)"
    );
    println!("  target : {launcher}");
    let policy = match schedule.convergence {
        Convergence::Converged => "converged warps",
        Convergence::Random => "random activemask subsets",
    };
    let replay = if workers == 1 { ", replayable" } else { "" };
    println!(
        "  simulator schedule (emulated device only): seed {seed:#x}, {workers} worker(s), \
         {policy}{replay}, compute capability {}.{}",
        schedule.capability.0, schedule.capability.1
    );
    println!("  grid   : {blocks} blocks × {threads} threads = {total} threads");
    let counter = launcher.alloc_zeroed::<u32>(1)?;
    let groups = launcher.alloc_zeroed::<u32>(1)?;
    let out = launcher.alloc_zeroed::<u32>(total_words)?;
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
