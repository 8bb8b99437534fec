//! The GPU backend: NVVM intrinsics and PTX.
//!
//! Each function is one instruction (or a special-register read); `ptxas`
//! and the PTX tests check that `vote.sync.ballot`, `match.any.sync`,
//! `shfl.sync.idx`, `activemask` and `nanosleep` come out as written.

use super::Dim3;

#[allow(improper_ctypes)]
unsafe extern "C" {
    #[link_name = "llvm.nvvm.read.ptx.sreg.tid.x"]
    fn sreg_tid_x() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.tid.y"]
    fn sreg_tid_y() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.tid.z"]
    fn sreg_tid_z() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.ctaid.x"]
    fn sreg_ctaid_x() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.ctaid.y"]
    fn sreg_ctaid_y() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.ctaid.z"]
    fn sreg_ctaid_z() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.ntid.x"]
    fn sreg_ntid_x() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.ntid.y"]
    fn sreg_ntid_y() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.ntid.z"]
    fn sreg_ntid_z() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.nctaid.x"]
    fn sreg_nctaid_x() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.nctaid.y"]
    fn sreg_nctaid_y() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.nctaid.z"]
    fn sreg_nctaid_z() -> u32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.globaltimer"]
    fn sreg_globaltimer() -> u64;
    #[link_name = "llvm.nvvm.activemask"]
    fn nvvm_activemask() -> u32;
    #[link_name = "llvm.nvvm.vote.ballot.sync"]
    fn nvvm_ballot(lane_mask: u32, pred: bool) -> u32;
    #[link_name = "llvm.nvvm.match.any.sync.i32"]
    fn nvvm_match_any_i32(lane_mask: u32, key: u32) -> u32;
    #[link_name = "llvm.nvvm.match.any.sync.i64"]
    fn nvvm_match_any_i64(lane_mask: u32, key: u64) -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn nvvm_shfl_idx_i32(lane_mask: u32, value: u32, src_lane: u32, clamp: u32) -> u32;
    #[link_name = "llvm.nvvm.bar.warp.sync"]
    fn nvvm_bar_warp_sync(lane_mask: u32);
}

#[cfg(target_feature = "sm_80")]
unsafe extern "C" {
    #[link_name = "llvm.nvvm.redux.sync.or"]
    fn nvvm_redux_or(value: u32, lane_mask: u32) -> u32;
}

/// `c` operand of `shfl.sync.idx` for a whole-warp segment: clamp 31, no
/// sub-segments.
const SHFL_WHOLE_WARP: u32 = 0x1f;

macro_rules! sreg {
    ($f:ident) => {
        // SAFETY: reading a PTX special register has no preconditions.
        unsafe { $f() }
    };
}

#[inline(always)]
pub(super) fn lane_id() -> u32 {
    let lane: u32;
    // SAFETY: reading a special register has no preconditions. Not `pure`:
    // read where it is used, so that neither the lane nor what is derived
    // from it (`1 << lane`, the lanes below) is hoisted out of the
    // allocator's loops and kept live across its slow paths.
    unsafe {
        core::arch::asm!("mov.u32 {0}, %laneid;", out(reg32) lane, options(nomem, nostack));
    }
    lane
}

#[inline(always)]
pub(super) fn warp_slot() -> u32 {
    let (sm, slot): (u32, u32);
    // SAFETY: reading special registers has no preconditions. Not `pure`:
    // the compiler must read them where they are used, not hoist them out
    // of the allocator's loops and keep them live across its slow paths.
    unsafe {
        core::arch::asm!(
            "mov.u32 {0}, %smid;",
            "mov.u32 {1}, %warpid;",
            out(reg32) sm,
            out(reg32) slot,
            options(nomem, nostack)
        )
    };
    (sm << 6) | slot
}

#[inline(always)]
pub(super) fn sm_id() -> u32 {
    let sm: u32;
    // SAFETY: reading a special register has no preconditions. Not `pure`,
    // as for `warp_slot`.
    unsafe { core::arch::asm!("mov.u32 {0}, %smid;", out(reg32) sm, options(nomem, nostack)) };
    sm
}

#[inline(always)]
pub(super) fn grid_id() -> u64 {
    let grid: u64;
    // SAFETY: reading a special register has no preconditions.
    unsafe {
        core::arch::asm!("mov.u64 {0}, %gridid;", out(reg64) grid, options(nomem, nostack));
    }
    grid
}

