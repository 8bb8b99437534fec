//! The `warpalloc` tool's crate: the embedded PTX of the test and stress
//! kernels ([`ptx`]) behind the `warpalloc` binary (stress, bench, demo,
//! info) and the repository's end-to-end tests. Programs depend on the
//! `warpalloc` library instead.

/// The device code, built to PTX by `build.rs` (warpalloc-builder).
pub mod ptx {
    /// `kernels-tests` (with `warpalloc-device`) as one PTX module for `sm_75`,
    /// which ptxas and the driver also accept for sm_80..sm_90+.
    pub const KERNELS_TESTS: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_tests.ptx"));

    /// [`KERNELS_TESTS`] with every function body emptied: the same globals
    /// and entry points, quick to parse where parsing is slow (the emulated
    /// device under Miri).
    pub const KERNELS_TESTS_DECLARATIONS: &str =
        include_str!(concat!(env!("OUT_DIR"), "/kernels_tests_declarations.ptx"));

    include!(concat!(env!("OUT_DIR"), "/kernels_tests_names.rs"));
}
