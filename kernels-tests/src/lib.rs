//! warpalloc's test and stress kernels.
//!
//! One source: built for nvptx64 by `warpalloc-builder` (the root crate embeds
//! the PTX) and run on the CPU warp simulator by the tests. Every kernel's
//! inputs come from [`input`], a pure function that the host-side reference
//! computations call too.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]
#![warn(missing_docs)]

extern crate alloc;

pub mod collections;
pub mod demo;
pub mod rpc;
pub mod simt;
pub mod stress;

/// On the GPU, `alloc::{Box, Vec, String}` allocate with warpalloc. (On the
/// host the kernels use whatever the test binary declares: see
/// `tests/collections.rs`.)
#[cfg(target_arch = "nvptx64")]
#[global_allocator]
static GLOBAL: warpalloc_device::WarpAlloc = warpalloc_device::WarpAlloc;

/// A 32-bit integer hash (lowbias32): cheap, well mixed, identical on the GPU
/// and the host.
#[inline(always)]
pub const fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The `k`-th input word of a test for `who` (a thread or warp id) under
/// `seed`.
#[inline(always)]
pub const fn input(seed: u32, who: u32, k: u32) -> u32 {
    mix(mix(seed ^ mix(k.wrapping_add(0x9e37_79b9))) ^ who)
}

/// The `n`-th set bit of `mask` (`n < mask.count_ones()`), as a lane index.
#[inline(always)]
pub const fn nth_lane(mut mask: u32, n: u32) -> u32 {
    let mut i = 0;
    while i < n {
        mask &= mask - 1;
        i += 1;
    }
    mask.trailing_zeros()
}
