//! The SIMT collectives in the CPU warp simulator, each checked against a plain
//! reference computation: full, partial and divergent masks, partial last
//! warps, many blocks, many seeds, every convergence policy and both fiber
//! kinds. A failure names the seed; `WARPALLOC_SIM_SEED=<seed>` replays it.

use warpalloc_device::kernel::Kernel;
use warpalloc_device::sim::{Convergence, Fibers, LaunchConfig, seeds};
use warpalloc_kernels_tests::simt::{
    WORDS, simt_ballot, simt_match_any, simt_reduce_or, simt_shfl, simt_sleep, simt_syncwarp,
};
use warpalloc_kernels_tests::{input, nth_lane};

/// Words nobody wrote.
const POISON: u32 = 0xDEAD_BEEF;

/// One thread of a launch, as the reference sees it.
#[derive(Clone, Copy, Debug)]
struct Thread {
    gtid: u32,
    lane: u32,
    /// Global warp index.
    warp: u32,
    /// Lanes of the thread's warp that exist.
    present: u32,
    /// Global thread id of lane 0 of the warp.
    base: u32,
}

fn threads(cfg: &LaunchConfig) -> Vec<Thread> {
    let tpb = cfg.threads_per_block() as u32;
    let wpb = cfg.warps_per_block() as u32;
    let mut all = Vec::new();
    for b in 0..cfg.blocks() as u32 {
        for t in 0..tpb {
            let w = t / 32;
            let count = (tpb - w * 32).min(32);
            all.push(Thread {
                gtid: b * tpb + t,
                lane: t % 32,
                warp: b * wpb + w,
                present: if count == 32 {
                    u32::MAX
                } else {
                    (1 << count) - 1
                },
                base: b * tpb + w * 32,
            });
        }
    }
    all
}

fn partial_mask(seed: u32, t: &Thread, k: u32) -> u32 {
    let m = input(seed, t.warp, k) & t.present;
    if m == 0 {
        t.present & t.present.wrapping_neg()
    } else {
        m
    }
}

/// The bits `j` of `mask` for which `f(gtid of lane j)` holds.
fn bits(t: &Thread, mask: u32, f: impl Fn(u32) -> bool) -> u32 {
    (0..32)
        .filter(|&j| mask & (1 << j) != 0 && f(t.base + j))
        .fold(0, |acc, j| acc | (1 << j))
}

/// The shapes every collective runs on: one warp; partial last warps in 2D
/// blocks over a 2D grid; a 4-lane last warp; many blocks.
fn shapes() -> Vec<LaunchConfig> {
    vec![
        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
        LaunchConfig::new((3, 2, 1), (40, 2, 1)),
        LaunchConfig::new((2, 1, 1), (100, 1, 1)),
        LaunchConfig::new((24, 1, 1), (64, 1, 1)),
    ]
}

struct Run {
    cfg: LaunchConfig,
    seed: u32,
    out: Vec<u32>,
}

impl Run {
    fn word(&self, t: &Thread, k: usize) -> u32 {
        self.out[t.gtid as usize * WORDS + k]
    }

    #[track_caller]
    fn expect(&self, t: &Thread, k: usize, want: u32, what: &str) {
        let got = self.word(t, k);
        assert_eq!(
            got,
            want,
            "{what}: thread {} (warp {}, lane {}) word {k}: got {got:#010x}, want {want:#010x} \
             [seed {:#x}, grid {:?}, block {:?}; replay with WARPALLOC_SIM_SEED={:#x}]",
            t.gtid,
            t.warp,
            t.lane,
            self.cfg.seed,
            self.cfg.grid_dim,
            self.cfg.block_dim,
            self.cfg.seed
        );
    }
}

/// Launches `make(out, seed)` over every shape and seed under `tune`, and
/// checks each run with `check`.
fn sweep<K: Kernel>(
    name: &str,
    count: usize,
    shapes: &[LaunchConfig],
    tune: impl Fn(LaunchConfig) -> LaunchConfig,
    make: impl Fn(*mut u32, u32) -> K,
    check: impl Fn(&Run, &[Thread]),
) {
    for seed in seeds(name.len() as u64 * 0x1000 + count as u64, count) {
        for shape in shapes {
            let cfg = tune(shape.clone().seed(seed));
            let all = threads(&cfg);
            let mut out = vec![POISON; all.len() * WORDS];
            let kernel = make(out.as_mut_ptr(), seed as u32);
            // SAFETY: `out` holds WORDS words per thread of the grid and
            // outlives the launch.
            if let Err(e) = unsafe { kernel.simulate(&cfg) } {
                panic!("{name}: {e}");
            }
            check(
                &Run {
                    cfg,
                    seed: seed as u32,
                    out,
                },
                &all,
            );
        }
    }
}

