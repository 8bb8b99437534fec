//! Kernels that exercise each SIMT collective with full, partial and divergent
//! masks. Each thread writes [`WORDS`] words at `out[global_thread_id * WORDS]`
//! and leaves the words of cases it does not take part in untouched; the tests
//! compute the same words from [`crate::input`] and compare.
//!
//! Masks are derived per warp from the seed (every lane of a warp computes the
//! same mask), so a case's participants are known to the reference.

use warpalloc_device::kernel;
use warpalloc_device::simt;
use warpalloc_device::sync::{AtomicU32, Ordering};

use crate::{input, nth_lane};

/// Output words per thread.
pub const WORDS: usize = 8;

/// The warp's global index: its block's linear index times warps per block
/// plus its index in the block.
#[inline(always)]
pub fn global_warp_id() -> u32 {
    let warps_per_block = simt::block_dim().volume().div_ceil(32);
    (simt::block_linear() * warps_per_block) as u32 + simt::warp_id()
}

/// A random non-empty subset of the warp's lanes, the same for every lane of
/// the warp: the participants of a partial-mask case `k`.
#[inline(always)]
pub fn partial_mask(seed: u32, k: u32) -> u32 {
    let present = simt::warp_mask();
    let m = input(seed, global_warp_id(), k) & present;
    if m == 0 {
        present & present.wrapping_neg()
    } else {
        m
    }
}

#[inline(always)]
fn slot(out: *mut u32, k: usize) -> *mut u32 {
    // Pointer arithmetic only; the host sized `out` for the grid.
    out.wrapping_add(simt::global_thread_id() as usize * WORDS + k)
}

#[inline(always)]
fn write(out: *mut u32, k: usize, value: u32) {
    // SAFETY: `slot` addresses this thread's own words of a buffer the host
    // allocated for `WORDS` words per thread of the grid; no other thread
    // writes them.
    unsafe { slot(out, k).write(value) }
}

kernel! {
    /// `ballot`: word 0 full warp; word 1 a partial mask (members only);
    /// word 2 two divergent branches, each with its own mask and call site;
    /// words 3/4 `ballot(activemask())` and the activemask itself.
    pub fn simt_ballot(out: *mut u32, seed: u32) {
        let me = simt::global_thread_id() as u32;
        let lane = simt::lane_id();
        let full = simt::warp_mask();
        write(out, 0, simt::ballot(full, input(seed, me, 0) & 1 != 0));

        let part = partial_mask(seed, 1);
        if part & (1 << lane) != 0 {
            write(out, 1, simt::ballot(part, input(seed, me, 1) & 1 != 0));
        }

        let left = partial_mask(seed, 2);
        if left & (1 << lane) != 0 {
            write(out, 2, simt::ballot(left, input(seed, me, 2) & 1 != 0));
        } else {
            let right = full & !left;
            write(out, 2, simt::ballot(right, input(seed, me, 3) & 1 != 0));
        }

        let here = simt::activemask();
        write(out, 3, simt::ballot(here, input(seed, me, 4) & 1 != 0));
        write(out, 4, here);
    }
}

kernel! {
    /// `match_any`: word 0 32-bit keys with collisions over the full warp;
    /// word 1 64-bit keys that differ only in their high half; word 2 a
    /// partial mask (members only).
    pub fn simt_match_any(out: *mut u32, seed: u32) {
        let me = simt::global_thread_id() as u32;
        let lane = simt::lane_id();
        let full = simt::warp_mask();
        write(out, 0, simt::match_any_u32(full, input(seed, me, 0) % 4));

        let key64 = (u64::from(input(seed, me, 1) % 3) << 32) | 0x5555_5555;
        write(out, 1, simt::match_any_u64(full, key64));

        let part = partial_mask(seed, 2);
        if part & (1 << lane) != 0 {
            write(out, 2, simt::match_any_u32(part, input(seed, me, 3) % 3));
        }
    }
}

kernel! {
    /// `reduce_or` from every `match_any` group of a warp at once, one call
    /// site, as a free combines its lanes' bits (`Slab::deallocate_by_word`:
    /// `redux.sync` from sm_80, shuffles before): word 0 each lane's bit ORed
    /// over its group (keys `input % 3`: the group's mask); word 1 values
    /// ORed over the groups of a partial mask's members.
    pub fn simt_reduce_or(out: *mut u32, seed: u32) {
        let me = simt::global_thread_id() as u32;
        let lane = simt::lane_id();
        let full = simt::warp_mask();
        let group = simt::match_any_u32(full, input(seed, me, 0) % 3);
        write(out, 0, simt::reduce_or(group, 1 << lane));

        let part = partial_mask(seed, 1);
        if part & (1 << lane) != 0 {
            let group = simt::match_any_u32(part, input(seed, me, 2) % 3);
            write(out, 1, simt::reduce_or(group, input(seed, me, 3)));
        }
    }
}

