//! warpalloc: `malloc`/`free` inside Rust GPU kernels.
//!
//! This crate is the launcher side: [`Heap`] (a device heap served by the
//! RPC server and backed by CUDA virtual memory, or by its emulation in the
//! simulator), the embedded PTX of the test and stress kernels ([`ptx`]), and
//! the `warpalloc` command-line tool.

pub mod heap;

pub use heap::{Heap, HeapConfig, HeapStats, Mode, RpcCounts};

/// The device code, built to PTX by `build.rs` (warpalloc-builder).
pub mod ptx {
    /// `kernels-tests` (with `warpalloc-device`) as one PTX module for `sm_75`,
    /// which ptxas and the driver also accept for sm_80..sm_90+.
    pub const KERNELS_TESTS: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_tests.ptx"));

    include!(concat!(env!("OUT_DIR"), "/kernels_tests_names.rs"));
}
