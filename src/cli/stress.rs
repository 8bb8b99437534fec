//! `warpalloc stress`: the stress kernels on one heap, each checked on the
//! device (owner-tagged patterns, promises such as alignment) and on the host
//! (no overlap, no double or invalid free, every byte given back). A run that
//! corrupts or loses memory fails with a non-zero exit status.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use warpalloc::{Heap, HeapStats};
use warpalloc_host::HostError;
use warpalloc_host::backing::GRANULE;
use warpalloc_kernels_tests::collections::collections;
use warpalloc_kernels_tests::stress::{
    STATS_WORDS, SWEEP_SIZES, Stats, aligned, bad_input, churn, drain, drain_transfer, fill,
    lifetimes, resize, size_sweep,
};

use super::common::{
    Settings, buffer, bytes, launch, mode_name, rate, read, read_stats, target_name,
};

/// The stress runs, by the name of the PTX kernel each is built around (a
/// run may launch a helper kernel after it: `churn` drains its handoffs with
/// `drain_transfer`, `fill` frees with `drain`).
pub const KERNELS: &[&str] = &[
    "churn",
    "size_sweep",
    "aligned",
    "fill",
    "lifetimes",
    "collections",
    "resize",
    "bad_input",
];

/// What `stress` runs.
#[derive(Clone, Debug, Serialize)]
pub struct StressArgs {
    pub kernels: Vec<String>,
    pub blocks: u32,
    pub threads: u32,
    pub iterations: u32,
    pub max_size: u32,
    pub large_one_in: u32,
    pub seed: u32,
    pub plant_corruption: u32,
    /// `--limit`: the heap's mapped memory capped at this many bytes.
    pub limit: Option<u64>,
    /// `--pool-slabs`: pool mode with this many slabs mapped before launch.
    pub pool_slabs: Option<u32>,
    /// `--spill`: what the limit refuses goes to host memory.
    pub spill: bool,
    /// `--pool-fallback`: a dry pool asks the host.
    pub pool_fallback: bool,
    /// The heap's memory is capped (`--limit`, or pool mode's fixed slabs):
    /// a null is an answer then, not a failure, for every kernel.
    pub capped: bool,
}

/// One kernel's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct KernelReport {
    pub kernel: String,
    pub threads: u64,
    pub allocs: u64,
    pub frees: u64,
    pub nulls: u64,
    pub corrupt: u64,
    pub broken: u64,
    pub double_frees: u64,
    pub invalid_frees: u64,
    /// Slabs the heap put to use and large blocks it handed out for this
    /// kernel: zero means warpalloc served none of its allocations.
    pub heap_traffic: u64,
    /// Allocations still live in the heap after the kernel.
    pub live_after: u64,
    /// The most bytes the kernel's threads held at once (requested sizes;
    /// 0 for kernels that do not count them: collections, resize).
    pub peak_live_bytes: u64,
    /// The heap's peak mapped memory during the kernel.
    pub peak_mapped_bytes: u64,
    /// The heap's peak of device and host memory mapped at once during
    /// the kernel: `peak_mapped_bytes` with `--spill`'s host memory (what
    /// `÷` divides by the live peak; device memory alone made it read
    /// below 1 once spilled — a review, 2026-12-07).
    pub peak_backed_bytes: u64,
    pub seconds: f64,
    pub ops_per_second: f64,
    /// In pool mode, the classes whose mallocs got null during the kernel,
    /// with the slabs they lacked (`HeapStats::pool_shortfall`): "class
    /// 8.0 KiB needed up to 3 more slabs (514 nulls)".
    pub pool_shortfall: Vec<String>,
    /// The heap's snapshot at the kernel's first out-of-memory null, as
    /// printed (`Heap::snapshots`: each kernel is a phase).
    pub out_of_memory: Option<String>,
    /// Bytes of host memory mapped at the kernel's peak (`--spill`).
    pub peak_spilled_bytes: u64,
    pub problems: Vec<String>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct StressReport {
    pub target: String,
    pub mode: String,
    /// The command line and the simulator's schedule.
    pub settings: Settings,
    /// What ran: kernels, grid, rounds, sizes, the kernels' seed, caps.
    pub args: StressArgs,
    pub kernels: Vec<KernelReport>,
    pub peak_mapped_bytes: u64,
    pub peak_in_use_bytes: u64,
    pub rpc_allocs: u64,
    pub rpc_frees: u64,
    pub refusals: u64,
    /// Free granules the region moved to where a run needed them, because
    /// new memory would have been refused.
    pub relocations: u64,
    pub mapped_after_trim: u64,
    pub problems: Vec<String>,
    /// Kernels not run, and why (not failures).
    pub skipped: Vec<String>,
    pub ok: bool,
}

