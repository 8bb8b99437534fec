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
mod profile;
pub mod server;
pub mod snapshot;

pub use cudarc;
pub use device::{driver_present, open_gpu};
pub use error::HostError;
pub use heap::{
    ClassPeak, Heap, HeapConfig, HeapProfile, HeapStats, Mode, NOT_WARPALLOC, RpcCounts, Shortfall,
    SpillCounts,
};
pub use launch::{Buffer, Launcher, Prefer};
pub use snapshot::{Moment, Snapshot};

/// A kernel parameter of your own type (a `#[repr(C)]` struct, say) for a
/// launch builder on either device: `.arg(&KernelParam(value))`. On a GPU
/// cudarc passes its bytes (it is `DeviceRepr`); in the simulator they
/// rebuild the value with its [`Param`](warpalloc_device::kernel::Param)
/// implementation — so the kernel crate needs no cudarc dependency to be
/// launched on both.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct KernelParam<T>(pub T);

// SAFETY: `repr(transparent)` over a `Param`, whose contract makes it plain
// data whose memory is the bytes the simulator passes.
unsafe impl<T: warpalloc_device::kernel::Param> cudarc::driver::DeviceRepr for KernelParam<T> {}

// SAFETY: `repr(transparent)` over a `Param`: its bytes are `T`'s.
unsafe impl<T: warpalloc_device::kernel::Param> warpalloc_device::kernel::Param for KernelParam<T> {
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        T::from_bytes(bytes).map(KernelParam)
    }

    fn to_bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }
}
