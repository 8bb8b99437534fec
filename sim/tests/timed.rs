//! The timed schedule (`LaunchConfig::timed`): the lane ready first goes
//! next, a round trip weighs hundreds of cycles and a collective a few, a
//! `nanosleep` is waited in virtual time, and the launch reports its
//! makespan and its warps' lives.

use std::sync::Mutex;

use warpalloc_sim::{
    Access, Convergence, LaunchConfig, Timing, activemask, ballot, block_dim, block_idx, clock,
    count_access_at, lane_id, launch, sleep, switch_point, thread_idx, warp_id,
};

fn gtid() -> u32 {
    block_idx().0 * block_dim().0 + thread_idx().0
}

/// An atomic access as the device crate's `sync` facade makes it: counted,
/// then a switch point (the access itself is what the test does next).
fn access(kind: Access, addr: usize) {
    count_access_at(kind, false, addr);
    switch_point();
}

/// Hopper's costs with no spread, so that sums are exact.
fn exact() -> Timing {
    Timing {
        jitter_percent: 0,
        ..Timing::hopper()
    }
}

#[test]
fn a_round_trip_weighs_hundreds_of_cycles_and_a_collective_a_few() {
    let t = exact();
    let per_load = u64::from(t.issue + t.round_trip);
    let loads = launch(&LaunchConfig::linear(1, 32).timed(t), || {
        for _ in 0..10 {
            access(Access::Load, 8);
        }
    })
    .unwrap();
    assert_eq!(loads.cycles, 10 * per_load, "{loads:?}");
    // A ballot completes when its last lane arrives, and every lane goes
    // on `collective` cycles later.
    let ballots = launch(&LaunchConfig::linear(1, 32).timed(t), || {
        for _ in 0..10 {
            ballot(u32::MAX, true);
        }
    })
    .unwrap();
    assert_eq!(ballots.cycles, 10 * u64::from(t.collective), "{ballots:?}");
    // Untimed, neither has a time.
    let untimed = launch(&LaunchConfig::linear(1, 32), || access(Access::Load, 8)).unwrap();
    assert_eq!((untimed.cycles, untimed.warp_cycles), (0, 0));
}

#[test]
fn each_access_costs_what_the_model_says() {
    let t = exact();
    let issue = u64::from(t.issue);
    for (kind, cost) in [
        (Access::Load, u64::from(t.round_trip)),
        (Access::Rmw, u64::from(t.round_trip)),
        (Access::Store, u64::from(t.store)),
        (Access::Reduction, u64::from(t.store)),
        (Access::Fence, u64::from(t.fence)),
    ] {
        let stats = launch(&LaunchConfig::linear(1, 1).timed(t), || access(kind, 8)).unwrap();
        assert_eq!(stats.cycles, issue + cost, "{kind:?}");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "32 lanes or more: each an OS thread under Miri (minutes); runs natively"
)]
fn the_lane_ready_first_goes_first() {
    // Odd lanes store (10 cycles), even lanes load (300): every store is
    // done before any load, whatever the seed.
    for seed in 0..4 {
        let order = Mutex::new(Vec::new());
        let cfg = LaunchConfig::linear(1, 32)
            .seed(seed)
            .timed(Timing::hopper());
        launch(&cfg, || {
            let kind = if lane_id() % 2 == 1 {
                Access::Store
            } else {
                Access::Load
            };
            access(kind, 8 * lane_id() as usize);
            order.lock().unwrap().push(lane_id());
        })
        .unwrap();
        let order = order.into_inner().unwrap();
        let (stores, loads) = order.split_at(16);
        assert!(stores.iter().all(|l| l % 2 == 1), "seed {seed}: {order:?}");
        assert!(loads.iter().all(|l| l % 2 == 0), "seed {seed}: {order:?}");
    }
}