struct Outcome {
    stats: Stats,
    threads: u64,
    elapsed: Duration,
    problems: Vec<String>,
    /// The double and invalid frees the kernel makes on purpose
    /// (`bad_input`); any others are a failure.
    bad_frees: (u64, u64),
}

fn outcome(stats: Stats, threads: u64, elapsed: Duration) -> Outcome {
    Outcome {
        stats,
        threads,
        elapsed,
        problems: Vec::new(),
        bad_frees: (0, 0),
    }
}

/// The problem of a kernel's `nulls` in a heap whose memory is `capped` or
/// not: a heap with room serves every request (the help's promise), so any
/// null with memory uncapped fails the run. `size_sweep` and `bad_input`
/// judge their own nulls (in their words; `bad_input`'s impossible sizes
/// are not counted as nulls).
fn uncapped_nulls(kernel: &str, nulls: u64, capped: bool) -> Option<String> {
    (nulls != 0 && !capped && !matches!(kernel, "size_sweep" | "bad_input"))
        .then(|| format!("{nulls} allocations got null, though the heap's memory is not capped"))
}

fn run_churn(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let slots = (a.blocks * a.threads).clamp(64, 1 << 20);
    let transfer = buffer::<u64>(heap, slots as usize)?;
    let elapsed = launch(
        heap,
        a.blocks,
        a.threads,
        churn::Args {
            stats: stats.kernel_ptr(),
            transfer: transfer.kernel_ptr(),
            slots,
            seed: a.seed,
            iterations: a.iterations,
            max_small: a.max_size,
            large_one_in: a.large_one_in,
        },
    )?;
    launch(
        heap,
        slots.div_ceil(256),
        256,
        drain_transfer::Args {
            stats: stats.kernel_ptr(),
            transfer: transfer.kernel_ptr(),
            slots,
        },
    )?;
    let threads = u64::from(a.blocks * a.threads);
    Ok(outcome(read_stats(heap, &stats)?, threads, elapsed))
}

fn run_sweep(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let blocks = SWEEP_SIZES.div_ceil(a.threads).max(1) * 2;
    let elapsed = launch(
        heap,
        blocks,
        a.threads,
        size_sweep::Args {
            stats: stats.kernel_ptr(),
        },
    )?;
    let mut o = outcome(
        read_stats(heap, &stats)?,
        u64::from(blocks * a.threads),
        elapsed,
    );
    // Every size must be served by a heap with room; a capped one may
    // answer null.
    if o.stats.nulls != 0 && !a.capped {
        o.problems
            .push(format!("{} sizes got no memory", o.stats.nulls));
    }
    Ok(o)
}

fn run_aligned(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let elapsed = launch(
        heap,
        a.blocks,
        a.threads,
        aligned::Args {
            stats: stats.kernel_ptr(),
            seed: a.seed,
        },
    )?;
    Ok(outcome(
        read_stats(heap, &stats)?,
        u64::from(a.blocks * a.threads),
        elapsed,
    ))
}

