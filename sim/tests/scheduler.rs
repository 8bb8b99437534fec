//! The simulator's scheduler: determinism, the convergence model, misuse and
//! deadlock reports, the watchdog, launch validation and parallel workers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use warpalloc_sim::{
    Convergence, Fibers, LaunchConfig, SimErrorKind, Timing, activemask, ballot, block_dim,
    block_idx, clock, grid_dim, in_launch, lane_id, launch, match_any, reduce_or, shfl,
    switch_point, syncwarp, thread_idx, warp_id,
};

fn gtid() -> u64 {
    let (bx, _, _) = block_idx();
    let (dx, _, _) = block_dim();
    u64::from(bx) * u64::from(dx) + u64::from(thread_idx().0)
}

/// The order in which lanes pass switch points, as a fingerprint.
fn schedule_fingerprint(seed: u64) -> Vec<u32> {
    let order = Mutex::new(Vec::new());
    let cfg = LaunchConfig::linear(2, 64).seed(seed);
    launch(&cfg, || {
        for _ in 0..4 {
            switch_point();
            order.lock().unwrap().push(gtid() as u32);
        }
        let mask = activemask();
        ballot(mask, true);
    })
    .unwrap();
    order.into_inner().unwrap()
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn one_worker_replays_a_seed_exactly() {
    assert_eq!(schedule_fingerprint(11), schedule_fingerprint(11));
    assert_ne!(schedule_fingerprint(11), schedule_fingerprint(12));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn indices_and_dims_reach_every_lane() {
    let seen = Mutex::new(Vec::new());
    let cfg = LaunchConfig::new((2, 3, 1), (5, 4, 2));
    let stats = launch(&cfg, || {
        assert!(in_launch());
        let t = thread_idx();
        let d = block_dim();
        let linear = t.0 + d.0 * (t.1 + d.1 * t.2);
        assert_eq!(lane_id(), linear % 32);
        assert_eq!(warp_id(), linear / 32);
        assert_eq!(grid_dim(), (2, 3, 1));
        seen.lock().unwrap().push((block_idx(), t));
    })
    .unwrap();
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 6 * 40);
    assert_eq!(stats.lanes, 240);
    assert_eq!(stats.warps, 6 * 2);
    assert_eq!(stats.blocks, 6);
    assert!(!in_launch());
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn random_convergence_yields_singletons_and_whole_warps() {
    let sizes = Mutex::new(Vec::new());
    for seed in 0..8 {
        let cfg = LaunchConfig::linear(1, 32).seed(seed);
        launch(&cfg, || {
            let mask = activemask();
            if lane_id() == mask.trailing_zeros() {
                sizes.lock().unwrap().push(mask.count_ones());
            }
        })
        .unwrap();
    }
    let sizes = sizes.into_inner().unwrap();
    assert!(sizes.contains(&1), "no singleton group in {sizes:?}");
    assert!(
        sizes.iter().any(|&s| s > 1),
        "no group larger than one lane in {sizes:?}"
    );
    assert_eq!(sizes.iter().sum::<u32>(), 8 * 32);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn converged_warps_see_the_whole_warp() {
    for seed in 0..4 {
        let cfg = LaunchConfig::linear(2, 48)
            .seed(seed)
            .convergence(Convergence::Converged);
        launch(&cfg, || {
            let present = if warp_id() == 0 { u32::MAX } else { 0xffff };
            assert_eq!(activemask(), present);
        })
        .unwrap();
    }
}

#[test]
fn converged_policy_does_not_starve_a_parked_lane() {
    // Lane 0 spins until lane 1 — parked in activemask — sets a flag. A
    // lockstep-only policy would wait for lane 0 to park too: forever.
    let flag = AtomicU32::new(0);
    let cfg = LaunchConfig::linear(1, 2)
        .convergence(Convergence::Converged)
        .max_steps(100_000);
    launch(&cfg, || {
        if lane_id() == 0 {
            while flag.load(Ordering::Acquire) == 0 {
                switch_point();
            }
        } else {
            let _ = activemask();
            flag.store(1, Ordering::Release);
        }
    })
    .unwrap();
}

#[test]
fn lanes_may_pass_another_collective_first() {
    // Legal on Volta: lanes 0..16 ballot among themselves before the whole
    // warp's ballot, at which lanes 16..32 already wait.
    for seed in 0..if cfg!(miri) { 2 } else { 16 } {
        let cfg = LaunchConfig::linear(1, 32).seed(seed);
        launch(&cfg, || {
            if lane_id() < 16 {
                assert_eq!(ballot(0xffff, true), 0xffff);
            }
            assert_eq!(ballot(u32::MAX, lane_id().is_multiple_of(2)), 0x5555_5555);
            syncwarp(u32::MAX);
        })
        .unwrap();
    }
}

#[test]
fn different_call_sites_with_one_mask_deadlock_and_name_both() {
    let cfg = LaunchConfig::linear(1, 32);
    let first = line!() + 3;
    let err = launch(&cfg, || {
        if lane_id() == 0 {
            shfl(u32::MAX, 1, 0);
        } else {
            shfl(u32::MAX, 2, 0);
        }
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err.kind, SimErrorKind::Deadlock { .. }), "{text}");
    assert!(text.contains("WARPALLOC_SIM_SEED="), "{text}");
    let site_a = format!("{}:{}", file!(), first);
    let site_b = format!("{}:{}", file!(), first + 2);
    assert!(text.contains(&site_a) && text.contains(&site_b), "{text}");
}

#[test]
fn an_exited_lane_in_a_mask_is_reported() {
    let cfg = LaunchConfig::linear(1, 32);
    let err = launch(&cfg, || {
        if lane_id() == 3 {
            return;
        }
        ballot(u32::MAX, true);
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err.kind, SimErrorKind::CollectiveMisuse { .. }),
        "{text}"
    );
    assert!(text.contains("lane 3"), "{text}");
}

#[test]
fn a_mask_without_the_caller_is_reported() {
    let cfg = LaunchConfig::linear(1, 32);
    let err = launch(&cfg, || {
        ballot(1 << ((lane_id() + 1) % 32), true);
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("does not contain the calling lane"),
        "{err}"
    );
}

#[test]
fn a_mask_beyond_a_partial_warp_is_reported() {
    let cfg = LaunchConfig::linear(1, 20);
    let err = launch(&cfg, || {
        match_any(u32::MAX, 7);
    })
    .unwrap_err();
    assert!(err.to_string().contains("does not have"), "{err}");
}

#[test]
fn shfl_from_outside_the_mask_is_reported() {
    let cfg = LaunchConfig::linear(1, 32);
    let err = launch(&cfg, || {
        if lane_id() < 8 {
            shfl(0xff, 5, 9);
        }
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("the source lane 9 is not in the mask"),
        "{err}"
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn a_panicking_lane_fails_the_launch_with_its_identity() {
    let cfg = LaunchConfig::linear(3, 64);
    let err = launch(&cfg, || {
        if block_idx().0 == 2 && thread_idx().0 == 37 {
            panic!("planted failure");
        }
        switch_point();
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("planted failure"), "{text}");
    assert!(
        text.contains("block (2, 0, 0) thread (37, 0, 0) (warp 1, lane 5)"),
        "{text}"
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn the_step_watchdog_reports_where_lanes_wait() {
    let flag = AtomicU32::new(0);
    let cfg = LaunchConfig::linear(2, 32).max_steps(20_000);
    let err = launch(&cfg, || {
        while flag.load(Ordering::Relaxed) == 0 {
            switch_point();
        }
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err.kind, SimErrorKind::Watchdog { .. }), "{text}");
    assert!(text.contains("64 lane(s) runnable at"), "{text}");
    assert!(text.contains(file!()), "{text}");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn the_wall_clock_watchdog_stops_parallel_workers() {
    let flag = AtomicU32::new(0);
    let cfg = LaunchConfig::linear(4, 32)
        .workers(2)
        .watchdog(Duration::from_millis(300));
    let err = launch(&cfg, || {
        while flag.load(Ordering::Relaxed) == 0 {
            switch_point();
        }
    })
    .unwrap_err();
    let text = err.to_string();
    // This launch's 300 ms, not the default watchdog's.
    assert!(text.contains("watchdog: 300ms of wall time"), "{text}");
    assert!(text.contains("128 lane(s) runnable"), "{text}");
}

/// CUDA's largest grid (2^31 − 1 × 65 535 × 65 535 blocks, about 2^63)
/// is a valid launch: its blocks are admitted as they go, not listed first
/// (a list of them was a capacity-overflow panic), and the watchdog stops
/// it.
#[test]
#[cfg_attr(miri, ignore = "a wall-clock watchdog: runs natively")]
fn the_largest_grid_starts_and_the_watchdog_stops_it() {
    let cfg = LaunchConfig::new((i32::MAX as u32, 65_535, 65_535), (32, 1, 1))
        .watchdog(Duration::from_millis(300));
    let err = launch(&cfg, || switch_point()).unwrap_err();
    assert!(matches!(err.kind, SimErrorKind::Watchdog { .. }), "{err}");
}

#[test]
fn invalid_shapes_are_refused() {
    for (grid, block) in [
        ((0, 1, 1), (32, 1, 1)),
        ((1, 1, 1), (2048, 1, 1)),
        ((1, 70_000, 1), (32, 1, 1)),
        // Threads a block past a `u64`: refused, not an overflow.
        ((1, 1, 1), (u32::MAX, u32::MAX, 2)),
        ((u32::MAX, u32::MAX, u32::MAX), (32, 1, 1)),
    ] {
        let err = launch(&LaunchConfig::new(grid, block), || {}).unwrap_err();
        assert!(
            matches!(err.kind, SimErrorKind::InvalidLaunch(_)),
            "{grid:?} {block:?}: {err}"
        );
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn parallel_workers_share_atomics() {
    let sum = AtomicU64::new(0);
    let cfg = LaunchConfig::linear(64, 128).workers(2);
    let stats = launch(&cfg, || {
        let mask = activemask();
        let n = ballot(mask, true).count_ones();
        if lane_id() == mask.trailing_zeros() {
            switch_point();
            sum.fetch_add(u64::from(n), Ordering::Relaxed);
        }
    })
    .unwrap();
    assert_eq!(sum.load(Ordering::Relaxed), 64 * 128);
    assert_eq!(stats.workers, 2);
    assert_eq!(stats.lanes, 64 * 128);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "hundreds of lanes: each an OS thread under Miri; runs natively"
)]
fn blocks_beyond_residency_wait_their_turn() {
    // 40 blocks of 4 warps with 8 resident warps: blocks are admitted as
    // earlier ones retire, and all of them run.
    let done = AtomicU32::new(0);
    let cfg = LaunchConfig::linear(40, 128).resident_warps(8);
    launch(&cfg, || {
        switch_point();
        done.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(done.load(Ordering::Relaxed), 40 * 128);
}

#[test]
fn thread_fibers_run_collectives_and_tear_down_on_failure() {
    let cfg = LaunchConfig::linear(2, 40).fibers(Fibers::Threads);
    launch(&cfg, || {
        let mask = activemask();
        assert_eq!(ballot(mask, true), mask);
    })
    .unwrap();
    let err = launch(&cfg, || {
        let full = if warp_id() == 0 { u32::MAX } else { 0xff };
        if lane_id() == 0 {
            shfl(full, 1, 0);
        } else {
            shfl(full, 2, 0);
        }
    })
    .unwrap_err();
    assert!(matches!(err.kind, SimErrorKind::Deadlock { .. }), "{err}");
}

/// Held by a lane: its drop reaches switch points (three `activemask`s
/// and switches), as a `Vec` freed through the heap does (`dealloc` asks
/// `activemask`).
struct Collects;

impl Drop for Collects {
    fn drop(&mut self) {
        for _ in 0..3 {
            let _ = activemask();
            switch_point();
        }
    }
}

/// A lane unwound by a failed launch whose destructors reach switch points
/// (a `Vec` freed through the heap: `dealloc` asks `activemask`) ends, in
/// either fiber kind: with OS-thread lanes the second switch point of the
/// unwind overwrote the abort and waited for a turn that never came, and
/// the launch hung in its join (a review, 2026-12-07).
#[test]
fn a_lane_unwound_by_a_failed_launch_passes_its_switch_points() {
    for fibers in [Fibers::Threads, Fibers::Coroutines] {
        let cfg = LaunchConfig::linear(1, 2).fibers(fibers);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let result = launch(&cfg, || {
                let _held = Collects;
                if lane_id() == 0 {
                    switch_point();
                    panic!("lane 0 fails the launch");
                }
                // Lane 1 waits at a collective lane 0 never joins.
                syncwarp(0b11);
            });
            let _ = tx.send(result.map(|_| ()).map_err(|e| e.to_string()));
        });
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{fibers:?}: the failed launch hung"));
        let err = result.expect_err("lane 0 panicked");
        assert!(err.contains("lane 0 fails the launch"), "{fibers:?}: {err}");
    }
}

/// A coroutine lane that panics runs its unwind to the end without
/// suspending (its destructors' collectives answer as for a lane alone):
/// the lanes that share its OS thread do not see `std::thread::panicking()`
/// meanwhile (where `WarpAlloc` sent their allocations to the system
/// allocator), and a launch that fails with the unwind half done leaves
/// no panic counted on the thread (a review, 2026-12-07).
#[test]
fn a_panicking_coroutine_lane_unwinds_alone() {
    let saw = AtomicU32::new(0);
    let cfg = LaunchConfig::linear(1, 32)
        .workers(1)
        .fibers(Fibers::Coroutines);
    let err = launch(&cfg, || {
        let _held = Collects;
        if lane_id() == 0 {
            panic!("lane 0 fails the launch");
        }
        for _ in 0..8 {
            switch_point();
            if std::thread::panicking() {
                saw.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .unwrap_err();
    assert!(err.to_string().contains("lane 0 fails the launch"), "{err}");
    assert_eq!(saw.load(Ordering::Relaxed), 0, "lanes saw another's panic");
    assert!(
        !std::thread::panicking(),
        "a panic left counted on the thread"
    );
}

#[test]
fn outside_a_launch_the_caller_is_a_one_lane_warp() {
    assert!(!in_launch());
    assert_eq!(activemask(), 1);
    assert_eq!(ballot(1, true), 1);
    assert_eq!(match_any(1, 42), 1);
    assert_eq!(shfl(1, 7, 0), 7);
    assert_eq!(reduce_or(1, 6), 6);
    syncwarp(1);
    switch_point();
}

/// `reduce_or` (sm_80's `redux.sync.or`): every lane of the mask gets the
/// OR of the mask's values, in one collective (a step a lane), for a whole
/// warp and for a group of odd lanes.
#[test]
#[cfg_attr(miri, ignore = "64 lanes: each an OS thread under Miri; runs natively")]
fn reduce_or_gives_each_lane_of_the_mask_the_or_of_their_values() {
    let wrong = AtomicU32::new(0);
    let stats = launch(&LaunchConfig::linear(1, 64).seed(3), || {
        let me = lane_id();
        let whole = reduce_or(u32::MAX, 1 << me);
        let odd = 0xaaaa_aaaa;
        let part = if me % 2 == 1 {
            reduce_or(odd, 1 << me)
        } else {
            odd
        };
        if whole != u32::MAX || part != odd {
            wrong.fetch_add(1, Ordering::Relaxed);
        }
    })
    .expect("launch");
    assert_eq!(wrong.into_inner(), 0);
    assert!(stats.steps > 0);
}

#[test]
fn round_trips_follow_the_longest_chain_through_collectives() {
    use warpalloc_sim::{Access, count_access_at, count_round_trip};
    let cfg = LaunchConfig::linear(1, 64).workers(1);
    let stats = launch(&cfg, || {
        let (warp, lane) = (warp_id(), lane_id());
        if warp == 0 {
            // Lane 0 waits for three loads; the ballot passes its chain to
            // every lane, and lane 1 adds two RMWs and a marked read; a
            // store, a fence and a reduction are not waited for.
            if lane == 0 {
                for _ in 0..3 {
                    count_access_at(Access::Load, false, 0);
                }
            }
            ballot(u32::MAX, true);
            if lane == 1 {
                count_access_at(Access::Rmw, false, 0);
                count_access_at(Access::Store, false, 0);
                count_access_at(Access::Fence, false, 0);
                count_access_at(Access::Rmw, true, 0);
                count_access_at(Access::Reduction, false, 0);
                count_round_trip();
            }
        } else {
            // No collective: the lanes' chains stay apart; the longest is
            // lane 5's two.
            if lane == 0 {
                count_access_at(Access::Load, false, 0);
            }
            if lane == 5 {
                count_access_at(Access::Load, false, 0);
                count_access_at(Access::Rmw, false, 0);
            }
        }
    })
    .unwrap();
    assert_eq!(stats.round_trips, 6 + 2);
    assert_eq!(stats.least_round_trips, 2);
}

/// A lane that waits on the clock for a deadline sees time pass, in a
/// deterministic launch and under the timed schedule: readings in a row
/// become switch points (`CLOCK_SPIN`), at which the scheduler steps and
/// the watchdog looks. (Before, the clock moved only as the scheduler
/// stepped, and a lane spinning on it hung the launch with no report.)
#[test]
#[cfg_attr(miri, ignore = "32 lanes: each an OS thread under Miri; runs natively")]
fn a_lane_waiting_on_the_clock_sees_time_pass() {
    for cfg in [
        LaunchConfig::linear(1, 32).seed(1),
        LaunchConfig::linear(1, 32).seed(1).timed(Timing::hopper()),
    ] {
        let cfg = cfg.watchdog(Duration::from_secs(20));
        launch(&cfg, || {
            let until = clock() + 20_000;
            while clock() < until {}
        })
        .expect("the deadline passes");
    }
}
