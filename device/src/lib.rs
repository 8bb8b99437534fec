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
//!
//! # Words
//!
//! | word | meaning |
//! |---|---|
//! | block | what one `malloc` returns: a slot of a slab's class size, or a large block |
//! | large block | a request of 1 MiB or more: whole granules straight from the host |
//! | slab | 2 MiB aligned to 2 MiB, serving blocks of one size class; header, bitfield, blocks |
//! | size class | one of 46 block sizes from 16 B to 1 MiB (`size_class`) |
//! | region | the heap's one range of device address space, reserved by the host |
//! | granule | a 2 MiB unit of the region; the granule table says what each one is |
//! | slot | an entry of the slot table: a reference-counted guard publishing one slab |
//! | empty slab | a published slab with no live block: its class reuses it in place; once the host refuses, a claim elsewhere takes it over; `trim` gives it back |
//! | stream | warps that share a class's search hint (warp slot % the heap's streams, one per resident warp): warps running at once start at different slabs |
//! | pool | slabs the host mapped before launch (pool mode), a stack on the device |
//! | mailbox, port | the RPC channel to the host in pinned host memory; a port per warp at a time |
//! | lane_mask | the lanes that are here, calling together |
//! | uniform | the lanes of `lane_mask` that share a target (a slab, a slot) |
//!
//! # Modules
//!
//! ```text
//!   api            malloc, free, calloc, realloc, aligned_alloc, WarpAlloc
//!   heap           DeviceHeap: the front end; search (slot search); check
//!   abi            what the host configures and reads, and the layout both agree on
//!   size_class  slab  guard  empty  pool  granule    the allocator's parts
//!   index          index arithmetic without division
//!   rpc            wire (typed requests/replies), client, mailbox, server steps
//!   simt  sync     the hardware (or the simulator, or loom)
//!   kernel         kernel!{}: one function, a PTX entry point and a simulator kernel
//! ```

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
pub mod abi;
#[cfg(not(loom))]
mod api;
pub mod empty;
#[cfg(not(loom))]
pub mod event;
#[cfg(not(loom))]
pub mod granule;
pub mod guard;
#[cfg(not(loom))]
pub mod heap;
pub mod index;
pub mod kernel;
#[cfg(all(target_arch = "nvptx64", feature = "panic-handler"))]
mod panic;
pub mod pool;
#[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
pub mod registry;
pub mod rpc;
pub mod simt;
pub mod size_class;
#[cfg(not(loom))]
pub mod slab;
pub mod sync;

#[cfg(not(loom))]
pub use abi::{ClassCounts, Errors, KernelName, Traffic};
#[cfg(all(not(loom), not(target_arch = "nvptx64")))]
pub use api::is_global_allocator;
#[cfg(not(loom))]
pub use api::{
    WarpAlloc, aligned_alloc, calloc, free, heap, kernel_ended, malloc, realloc, usable_size,
};
#[cfg(not(loom))]
pub use heap::DeviceHeap;

/// The heap of every kernel in a module: the host's `Heap` links the module
/// (through `cuModuleGetGlobal` on a GPU) by writing its device heap's
/// address here. Zero: until a heap is linked, every allocation returns null.
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub static WARPALLOC_HEAP: abi::HeapLink = abi::HeapLink::unlinked();

/// The layout of the `DeviceHeap` this module was compiled for: the host
/// compares it with its own before it touches the heap (`abi::Layout`).
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub static WARPALLOC_HEAP_LAYOUT: [u64; abi::LAYOUT_WORDS] = heap::LAYOUT.words();

/// Re-exported for `kernel!`'s expansion and for hosts that launch kernels
/// in the simulator.
#[cfg(not(target_arch = "nvptx64"))]
pub use warpalloc_sim as sim;