/// Fill until null or `per_thread` blocks each, check no two blocks overlap,
/// free them all from another warp and block, fill again, free again.
fn run_fill(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let per_thread = 16u32;
    let threads = (a.blocks * a.threads) as usize;
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let ptrs = buffer::<u64>(heap, threads * per_thread as usize)?;
    let sizes = buffer::<u32>(heap, threads * per_thread as usize)?;
    let counts = buffer::<u32>(heap, threads)?;
    let mut elapsed = Duration::ZERO;
    let mut problems = Vec::new();
    for round in 0..2 {
        elapsed += launch(
            heap,
            a.blocks,
            a.threads,
            fill::Args {
                stats: stats.kernel_ptr(),
                ptrs: ptrs.kernel_ptr(),
                sizes: sizes.kernel_ptr(),
                counts: counts.kernel_ptr(),
                per_thread,
                seed: a.seed.wrapping_add(round),
                max_small: a.max_size,
            },
        )?;
        let (p, s, c) = (
            read(heap, &ptrs)?,
            read(heap, &sizes)?,
            read(heap, &counts)?,
        );
        let (base, len) = heap.region();
        let mut blocks = Vec::new();
        for (t, &n) in c.iter().enumerate() {
            for k in 0..n as usize {
                let at = t * per_thread as usize + k;
                blocks.push((p[at], u64::from(s[at])));
            }
        }
        blocks.sort_unstable();
        if let Some(w) = blocks.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
            problems.push(format!(
                "blocks overlap: {:#x}+{} and {:#x}",
                w[0].0, w[0].1, w[1].0
            ));
        }
        if let Some(&(b, n)) = blocks
            .iter()
            .find(|&&(b, n)| b < base || b + n > base + len)
        {
            problems.push(format!("block {b:#x}+{n} outside the heap's region"));
        }
        elapsed += launch(
            heap,
            a.blocks,
            a.threads,
            drain::Args {
                stats: stats.kernel_ptr(),
                ptrs: ptrs.kernel_ptr(),
                sizes: sizes.kernel_ptr(),
                counts: counts.kernel_ptr(),
                per_thread,
                shift: (threads as u32) / 2 + 37,
            },
        )?;
    }
    let mut o = outcome(read_stats(heap, &stats)?, threads as u64, elapsed);
    o.problems = problems;
    Ok(o)
}

fn run_lifetimes(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let elapsed = launch(
        heap,
        a.blocks,
        a.threads,
        lifetimes::Args {
            stats: stats.kernel_ptr(),
            seed: a.seed,
            iterations: a.iterations.saturating_mul(2),
            max_small: a.max_size,
            keep_one_in: 4,
            corrupt_one_in: a.plant_corruption,
        },
    )?;
    let mut o = outcome(
        read_stats(heap, &stats)?,
        u64::from(a.blocks * a.threads),
        elapsed,
    );
    // Planting, a run that found nothing did not show what was asked: it
    // fails, saying why (one block in N is planted at random, so an N near
    // the allocations may plant none; it passed before — a review,
    // 2026-12-07).
    if a.plant_corruption != 0 && o.stats.corrupt == 0 {
        o.problems.push(format!(
            "--plant-corruption {}: no corrupt block found in {} allocations (one in {} \
             is planted at random: none may have been)",
            a.plant_corruption, o.stats.allocs, a.plant_corruption
        ));
    }
    Ok(o)
}

fn run_collections(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let elapsed = launch(
        heap,
        a.blocks,
        a.threads,
        collections::Args {
            stats: stats.kernel_ptr(),
            n: 200,
        },
    )?;
    let mut s = read_stats(heap, &stats)?;
    // `collections` counts finished threads in `allocs`; its frees are the
    // collections' drops.
    let threads = u64::from(a.blocks * a.threads);
    let mut o = outcome(s, threads, elapsed);
    if s.allocs != threads {
        o.problems
            .push(format!("{} of {threads} threads finished", s.allocs));
    }
    s.frees = s.allocs;
    o.stats = s;
    Ok(o)
}

fn run_resize(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let elapsed = launch(
        heap,
        a.blocks,
        a.threads,
        resize::Args {
            stats: stats.kernel_ptr(),
            max: 64 << 10,
        },
    )?;
    Ok(outcome(
        read_stats(heap, &stats)?,
        u64::from(a.blocks * a.threads),
        elapsed,
    ))
}

