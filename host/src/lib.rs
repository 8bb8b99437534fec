//! warpalloc's host side: what lives in the program that launches kernels.
//!
//! ```text
//!   your program ── Heap ── Launcher ──┐
//!                    │                 ▼
//!                    │        device (one interface: Device, Module)
//!                    │          ├── Cuda      the CUDA driver through cudarc
//!                    │          └── Emulated  the CPU warp simulator
//!                    ├── server   the RPC server thread (every heap's mailbox)
//!                    └── backing  Region over CudaVmm | HostEmulated
//! ```
//!
//! [`Heap`] has one code path above the device interface: CI runs all of it
//! on the emulated device, and a GPU adds only the raw driver calls of
//! `device::cuda`. A machine without libcuda or without a GPU gets a typed
//! [`HostError`], never cudarc's panic.

#![warn(missing_docs)]

pub mod backing;
pub mod device;
pub mod emulated;
mod error;
pub mod heap;
mod launch;
pub mod server;

pub use cudarc;
pub use device::{driver_present, open_gpu};
pub use error::HostError;
pub use heap::{Heap, HeapConfig, HeapStats, Mode, NOT_WARPALLOC, RpcCounts};
pub use launch::{Buffer, Launcher, Prefer};