kernel! {
    /// `shfl`: word 0 u32 from a per-lane source; words 1/2 the low/high
    /// halves of a u64; word 3 a pointer (as the index of the source lane's
    /// first word); word 4 a partial mask (members only); word 5 a broadcast
    /// from the mask's leader.
    pub fn simt_shfl(out: *mut u32, seed: u32) {
        let me = simt::global_thread_id() as u32;
        let lane = simt::lane_id();
        let full = simt::warp_mask();
        let src = nth_lane(full, input(seed, me, 0) % full.count_ones());
        write(out, 0, simt::shfl_u32(full, input(seed, me, 1), src));

        let wide = (u64::from(input(seed, me, 2)) << 32) | u64::from(input(seed, me, 3));
        let got = simt::shfl_u64(full, wide, src);
        write(out, 1, got as u32);
        write(out, 2, (got >> 32) as u32);

        let mine = slot(out, 0);
        let theirs = simt::shfl_ptr(full, mine, src);
        write(out, 3, (theirs.addr().wrapping_sub(out.addr()) / 4) as u32);

        let part = partial_mask(seed, 4);
        if part & (1 << lane) != 0 {
            let from = nth_lane(part, input(seed, me, 5) % part.count_ones());
            write(out, 4, simt::shfl_u32(part, input(seed, me, 6), from));
            let lead = simt::leader(part);
            write(out, 5, simt::broadcast_u32(part, input(seed, me, 7), lead));
        }
    }
}

kernel! {
    /// `syncwarp`: each lane publishes a word in `scratch`, the warp
    /// synchronises, and each lane reads its next neighbour's word (word 0).
    /// Word 1 repeats it within a partial mask, after a second syncwarp.
    pub fn simt_syncwarp(out: *mut u32, scratch: *mut u32, seed: u32) {
        let me = simt::global_thread_id() as u32;
        let lane = simt::lane_id();
        let full = simt::warp_mask();
        let base = me - lane;
        let cell = |i: u32| {
            // SAFETY: `scratch` has one word per thread of the grid, only
            // ever accessed atomically by this kernel.
            unsafe { AtomicU32::from_ptr(scratch.wrapping_add(i as usize)) }
        };
        cell(me).store(input(seed, me, 0), Ordering::Relaxed);
        simt::syncwarp(full);
        let next = (lane + 1) % full.count_ones();
        write(out, 0, cell(base + next).load(Ordering::Relaxed));
        simt::syncwarp(full);

        let part = partial_mask(seed, 1);
        if part & (1 << lane) != 0 {
            cell(me).store(input(seed, me, 2), Ordering::Relaxed);
            simt::syncwarp(part);
            let rank = (part & simt::lanemask_lt()).count_ones();
            let next = nth_lane(part, (rank + 1) % part.count_ones());
            write(out, 1, cell(base + next).load(Ordering::Relaxed));
        }
    }
}

kernel! {
    /// `nanosleep`, `Backoff` and the clock: word 0 is 1 when the clock did
    /// not run backwards across the sleeps; word 1 the lane id; word 2 the
    /// warp's lane mask.
    pub fn simt_sleep(out: *mut u32, rounds: u32) {
        let t0 = simt::clock();
        let mut backoff = simt::Backoff::new();
        for _ in 0..rounds {
            backoff.snooze();
        }
        simt::nanosleep(100);
        let t1 = simt::clock();
        write(out, 0, u32::from(t1 >= t0));
        write(out, 1, simt::lane_id());
        write(out, 2, simt::warp_mask());
    }
}

kernel! {
    /// `mut` parameters: each thread counts `n` down to zero in steps of
    /// `step` (both parameters mutated in the body) and writes how many
    /// steps it took to word 0 and the final `step` to word 1.
    pub fn simt_countdown(out: *mut u32, mut n: u32, mut step: u32,) {
        let mut steps = 0;
        step = step.max(1);
        while n > 0 {
            n = n.saturating_sub(step);
            steps += 1;
        }
        step += 1;
        write(out, 0, steps);
        write(out, 1, step);
    }
}