#[test]
fn a_timed_sleep_is_waited_and_the_clock_reads_virtual_time() {
    let t = exact();
    let seen = Mutex::new(0);
    let stats = launch(&LaunchConfig::linear(1, 1).timed(t), || {
        let before = clock();
        sleep(1_000);
        *seen.lock().unwrap() = clock() - before;
    })
    .unwrap();
    // 1 µs at 1 980 MHz, and the request's issue cycles.
    assert_eq!(stats.cycles, 1_980 + u64::from(t.issue));
    assert_eq!(stats.sleep_ns, 1_000);
    let ns = *seen.lock().unwrap();
    assert!((1_000..1_010).contains(&ns), "the clock moved {ns} ns");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "32 lanes or more: each an OS thread under Miri (minutes); runs natively"
)]
fn read_modify_writes_on_one_address_wait_their_turn() {
    let t = Timing {
        same_address: 50,
        ..exact()
    };
    let on = |spread: bool| {
        launch(&LaunchConfig::linear(1, 32).timed(t), || {
            let addr = if spread { 8 * lane_id() as usize } else { 8 };
            access(Access::Rmw, addr);
        })
        .unwrap()
        .cycles
    };
    let (one, apart) = (on(false), on(true));
    assert_eq!(apart, u64::from(t.issue + t.round_trip));
    // The 32nd waits behind 31 others at the address.
    assert_eq!(one, apart + 31 * u64::from(t.same_address));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "32 lanes or more: each an OS thread under Miri (minutes); runs natively"
)]
fn a_timed_launch_replays_its_seed() {
    let run = |seed: u64| {
        let order = Mutex::new(Vec::new());
        let cfg = LaunchConfig::linear(4, 64)
            .seed(seed)
            .timed(Timing::hopper());
        let stats = launch(&cfg, || {
            for i in 0..4 {
                access(Access::Rmw, 8 * (gtid() as usize % 3));
                order.lock().unwrap().push(gtid());
                if i % 2 == 0 {
                    ballot(u32::MAX, warp_id() == 0);
                }
            }
        })
        .unwrap();
        (order.into_inner().unwrap(), stats.cycles, stats.warp_cycles)
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5).0, run(6).0);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "32 lanes or more: each an OS thread under Miri (minutes); runs natively"
)]
fn warp_cycles_sum_each_warps_life() {
    let t = exact();
    // Two warps: the first does one load, the second three.
    let stats = launch(&LaunchConfig::linear(1, 64).timed(t), || {
        for _ in 0..=2 * warp_id() {
            access(Access::Load, 8);
        }
    })
    .unwrap();
    let trip = u64::from(t.issue + t.round_trip);
    assert_eq!(stats.cycles, 3 * trip);
    assert_eq!(stats.warp_cycles, trip + 3 * trip);
}

#[test]
fn a_converged_timed_warp_groups_at_activemask_and_time_moves() {
    // Converged: the lanes parked at `activemask` are released together
    // once the warp has nothing else to run, as untimed.
    let t = exact();
    let cfg = LaunchConfig::linear(1, 32)
        .convergence(Convergence::Converged)
        .timed(t);
    let masks = Mutex::new(Vec::new());
    let stats = launch(&cfg, || {
        access(Access::Load, 8);
        let mask = activemask();
        masks.lock().unwrap().push(mask);
        ballot(mask, true);
    })
    .unwrap();
    assert!(masks.into_inner().unwrap().iter().all(|&m| m == u32::MAX));
    // The load, the release from `activemask` and the ballot.
    let trip = u64::from(t.issue + t.round_trip);
    assert_eq!(
        stats.cycles,
        trip + u64::from(t.issue) + u64::from(t.collective)
    );
}

#[test]
fn an_access_counted_without_a_switch_point_is_not_weighed_later() {
    // A load counted by hand, then a ballot, then a bare switch point: the
    // switch is a bare one (issue), not the load's round trip.
    let t = exact();
    let stats = launch(&LaunchConfig::linear(1, 1).timed(t), || {
        count_access_at(Access::Load, false, 8);
        ballot(1, true);
        switch_point();
    })
    .unwrap();
    assert_eq!(stats.cycles, u64::from(t.collective + t.issue));
}