fn check_ballot(run: &Run, all: &[Thread]) {
    let s = run.seed;
    let pred = |k: u32| move |g: u32| input(s, g, k) & 1 != 0;
    for t in all {
        run.expect(t, 0, bits(t, t.present, pred(0)), "ballot, full warp");

        let part = partial_mask(s, t, 1);
        let want = if part & (1 << t.lane) != 0 {
            bits(t, part, pred(1))
        } else {
            POISON
        };
        run.expect(t, 1, want, "ballot, partial mask");

        let left = partial_mask(s, t, 2);
        let want = if left & (1 << t.lane) != 0 {
            bits(t, left, pred(2))
        } else {
            bits(t, t.present & !left, pred(3))
        };
        run.expect(t, 2, want, "ballot, divergent branches");

        let here = run.word(t, 4);
        assert!(
            here & (1 << t.lane) != 0 && here & !t.present == 0,
            "activemask {here:#010x} of thread {} must contain lane {} and only lanes of {:#010x} [seed {:#x}]",
            t.gtid,
            t.lane,
            t.present,
            run.cfg.seed
        );
        for j in 0..32 {
            if here & (1 << j) != 0 {
                let other = &all[(t.base + j) as usize];
                run.expect(
                    other,
                    4,
                    here,
                    "activemask: every lane of a group gets the same mask",
                );
            }
        }
        run.expect(t, 3, bits(t, here, pred(4)), "ballot(activemask())");
        if run.cfg.convergence == Convergence::Converged {
            run.expect(t, 4, t.present, "activemask of a converged warp");
        }
    }
}

fn check_match_any(run: &Run, all: &[Thread]) {
    let s = run.seed;
    for t in all {
        let key = |g: u32| input(s, g, 0) % 4;
        let mine = key(t.gtid);
        run.expect(
            t,
            0,
            bits(t, t.present, |g| key(g) == mine),
            "match_any_u32",
        );

        let key64 = |g: u32| (u64::from(input(s, g, 1) % 3) << 32) | 0x5555_5555;
        let mine = key64(t.gtid);
        run.expect(
            t,
            1,
            bits(t, t.present, |g| key64(g) == mine),
            "match_any_u64 (high halves differ)",
        );

        let part = partial_mask(s, t, 2);
        let want = if part & (1 << t.lane) != 0 {
            let key = |g: u32| input(s, g, 3) % 3;
            let mine = key(t.gtid);
            bits(t, part, |g| key(g) == mine)
        } else {
            POISON
        };
        run.expect(t, 2, want, "match_any_u32, partial mask");
    }
}

fn check_shfl(run: &Run, all: &[Thread]) {
    let s = run.seed;
    for t in all {
        let src = nth_lane(t.present, input(s, t.gtid, 0) % t.present.count_ones());
        let from = t.base + src;
        run.expect(t, 0, input(s, from, 1), "shfl_u32");
        run.expect(t, 1, input(s, from, 3), "shfl_u64, low half");
        run.expect(t, 2, input(s, from, 2), "shfl_u64, high half");
        run.expect(t, 3, from * WORDS as u32, "shfl_ptr");

        let part = partial_mask(s, t, 4);
        if part & (1 << t.lane) != 0 {
            let src = nth_lane(part, input(s, t.gtid, 5) % part.count_ones());
            run.expect(t, 4, input(s, t.base + src, 6), "shfl_u32, partial mask");
            let lead = part.trailing_zeros();
            run.expect(
                t,
                5,
                input(s, t.base + lead, 7),
                "broadcast from the leader",
            );
        } else {
            run.expect(t, 4, POISON, "shfl, non-member");
            run.expect(t, 5, POISON, "broadcast, non-member");
        }
    }
}

fn check_syncwarp(run: &Run, all: &[Thread]) {
    let s = run.seed;
    for t in all {
        let n = t.present.count_ones();
        run.expect(
            t,
            0,
            input(s, t.base + (t.lane + 1) % n, 0),
            "syncwarp, full warp",
        );
        let part = partial_mask(s, t, 1);
        let want = if part & (1 << t.lane) != 0 {
            let rank = (part & ((1 << t.lane) - 1)).count_ones();
            let next = nth_lane(part, (rank + 1) % part.count_ones());
            input(s, t.base + next, 2)
        } else {
            POISON
        };
        run.expect(t, 1, want, "syncwarp, partial mask");
    }
}

