//! A CPU warp simulator: runs SIMT kernels written against `warpalloc-device`'s
//! `simt` module on the host, with the warp semantics of Volta and later GPUs.
//!
//! A launch is a grid of blocks of threads, as on the GPU. Threads are grouped
//! into warps of 32 lanes (`thread linear index / 32`); a partial last warp has
//! the missing lanes marked as never present. Each lane runs the kernel closure
//! on its own stack:
//!
//! ```text
//!   launch(grid, block) ──► workers (OS threads; 1 = deterministic replay)
//!                              │ each owns whole blocks, a seeded scheduler and
//!                              │ up to `resident_warps` warps at a time
//!                              ▼
//!                         warp ── 32 lanes, each a stackful coroutine
//!                              │  (or an OS thread: `Fibers::Threads`, for Miri)
//!                              ▼
//!        switch points: every atomic, sleep, activemask and sync collective
//! ```
//!
//! Lanes of one warp always live on one worker, so warp collectives need no
//! cross-thread synchronisation; atomics between warps on different workers are
//! truly concurrent. With one worker the whole launch is a pure function of the
//! seed: [`SimError`] prints the seed and how to replay it
//! (`WARPALLOC_SIM_SEED=<seed>`; see [`seeds`]).
//!
//! # Convergence model
//!
//! On Volta and later (independent thread scheduling) `activemask()` may return
//! any subset of the warp's live lanes that stand at that instruction together:
//! the whole warp, or only the caller. Code must be correct for every subset, so
//! here the subset is a choice of the schedule:
//!
//! * `activemask()` parks the lane at its call site. Lanes of one warp parked at
//!   the *same site* may be grouped; every lane of a group gets the group's mask.
//!   Under [`Convergence::Random`] the scheduler picks the group when it picks one
//!   of the parked lanes: all lanes parked there, the caller alone, or a random
//!   subset that includes the caller — varied by the seed. Under
//!   [`Convergence::Converged`] a site's lanes are released together once no lane
//!   of the warp can run any more (the lockstep behaviour of a converged warp), or
//!   after [`CONVERGED_PATIENCE`] scheduling steps of the warp's other lanes, so a
//!   lane spinning on memory does not starve its parked warp-mates.
//! * A sync collective (`ballot`, `match_any`, `shfl`: same kind, same call site
//!   and same mask; `syncwarp`: same mask, any site, as on sm_70+) blocks until
//!   every lane of its mask has arrived. A lane of the mask may first pass other
//!   collectives (legal on Volta); only a real error is reported:
//!   - the mask does not contain the caller, or names a lane that does not exist;
//!   - a lane of the mask has exited, or exits while the collective waits;
//!   - `shfl` reads from a lane outside the mask;
//!   - no lane of the warp can make progress while collectives wait: a deadlock
//!     (on the GPU: a hang or garbage). The report names every lane's state and
//!     source location.
//! * A launch that runs past its watchdog (wall time, or `max_steps` scheduling
//!   steps) fails with where each lane waits.
//!
//! # Schedules
//!
//! By default the scheduler resumes a runnable lane drawn at random: every
//! switch point is a turn in which any other lane may move, whatever the
//! switch point costs on a GPU. [`LaunchConfig::timed`] schedules by time
//! instead ([`Timing`]): each lane is ready again a round trip after an
//! atomic load or read-modify-write, a few cycles after a collective, the
//! nanoseconds of a `nanosleep` after it, and the lane ready first goes
//! next; the launch reports its makespan and its warps' lives in cycles
//! (`LaunchStats::cycles`, `warp_cycles`). Both are a pure function of
//! the seed with one worker.
//!
//! # Architecture
//!
//! Every collective behaves as on sm_70 and later. Device code that takes a
//! different path per architecture (`warpalloc-device`'s `simt::has_redux`)
//! asks [`capability`], the launch's [`LaunchConfig::capability`] (default
//! [`DEFAULT_CAPABILITY`], 9.0), so that tests run each path.
//!
//! Outside a launch (plain host code calling device functions) the caller is lane
//! 0 of a one-lane warp: `activemask() == 1`, collectives with mask 1 return at
//! once, and a mask naming any other lane panics with a clear message.

#![warn(missing_docs)]

mod config;
mod error;
mod fiber;
mod lane;
mod launch;
mod worker;

pub use config::{
    CONVERGED_PATIENCE, Convergence, DEFAULT_CAPABILITY, Fibers, LaunchConfig, Timing,
};
pub use error::{LaneReport, LaneState, SimError, SimErrorKind};
pub use fiber::panic_message;
pub use lane::{
    Access, EVENTS, activemask, ballot, binding, block_dim, block_idx, capability, clock,
    count_access_at, count_event, count_round_trip, grid_dim, grid_id, in_launch, kernel_name,
    lane_id, match_any, migrating, reduce_or, shfl, sleep, switch_point, syncwarp, thread_idx,
    wait_on_host, warp_id,
};
pub use launch::{LaunchStats, launch};

/// The seeds a seed-sweeping test should run: `WARPALLOC_SIM_SEED` alone when
/// that variable is set (to replay a failure), else `count` seeds derived from
/// `base`.
///
/// A seed in the variable may be decimal or `0x`-prefixed hex.
pub fn seeds(base: u64, count: usize) -> Vec<u64> {
    if let Some(seed) = seed_from_env() {
        return vec![seed];
    }
    let mut state = base;
    (0..count).map(|_| splitmix64(&mut state)).collect()
}

/// The seed named by `WARPALLOC_SIM_SEED`, if any.
pub fn seed_from_env() -> Option<u64> {
    let text = std::env::var("WARPALLOC_SIM_SEED").ok()?;
    parse_seed(text.trim())
}

fn parse_seed(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// SplitMix64: spreads consecutive seeds over the whole space.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_hex_and_decimal() {
        assert_eq!(parse_seed("0x1f"), Some(31));
        assert_eq!(parse_seed("31"), Some(31));
        assert_eq!(parse_seed("zz"), None);
    }

    #[test]
    fn seeds_are_distinct_and_reproducible() {
        let a = seeds(7, 16);
        let b = seeds(7, 16);
        if seed_from_env().is_none() {
            assert_eq!(a, b);
            let mut sorted = a.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 16);
        }
    }
}
