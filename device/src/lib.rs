//! warpalloc's device side: what runs inside a kernel.
//!
//! One source for two targets. Built for `nvptx64-nvidia-cuda` (with
//! `warpalloc-builder`) every hardware operation is an NVVM intrinsic or PTX;
//! built for the host, the same code runs on the CPU warp simulator
//! (`warpalloc-sim`), lane by lane, with switch points at every collective and
//! atomic.
//!
//! ```text
//!   kernel code (kernels-tests, your crate)
//!        │  kernel!{} entry points
//!        ▼
//!   simt  ── lanes, warps, collectives, sleep, clock ──┬── nvptx: intrinsics / asm
//!   sync  ── atomics and scoped fences (loom-able)  ───┴── host:  warpalloc-sim
//! ```
//!
//! The unsafe code that touches hardware lives in `simt::nvptx`, `sync` and
//! `panic`; everything above them is portable.

#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(asm_experimental_arch, link_llvm_intrinsics)
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]
#![warn(missing_docs)]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

// Under loom only the lock-free protocols are built (their model tests are
// in `tests/loom.rs`); the heap needs const atomics and real memory.
#[cfg(not(loom))]
mod api;
pub mod cache;
pub mod guard;
#[cfg(not(loom))]
pub mod heap;
pub mod kernel;
#[cfg(all(target_arch = "nvptx64", feature = "panic-handler"))]
mod panic;
#[cfg(not(loom))]
pub mod provider;
pub mod rpc;
#[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
pub mod sim_heap;
pub mod simt;
pub mod size_class;
#[cfg(not(loom))]
pub mod slab;
pub mod sync;

#[cfg(not(loom))]
pub use api::{WarpAlloc, aligned_alloc, calloc, free, heap, malloc, realloc, usable_size};
#[cfg(not(loom))]
pub use heap::{DeviceHeap, Errors, Traffic};

/// The heap of every kernel in a module: configured by the host through
/// `cuModuleGetGlobal` before launch. Zero-initialised: until the host binds
/// it, every allocation returns null.
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub static WARPALLOC_HEAP: DeviceHeap = DeviceHeap::new();

/// Re-exported for `kernel!`'s expansion and for hosts that launch kernels
/// in the simulator.
#[cfg(not(target_arch = "nvptx64"))]
pub use warpalloc_sim as sim;
