//! The host backend: the CPU warp simulator (`warpalloc-sim`).
//!
//! Collectives carry their caller's source location (`#[track_caller]`) so
//! that the simulator can group lanes by call site and name the site in its
//! reports.

use super::Dim3;
use warpalloc_sim as sim;

fn dim((x, y, z): (u32, u32, u32)) -> Dim3 {
    Dim3 { x, y, z }
}

#[inline]
pub(super) fn lane_id() -> u32 {
    sim::lane_id()
}

/// The warp's index in the grid; a value of the lane's own in a launch
/// that reads special registers as across a preemption (`migrating`).
#[inline]
pub(super) fn warp_slot() -> u32 {
    let warps_per_block = (super::block_dim().volume() as u32).div_ceil(super::WARP_SIZE);
    let slot = (super::block_linear() as u32)
        .wrapping_mul(warps_per_block)
        .wrapping_add(super::warp_id());
    if sim::migrating() {
        slot ^ (lane_id() + 1).wrapping_mul(0x2545_f491)
    } else {
        slot
    }
}

/// The block's index: a block runs on one SM, as on the GPU, so the warps
/// of one block share a spread (and a one-block launch has one).
#[inline]
pub(super) fn sm_id() -> u32 {
    super::block_linear() as u32
}

#[inline]
pub(super) fn grid_id() -> u64 {
    sim::grid_id()
}

#[inline]
pub(super) fn thread_idx() -> Dim3 {
    dim(sim::thread_idx())
}

#[inline]
pub(super) fn block_idx() -> Dim3 {
    dim(sim::block_idx())
}

#[inline]
pub(super) fn block_dim() -> Dim3 {
    dim(sim::block_dim())
}

#[inline]
pub(super) fn grid_dim() -> Dim3 {
    dim(sim::grid_dim())
}

#[track_caller]
pub(super) fn activemask() -> u32 {
    sim::activemask()
}

#[track_caller]
pub(super) fn ballot(lane_mask: u32, pred: bool) -> u32 {
    sim::ballot(lane_mask, pred)
}

#[track_caller]
pub(super) fn match_any_u32(lane_mask: u32, key: u32) -> u32 {
    sim::match_any(lane_mask, u64::from(key))
}

#[track_caller]
pub(super) fn match_any_u64(lane_mask: u32, key: u64) -> u32 {
    sim::match_any(lane_mask, key)
}

#[track_caller]
pub(super) fn shfl_u32(lane_mask: u32, value: u32, src_lane: u32) -> u32 {
    sim::shfl(lane_mask, u64::from(value), src_lane) as u32
}

#[track_caller]
pub(super) fn shfl_u64(lane_mask: u32, value: u64, src_lane: u32) -> u64 {
    sim::shfl(lane_mask, value, src_lane)
}

/// As a GPU of the launch's compute capability.
#[inline]
pub(super) fn has_redux() -> bool {
    sim::capability() >= (8, 0)
}

/// As a GPU of the launch's compute capability: one collective where it
/// has `redux.sync` (sm_80 and later), as the GPU runs one instruction;
/// shuffles before. (The shuffles everywhere charged a timed free of a
/// whole warp 5 collectives, and of a group up to 31; a review,
/// 2026-12-07.)
#[track_caller]
pub(super) fn reduce_or(lane_mask: u32, value: u32) -> u32 {
    if has_redux() {
        sim::reduce_or(lane_mask, value)
    } else {
        super::reduce_or_by_shuffles(lane_mask, value)
    }
}

#[track_caller]
pub(super) fn syncwarp(lane_mask: u32) {
    sim::syncwarp(lane_mask)
}

#[track_caller]
pub(super) fn nanosleep(nanoseconds: u32) {
    sim::sleep(nanoseconds)
}

#[inline]
pub(super) fn clock() -> u64 {
    sim::clock()
}

#[inline]
pub(super) fn opaque_u32(x: u32) -> u32 {
    x
}

#[inline]
pub(super) fn opaque_u64(x: u64) -> u64 {
    x
}
