//! The `warpalloc` tool's crate: the embedded PTX of the test and stress
//! kernels ([`ptx`]) behind the `warpalloc` binary (stress, bench, demo,
//! info) and the repository's end-to-end tests. Programs depend on the
//! `warpalloc` library instead.

/// The device code, built to PTX by `build.rs` (warpalloc-builder).
pub mod ptx {
    /// `kernels-tests` (with `warpalloc-device`) as one PTX module for `sm_75`,
    /// which ptxas and the driver also accept for sm_80..sm_90+.
    pub const KERNELS_TESTS: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_tests.ptx"));

    /// The same kernels built for `sm_90` natively: what a program built
    /// for Hopper runs (it uses instructions of sm_80 and later, such as
    /// `redux.sync` in the free's combining). Same kernels and globals.
    pub const KERNELS_TESTS_SM90: &str =
        include_str!(concat!(env!("OUT_DIR"), "/kernels_tests_sm90.ptx"));

    /// The module for a GPU of compute capability `cc`: the native sm_90
    /// build from 9.0 on, else the sm_75 one. The emulated device (0.0)
    /// gets the sm_75 module (the simulator runs the same Rust either way).
    pub fn for_capability(cc: (i32, i32)) -> &'static str {
        if cc >= (9, 0) {
            KERNELS_TESTS_SM90
        } else {
            KERNELS_TESTS
        }
    }

    /// [`KERNELS_TESTS`] with every function body emptied: the same globals
    /// and entry points, quick to parse where parsing is slow (the emulated
    /// device under Miri).
    pub const KERNELS_TESTS_DECLARATIONS: &str =
        include_str!(concat!(env!("OUT_DIR"), "/kernels_tests_declarations.ptx"));

    include!(concat!(env!("OUT_DIR"), "/kernels_tests_names.rs"));
}
