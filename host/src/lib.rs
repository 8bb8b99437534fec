//! warpalloc's host side: what lives in the program that launches kernels.
//!
//! ```text
//!   your program ── Launcher ──┬── Gpu (CUDA driver through cudarc): PTX module,
//!                              │    kernel launch, device buffers
//!                              └── simulator (warpalloc-sim): the same kernels
//!                                   on the CPU, host buffers
//! ```
//!
//! CUDA driver code comes in layers, as in cudarc: thin `unsafe` calls that
//! return `Result` (cudarc's `driver::result` and `driver::sys`), then safe
//! RAII types ([`gpu::Module`], [`Buffer`]) whose `Drop` records errors in
//! the context instead of panicking. A machine without libcuda or without a
//! GPU gets a typed [`HostError`], never cudarc's panic, and the simulator
//! still runs every kernel.

#![warn(missing_docs)]

pub mod backing;
mod error;
pub mod gpu;
mod launch;
pub mod server;

pub use cudarc;
pub use error::HostError;
pub use launch::{Buffer, LaunchReport, Launcher, Prefer, Target};