/// A way to run a launch: its name and how it changes the configuration.
type Policy = (&'static str, fn(LaunchConfig) -> LaunchConfig);

fn policies() -> Vec<Policy> {
    vec![
        ("random", |c| c),
        ("converged", |c| c.convergence(Convergence::Converged)),
        ("parallel", |c| c.workers(2)),
    ]
}

#[test]
fn ballot_matches_reference() {
    for (policy, tune) in policies() {
        eprintln!("ballot: {policy}");
        sweep(
            "ballot",
            12,
            &shapes(),
            tune,
            |out, seed| simt_ballot::Args { out, seed },
            check_ballot,
        );
    }
}

#[test]
fn match_any_matches_reference() {
    for (_, tune) in policies() {
        sweep(
            "match_any",
            12,
            &shapes(),
            tune,
            |out, seed| simt_match_any::Args { out, seed },
            check_match_any,
        );
    }
}

fn check_reduce_or(run: &Run, all: &[Thread]) {
    let s = run.seed;
    for t in all {
        let key = |g: u32| input(s, g, 0) % 3;
        let mine = key(t.gtid);
        run.expect(
            t,
            0,
            bits(t, t.present, |g| key(g) == mine),
            "reduce_or of each lane's bit over its match_any group",
        );

        let part = partial_mask(s, t, 1);
        let want = if part & (1 << t.lane) != 0 {
            let key = |g: u32| input(s, g, 2) % 3;
            let mine = key(t.gtid);
            (0..32)
                .filter(|&j| part & (1 << j) != 0 && key(t.base + j) == mine)
                .fold(0, |acc, j| acc | input(s, t.base + j, 3))
        } else {
            POISON
        };
        run.expect(t, 1, want, "reduce_or over a partial mask's groups");
    }
}

/// `reduce_or` from several groups of a warp at once (a free's combining),
/// by `redux.sync` (compute capability 8.0 and later) and by shuffles
/// (7.5): each group gets its own OR (a review, 2026-12-08: the only test
/// had one group calling).
#[test]
fn reduce_or_per_group_matches_reference() {
    for (policy, tune) in policies() {
        for capability in [(7, 5), (9, 0)] {
            eprintln!("reduce_or: {policy}, {capability:?}");
            sweep(
                "reduce_or",
                8,
                &shapes(),
                |c| tune(c).capability(capability.0, capability.1),
                |out, seed| simt_reduce_or::Args { out, seed },
                check_reduce_or,
            );
        }
    }
}

#[test]
fn shfl_matches_reference() {
    for (_, tune) in policies() {
        sweep(
            "shfl",
            12,
            &shapes(),
            tune,
            |out, seed| simt_shfl::Args { out, seed },
            check_shfl,
        );
    }
}

#[test]
fn syncwarp_orders_memory_between_lanes() {
    for (_, tune) in policies() {
        for seed in seeds(0x5157, 12) {
            for shape in shapes() {
                let cfg = tune(shape.seed(seed));
                let all = threads(&cfg);
                let mut out = vec![POISON; all.len() * WORDS];
                let mut scratch = vec![0u32; all.len()];
                let args = simt_syncwarp::Args {
                    out: out.as_mut_ptr(),
                    scratch: scratch.as_mut_ptr(),
                    seed: seed as u32,
                };
                // SAFETY: `out` and `scratch` are sized for the grid and
                // outlive the launch.
                if let Err(e) = unsafe { args.simulate(&cfg) } {
                    panic!("syncwarp: {e}");
                }
                check_syncwarp(
                    &Run {
                        cfg,
                        seed: seed as u32,
                        out,
                    },
                    &all,
                );
            }
        }
    }
}

#[test]
fn sleep_and_clock() {
    let cfg = LaunchConfig::new((2, 1, 1), (48, 1, 1));
    let all = threads(&cfg);
    let mut out = vec![POISON; all.len() * WORDS];
    let args = simt_sleep::Args {
        out: out.as_mut_ptr(),
        rounds: 6,
    };
    // SAFETY: `out` is sized for the grid and outlives the launch.
    unsafe { args.simulate(&cfg) }.unwrap_or_else(|e| panic!("{e}"));
    let run = Run { cfg, seed: 0, out };
    for t in &all {
        run.expect(t, 0, 1, "clock monotonic across sleeps");
        run.expect(t, 1, t.lane, "lane id");
        run.expect(t, 2, t.present, "warp mask");
    }
}

#[test]
fn threads_as_fibers_give_the_same_results() {
    // The OS-thread fibers (what Miri runs) on a small grid.
    sweep(
        "ballot-threads",
        2,
        &shapes()[..2],
        |c| c.fibers(Fibers::Threads),
        |out, seed| simt_ballot::Args { out, seed },
        check_ballot,
    );
}

/// `kernel!` takes `mut` parameters (and a trailing comma): the body may
/// change them, the launch's copies are what each thread starts from.
#[test]
fn kernels_take_mut_parameters() {
    use warpalloc_kernels_tests::simt::simt_countdown;
    let cfg = LaunchConfig::linear(1, 3);
    let mut out = vec![POISON; 3 * WORDS];
    let args = simt_countdown::Args {
        out: out.as_mut_ptr(),
        n: 10,
        step: 3,
    };
    // SAFETY: `out` has `WORDS` words per thread and outlives the launch.
    unsafe { args.simulate(&cfg) }.expect("launch");
    for t in 0..3 {
        assert_eq!(out[t * WORDS..t * WORDS + 2], [4, 4], "thread {t}");
    }
    assert_eq!((args.n, args.step), (10, 3), "the launch's copy changed");
}
