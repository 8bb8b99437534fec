//! The first project's kernels: `Vec` with a length that depends on the
//! data, `Box`, and `malloc`/`free` directly — one source, built to PTX for
//! the GPU (host/build.rs) and compiled into the host program for the
//! simulator.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

extern crate alloc;

use alloc::boxed::Box;
use alloc::vec::Vec;

use warpalloc_device::{free, kernel, malloc, simt};

/// On the GPU, `Vec` and `Box` allocate with warpalloc. (In the simulator the
/// kernels use the host program's global allocator, which declares
/// `WarpAlloc` too: see host/src/main.rs.)
#[cfg(target_arch = "nvptx64")]
#[global_allocator]
static GLOBAL: warpalloc_device::WarpAlloc = warpalloc_device::WarpAlloc;

/// What the simulator launches by name (`CudaModule::load_function`): every
/// kernel of this crate.
#[cfg(not(target_arch = "nvptx64"))]
pub const KERNELS: &[warpalloc_device::kernel::Entry] =
    warpalloc_device::kernels![squares, boxes, blocks];

/// What [`squares`] writes for a thread with count `n`: 1² + 2² + … + n².
pub fn sum_of_squares(n: u32) -> u64 {
    let n = u64::from(n);
    n * (n + 1) * (2 * n + 1) / 6
}

/// What [`boxes`] writes for thread `i`.
pub fn boxed_value(i: u32) -> u64 {
    u64::from(i) * 3 + 7
}

kernel! {
    /// Thread `i < n` collects `counts[i]` squares in a `Vec` (its length is
    /// the data's), then writes their sum to `out[i]` — or `u64::MAX` if the
    /// vector's length is wrong.
    pub fn squares(counts: *const u32, out: *mut u64, n: u32) {
        let i = simt::global_thread_id() as u32;
        if i >= n {
            return;
        }
        // SAFETY: the host passes `n` counts and `n` outputs.
        let count = unsafe { *counts.add(i as usize) };
        let mut v = Vec::new();
        for k in 1..=u64::from(count) {
            v.push(k * k);
        }
        let sum = if v.len() == count as usize { v.iter().sum() } else { u64::MAX };
        // SAFETY: as above.
        unsafe { *out.add(i as usize) = sum };
    }
}

kernel! {
    /// Thread `i < n` boxes a value, moves the box through a `Vec<Box<_>>`,
    /// and writes what comes out to `out[i]`.
    pub fn boxes(out: *mut u64, n: u32) {
        let i = simt::global_thread_id() as u32;
        if i >= n {
            return;
        }
        let boxed = Box::new([u64::from(i), 3, 7, 0]);
        let mut held = Vec::with_capacity(1);
        held.push(boxed);
        let b = held.pop().unwrap_or_else(|| Box::new([0; 4]));
        // SAFETY: the host passes `n` outputs.
        unsafe { *out.add(i as usize) = b[0] * b[1] + b[2] + b[3] };
    }
}

kernel! {
    /// Thread `i < n` takes a block of 16 to 4 096 bytes with `malloc`,
    /// fills it with its index, checks it, and frees it; `ok[i]` is 1 when
    /// all of that worked, 0 when `malloc` returned null, 2 on a wrong byte.
    pub fn blocks(ok: *mut u32, n: u32) {
        let i = simt::global_thread_id() as u32;
        if i >= n {
            return;
        }
        let size = 16usize << (i % 9);
        let p = malloc(size);
        let result = if p.is_null() {
            0
        } else {
            // SAFETY: a fresh block of `size` bytes, ours until we free it.
            unsafe {
                for k in 0..size {
                    p.add(k).write(i as u8);
                }
                let good = (0..size).all(|k| p.add(k).read() == i as u8);
                free(p);
                if good { 1 } else { 2 }
            }
        };
        // SAFETY: the host passes `n` results.
        unsafe { *ok.add(i as usize) = result };
    }
}
