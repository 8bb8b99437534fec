//! warpalloc: `malloc`/`free` inside Rust GPU kernels — the library a
//! program that launches kernels depends on.
//!
//! ```text
//!   your kernel crate ── warpalloc-device (no_std): malloc, free, WarpAlloc,
//!                        kernel!{}; built to PTX by warpalloc-builder
//!   your program ─────── warpalloc (this crate): Heap over a Device
//!                          ├── device::Cuda      a GPU (CUDA driver, cudarc)
//!                          └── device::Emulated  the CPU warp simulator
//! ```
//!
//! A [`Heap`] binds a module's `WARPALLOC_HEAP`, serves its kernels' requests
//! for memory from the process's RPC server thread, and backs them with CUDA
//! virtual memory (or its host emulation). This crate has no command-line
//! dependencies and builds no kernels; the `warpalloc` tool
//! (`warpalloc-tool`) is a crate of its own.

#![warn(missing_docs)]

pub use warpalloc_host::{
    Buffer, Heap, HeapConfig, HeapStats, HostError, Launcher, Mode, Prefer, RpcCounts, backing,
    device, emulated, server,
};

/// GPU `n`'s context as a `Result` ("no CUDA driver" rather than cudarc's
/// panic), and whether libcuda can be loaded at all.
pub use warpalloc_host::{driver_present, open_gpu};

/// Whether this program's `#[global_allocator]` is `WarpAlloc` (in the
/// simulator only then do kernels' `Vec`/`Box` use the heap; a program that
/// links a module on the emulated device without it is told so once, on
/// stderr: [`NOT_WARPALLOC`]).
pub use warpalloc_device::is_global_allocator;
pub use warpalloc_host::NOT_WARPALLOC;

/// What a heap attaches to and links (implemented for cudarc's
/// `Arc<CudaContext>` and `Arc<CudaModule>`, and for the emulated ones).
pub use warpalloc_host::device::{AsDevice, AsModule};

/// The cudarc that warpalloc's GPU side is built on (0.19): a program's own
/// `CudaContext` and `CudaModule` must come from this version to attach.
pub use warpalloc_host::cudarc;

/// The global allocator for a host program whose simulated kernels use
/// `Vec`/`Box` (and for kernel crates on the GPU): a heap's pointers go back
/// to that heap, everything else to the system allocator.
pub use warpalloc_device::WarpAlloc;

/// What the device heap reports: its error record, traffic and census.
pub use warpalloc_device::heap::Census;
pub use warpalloc_device::{Errors, Traffic};

/// Kernels written once for the GPU and the simulator (`kernel!{}` defines
/// them in the kernel crate).
pub use warpalloc_device::kernel::Kernel;

/// The CPU warp simulator's launch settings (seed, workers, convergence),
/// for the emulated device.
pub use warpalloc_sim::{Convergence, LaunchConfig};