/// Bad input on one warp (`bad_input`): nulls for impossible sizes and
/// alignments; for each lane that got its block, an invalid free of a
/// pointer into its middle, an invalid `realloc` of that pointer and a
/// double free; and on every lane an invalid free of a pointer the heap
/// never handed out. The heap must count exactly those, corrupt nothing
/// (the block's pattern, and the foreign memory, read back), and — where
/// they are the heap's first bad frees — its error record must name the
/// kernel and a lane of the warp: on a GPU, the kernel's name comes from
/// the device (`kernel_ended`). One warp, whatever `--blocks` and
/// `--threads` say: across warps, a block freed here can be handed to
/// another warp before this one's double free, which then frees that
/// warp's live block — as in every allocator without a tag per
/// allocation — and its checks would fail; the kernel's `syncwarp` rules
/// that out within a warp.
fn run_bad_input(heap: &mut Heap, a: &StressArgs) -> Result<Outcome, HostError> {
    let (blocks, lanes) = (1u32, 32u32);
    let stats = buffer::<u64>(heap, STATS_WORDS)?;
    let foreign = buffer::<u64>(heap, 8)?;
    let first_before = heap.stats()?.device.first_bad_address;
    let elapsed = launch(
        heap,
        blocks,
        lanes,
        bad_input::Args {
            stats: stats.kernel_ptr(),
            foreign: foreign.kernel_ptr().addr() as u64,
        },
    )?;
    let mut s = read_stats(heap, &stats)?;
    let threads = u64::from(blocks * lanes);
    // `bad_input` counts the threads that got (and at last freed) their
    // block in `frees`, and each malloc it made of them.
    s.allocs = s.frees;
    let mut o = outcome(s, threads, elapsed);
    // Per thread with a block: a double free, and invalid frees of `p + 8`,
    // its `realloc` and `p + 16`; per thread: the foreign pointer's.
    o.bad_frees = (s.frees, 3 * s.frees + threads);
    if s.frees + s.nulls != threads {
        o.problems.push(format!(
            "{} of {threads} threads finished",
            s.frees + s.nulls
        ));
    }
    // A heap with room serves every block; a capped one may answer null.
    if s.nulls != 0 && !a.capped {
        o.problems
            .push(format!("{} threads got no memory", s.nulls));
    }
    if read(heap, &foreign)?.iter().any(|&w| w != 0) {
        o.problems
            .push("memory outside the heap was written".to_string());
    }
    let e = heap.stats()?.device;
    if first_before == 0 {
        let kernel = e.first_bad_kernel.map(|k| k.to_string());
        if kernel.as_deref() != Some("bad_input")
            || e.first_bad_block >= blocks
            || e.first_bad_thread >= lanes
        {
            o.problems.push(format!(
                "the error record names block {} thread {} of kernel {kernel:?}, not a thread of \
                 `bad_input`'s grid ({blocks} block of {lanes})",
                e.first_bad_block, e.first_bad_thread
            ));
        }
    }
    Ok(o)
}