#[inline(always)]
pub(super) fn thread_idx() -> Dim3 {
    Dim3 {
        x: sreg!(sreg_tid_x),
        y: sreg!(sreg_tid_y),
        z: sreg!(sreg_tid_z),
    }
}

#[inline(always)]
pub(super) fn block_idx() -> Dim3 {
    Dim3 {
        x: sreg!(sreg_ctaid_x),
        y: sreg!(sreg_ctaid_y),
        z: sreg!(sreg_ctaid_z),
    }
}

#[inline(always)]
pub(super) fn block_dim() -> Dim3 {
    Dim3 {
        x: sreg!(sreg_ntid_x),
        y: sreg!(sreg_ntid_y),
        z: sreg!(sreg_ntid_z),
    }
}

#[inline(always)]
pub(super) fn grid_dim() -> Dim3 {
    Dim3 {
        x: sreg!(sreg_nctaid_x),
        y: sreg!(sreg_nctaid_y),
        z: sreg!(sreg_nctaid_z),
    }
}

#[inline(always)]
pub(super) fn activemask() -> u32 {
    // SAFETY: `activemask` has no preconditions.
    unsafe { nvvm_activemask() }
}

#[inline(always)]
pub(super) fn ballot(lane_mask: u32, pred: bool) -> u32 {
    // SAFETY: the caller passes the mask of the lanes executing this call,
    // the contract of every sync collective (see the module docs).
    unsafe { nvvm_ballot(lane_mask, pred) }
}

#[inline(always)]
pub(super) fn match_any_u32(lane_mask: u32, key: u32) -> u32 {
    // SAFETY: as for `ballot`.
    unsafe { nvvm_match_any_i32(lane_mask, key) }
}

#[inline(always)]
pub(super) fn match_any_u64(lane_mask: u32, key: u64) -> u32 {
    // SAFETY: as for `ballot`.
    unsafe { nvvm_match_any_i64(lane_mask, key) }
}

#[inline(always)]
pub(super) fn shfl_u32(lane_mask: u32, value: u32, src_lane: u32) -> u32 {
    // SAFETY: as for `ballot`; `src_lane` in `lane_mask` is the caller's
    // contract (otherwise the value is undefined, not unsafe).
    unsafe { nvvm_shfl_idx_i32(lane_mask, value, src_lane, SHFL_WHOLE_WARP) }
}

#[inline(always)]
pub(super) fn shfl_u64(lane_mask: u32, value: u64, src_lane: u32) -> u64 {
    let lo = shfl_u32(lane_mask, value as u32, src_lane);
    let hi = shfl_u32(lane_mask, (value >> 32) as u32, src_lane);
    (u64::from(hi) << 32) | u64::from(lo)
}

#[inline(always)]
pub(super) fn has_redux() -> bool {
    cfg!(target_feature = "sm_80")
}

#[inline(always)]
pub(super) fn reduce_or(lane_mask: u32, value: u32) -> u32 {
    // SAFETY: as for `ballot`.
    #[cfg(target_feature = "sm_80")]
    return unsafe { nvvm_redux_or(value, lane_mask) };
    #[cfg(not(target_feature = "sm_80"))]
    return super::reduce_or_by_shuffles(lane_mask, value);
}

#[inline(always)]
pub(super) fn syncwarp(lane_mask: u32) {
    // SAFETY: as for `ballot`.
    unsafe { nvvm_bar_warp_sync(lane_mask) }
}

#[inline(always)]
pub(super) fn nanosleep(nanoseconds: u32) {
    // SAFETY: `nanosleep` (sm_70+) only suspends the thread.
    unsafe { core::arch::asm!("nanosleep.u32 {0};", in(reg32) nanoseconds, options(nostack)) }
}

#[inline(always)]
pub(super) fn clock() -> u64 {
    sreg!(sreg_globaltimer)
}

#[inline(always)]
pub(super) fn opaque_u32(mut x: u32) -> u32 {
    // SAFETY: a register move. Not `pure`: see `super::opaque_u32`.
    unsafe { core::arch::asm!("mov.b32 {0}, {0};", inout(reg32) x, options(nomem, nostack)) };
    x
}

#[inline(always)]
pub(super) fn opaque_u64(mut x: u64) -> u64 {
    // SAFETY: a register move. Not `pure`: see `super::opaque_u32`.
    unsafe { core::arch::asm!("mov.b64 {0}, {0};", inout(reg64) x, options(nomem, nostack)) };
    x
}