/// Runs the stress kernels on `heap` and reports; `progress` shows a bar.
pub fn stress(
    heap: &mut Heap,
    a: &StressArgs,
    settings: Settings,
    progress: bool,
) -> Result<StressReport, HostError> {
    let bar = if progress {
        let bar = ProgressBar::new(a.kernels.len() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut kernels = Vec::new();
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    // The run's peaks: each kernel's start over (`reset_peaks`).
    let (mut run_peak, mut run_peak_in_use) = (0u64, 0u64);
    for name in &a.kernels {
        bar.set_message(name.clone());
        // Under any limit: with `--spill` too, whose host memory may be
        // refused (`spill_floor`), and then an infallible allocation
        // ends the process with no report (a review, 2026-12-07).
        if name == "collections" && (a.capped || a.limit.is_some()) {
            // Infallible collections end the program when an allocation
            // fails (Rust's `handle_alloc_error`: the process aborts in the
            // simulator, the kernel traps on a GPU): under a cap they would.
            skipped.push(
                "collections: its Vec, Box and String allocate infallibly, and a failed \
                 infallible allocation ends the program (a trap on the GPU, an abort here); \
                 not run under --limit (with or without --spill) or --pool-slabs without \
                 --pool-fallback"
                    .to_string(),
            );
            bar.inc(1);
            continue;
        }
        // Each kernel starts on a trimmed heap: the empty slabs an earlier
        // kernel left published go back (to the pool, or unmapped), so a
        // kernel that allocates must take slabs from the provider, which
        // is counted exactly, and its heap traffic shows that warpalloc
        // served it. Reviving an empty slab of one's own class is counted
        // only when the lock found no reference at all (another class's
        // scan holding one for a moment hides it: see `Traffic`), so a
        // kernel that only revived slabs left by the one before could show
        // none (`lifetimes` under '--limit 4194304 --convergence random
        // --seed 32 --workers 1', and `fill` at other seeds).
        heap.trim()?;
        // Each kernel a phase: its own peaks and its own first
        // out-of-memory snapshot.
        heap.mark_phase(name)?;
        let before = heap.stats()?;
        let result = match name.as_str() {
            "churn" => run_churn(heap, a),
            "size_sweep" => run_sweep(heap, a),
            "aligned" => run_aligned(heap, a),
            "fill" => run_fill(heap, a),
            "lifetimes" => run_lifetimes(heap, a),
            "collections" => run_collections(heap, a),
            "resize" => run_resize(heap, a),
            "bad_input" => run_bad_input(heap, a),
            other => {
                problems.push(format!(
                    "unknown kernel {other:?} (known: {})",
                    KERNELS.join(", ")
                ));
                bar.inc(1);
                continue;
            }
        };
        let o = result?;
        let bad_frees = o.bad_frees;
        let after = heap.stats()?;
        // The kernel's own nulls by class: the pool's shortfall during it.
        let mut during = after;
        for (now, was) in during.classes.nulls.iter_mut().zip(before.classes.nulls) {
            *now = now.saturating_sub(was);
        }
        let pool_shortfall: Vec<String> = during
            .pool_shortfall()
            .iter()
            .map(|s| s.to_string())
            .collect();
        // The phase's (a kernel named twice runs as two phases of its name:
        // the last is this run's).
        let out_of_memory = heap
            .snapshots()?
            .into_iter()
            .rev()
            .find(|s| s.phase == *name && s.moment == warpalloc::Moment::FirstOutOfMemory)
            .map(|s| s.to_string());
        let traffic = after.traffic.since(&before.traffic).served();
        let peak_mapped_bytes = after.region.peak_mapped_bytes;
        let peak_spilled_bytes = after.spill.peak_bytes;
        let peak_backed_bytes = after.region.peak_backed_bytes;
        run_peak = run_peak.max(after.region.peak_mapped_bytes);
        run_peak_in_use = run_peak_in_use.max(after.region.peak_in_use_bytes);
        let (before, live_after, after) =
            (before.device, after.live.live_allocations(), after.device);
        let s = o.stats;
        let mut report = KernelReport {
            kernel: name.clone(),
            threads: o.threads,
            allocs: s.allocs,
            frees: s.frees,
            nulls: s.nulls,
            corrupt: s.corrupt,
            broken: s.broken,
            double_frees: after.double_frees - before.double_frees,
            invalid_frees: after.invalid_frees - before.invalid_frees,
            heap_traffic: traffic,
            live_after,
            peak_live_bytes: s.peak_live_bytes,
            peak_mapped_bytes,
            seconds: o.elapsed.as_secs_f64(),
            pool_shortfall,
            out_of_memory,
            peak_spilled_bytes,
            peak_backed_bytes,
            ops_per_second: if o.elapsed.is_zero() {
                0.0
            } else {
                s.allocs as f64 / o.elapsed.as_secs_f64()
            },
            problems: o.problems,
        };
        report
            .problems
            .extend(uncapped_nulls(name, s.nulls, a.capped));
        if s.corrupt != 0 {
            // `1 << 63 | owner << 32 | seq`, 0 when the kernel records none.
            let (owner, seq) = ((s.first_bad >> 32) & 0x7fff_ffff, s.first_bad & 0xffff_ffff);
            let first = match s.first_bad {
                0 => "the kernel records no first".to_owned(),
                _ if seq == 0xffff_ffff => format!(
                    "first: a block handed over by a thread ≡ {owner} mod 65 536 whose tag \
                     named another owner"
                ),
                _ => format!("first: owner {owner}, allocation {seq}"),
            };
            report.problems.push(format!(
                "{} blocks failed their pattern check ({first})",
                s.corrupt
            ));
        }
        if s.broken != 0 {
            report.problems.push(format!(
                "{} broken promises (alignment, usable size, bad-input results)",
                s.broken
            ));
        }
        if s.allocs == 0 {
            // Every malloc null (a cap that leaves no room), or none made:
            // nothing of warpalloc's was stressed (a review, 2026-12-07:
            // it printed OK).
            report
                .problems
                .push("no allocation served: the kernel stressed nothing".to_owned());
        } else if traffic == 0 {
            report.problems.push(format!(
                "{} allocations but no heap traffic: warpalloc served none of them",
                s.allocs
            ));
        }
        // `churn` draws a large block one time in `large_one_in`: none in
        // twenty times that many allocations (a chance of e^-20) says its
        // large path went unstressed.
        if name == "churn"
            && a.large_one_in != 0
            && !a.capped
            && s.allocs / u64::from(a.large_one_in) >= 20
            && s.large == 0
        {
            report.problems.push(format!(
                "no large block in {} allocations (one in {} drawn)",
                s.allocs, a.large_one_in
            ));
        }
        if s.live_bytes != 0 {
            report.problems.push(format!(
                "the kernel's threads still hold {} bytes by their own count",
                s.live_bytes
            ));
        }
        if live_after != 0 {
            report.problems.push(format!(
                "{live_after} allocations still live in the heap after the kernel"
            ));
        }
        if s.allocs != s.frees {
            report
                .problems
                .push(format!("{} allocations but {} frees", s.allocs, s.frees));
        }
        if (report.double_frees, report.invalid_frees) != bad_frees {
            report.problems.push(format!(
                "the heap counted {} double and {} invalid frees ({} and {} made on purpose)",
                report.double_frees, report.invalid_frees, bad_frees.0, bad_frees.1
            ));
        }
        if progress && !std::io::stderr().is_terminal() {
            // No bar where stderr is a log (CI): a line per kernel instead.
            eprintln!(
                "stress: {} {} in {:.1} s",
                report.kernel,
                if report.problems.is_empty() {
                    "ok"
                } else {
                    "FAILED"
                },
                report.seconds
            );
        }
        kernels.push(report);
        bar.inc(1);
    }
    bar.finish_and_clear();

    let before_trim: HeapStats = heap.stats()?;
    let held = before_trim.live.empty_slabs + before_trim.live.pool_slabs;
    if before_trim.region.in_use_bytes != held * GRANULE {
        problems.push(format!(
            "after every kernel freed everything, {} are in use beyond the {held} empty or pooled slabs",
            bytes(before_trim.region.in_use_bytes.saturating_sub(held * GRANULE))
        ));
    }
    heap.trim()?;
    let after_trim = heap.stats()?;
    let pooled = match heap.mode() {
        warpalloc::Mode::Pool { .. } => {
            (after_trim.live.pool_slabs + after_trim.live.empty_slabs) * GRANULE
        }
        warpalloc::Mode::Rpc => 0,
    };
    if after_trim.region.mapped_bytes != pooled {
        problems.push(format!(
            "after trim {} stay mapped (expected {})",
            bytes(after_trim.region.mapped_bytes),
            bytes(pooled)
        ));
    }
    // A run whose kernels were all skipped stressed nothing: no pass
    // (`--kernels collections --limit 64MiB` said "OK"; a review,
    // 2026-12-07).
    if kernels.is_empty() {
        problems.push(format!(
            "no kernel ran: every kernel asked for was skipped ({})",
            skipped.len()
        ));
    }
    let ok = problems.is_empty() && kernels.iter().all(|k| k.problems.is_empty());
    Ok(StressReport {
        target: target_name(heap),
        mode: mode_name(heap.mode()),
        settings,
        args: a.clone(),
        kernels,
        peak_mapped_bytes: run_peak.max(after_trim.region.peak_mapped_bytes),
        peak_in_use_bytes: run_peak_in_use.max(after_trim.region.peak_in_use_bytes),
        rpc_allocs: after_trim.rpc.allocs,
        rpc_frees: after_trim.rpc.frees,
        refusals: after_trim.region.refusals.iter().sum(),
        relocations: after_trim.region.relocations,
        mapped_after_trim: after_trim.region.mapped_bytes,
        problems,
        skipped,
        ok,
    })
}

/// Prints a report as a table.
pub fn print(report: &StressReport) {
    println!("warpalloc stress — {}", report.target);
    println!("mode: {}", report.mode);
    println!(
        "{:<12} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7} {:>10} {:>12}  result",
        "kernel",
        "threads",
        "allocs",
        "nulls",
        "corrupt",
        "broken",
        "traffic",
        "peak live",
        "peak mapped",
        "÷",
        "time",
        "allocs/s"
    );
    for k in &report.kernels {
        println!(
            "{:<12} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7} {:>9.1}ms {:>12}  {}",
            k.kernel,
            k.threads,
            k.allocs,
            k.nulls,
            k.corrupt,
            k.broken,
            k.heap_traffic,
            bytes(k.peak_live_bytes),
            bytes(k.peak_mapped_bytes),
            if k.peak_live_bytes == 0 {
                "-".to_string()
            } else {
                format!(
                    "{:.2}",
                    k.peak_backed_bytes as f64 / k.peak_live_bytes as f64
                )
            },
            k.seconds * 1e3,
            rate(k.ops_per_second),
            if k.problems.is_empty() {
                "ok".to_string()
            } else {
                format!("FAIL: {}", k.problems.join("; "))
            }
        );
    }
    println!(
        "heap: peak mapped {}, peak in use {}, RPC {} allocs / {} frees, {} refusals, {} granules \
         moved, {} mapped after trim",
        bytes(report.peak_mapped_bytes),
        bytes(report.peak_in_use_bytes),
        report.rpc_allocs,
        report.rpc_frees,
        report.refusals,
        report.relocations,
        bytes(report.mapped_after_trim)
    );
    for k in &report.kernels {
        if !k.pool_shortfall.is_empty() {
            // The largest shortfalls first; the JSON keeps every class.
            const SHOWN: usize = 6;
            let more = k.pool_shortfall.len().saturating_sub(SHOWN);
            println!(
                "{}: the pool ran dry: {}{}; raise --pool-slabs or run in RPC mode",
                k.kernel,
                k.pool_shortfall[..k.pool_shortfall.len().min(SHOWN)].join(", "),
                if more == 0 {
                    String::new()
                } else {
                    format!(" and {more} more classes")
                }
            );
        }
        if let Some(snapshot) = &k.out_of_memory {
            println!("{}: the heap at its first out-of-memory null:", k.kernel);
            for line in snapshot.lines() {
                println!("    {line}");
            }
        }
        if k.peak_spilled_bytes != 0 {
            println!(
                "{}: {} spilled to host memory at the peak",
                k.kernel,
                bytes(k.peak_spilled_bytes)
            );
        }
    }
    for k in &report.skipped {
        println!("skipped: {k}");
    }
    for p in &report.problems {
        println!("FAIL: {p}");
    }
    println!(
        "{}",
        if report.ok {
            "stress: OK — no corruption, no lost memory"
        } else {
            "stress: FAILED"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A null with memory uncapped fails every kernel that does not judge
    /// its own (the first GPU run's churn printed "OK" with 148 080 nulls);
    /// a capped heap may answer null.
    #[test]
    fn a_null_with_memory_uncapped_is_a_problem() {
        for kernel in KERNELS {
            let own = matches!(*kernel, "size_sweep" | "bad_input");
            assert_eq!(
                uncapped_nulls(kernel, 148_080, false).is_some(),
                !own,
                "{kernel}"
            );
            assert_eq!(uncapped_nulls(kernel, 148_080, true), None, "{kernel}");
            assert_eq!(uncapped_nulls(kernel, 0, false), None, "{kernel}");
        }
    }
}
