//! The `warpalloc` tool's crate: the embedded PTX of the test and stress
//! kernels ([`ptx`]) behind the `warpalloc` binary (stress, bench, demo,
//! info) and the repository's end-to-end tests. Programs depend on the
//! `warpalloc` library instead.

/// The device code, built to PTX by `build.rs` (warpalloc-builder).
pub mod ptx {
    /// `kernels-tests` (with `warpalloc-device`) as one PTX module for `sm_75`,
    /// which ptxas and the driver also accept for sm_80..sm_90+ (the tool
    /// loads it on Turing and on the emulated device).
    pub const KERNELS_TESTS: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels_tests.ptx"));

    /// The same kernels built for `sm_80`: what a program built for
    /// Ampere or later runs (it uses instructions of sm_80 and later, such
    /// as `redux.sync` in the free's combining; assembled for sm_90 it
    /// takes the registers a build for sm_90 takes). Same kernels and
    /// globals.
    pub const KERNELS_TESTS_SM80: &str =
        include_str!(concat!(env!("OUT_DIR"), "/kernels_tests_sm80.ptx"));

    /// The sm_80 kernels built with the device crate's `gpu-events`: the
    /// allocator counts its events in the module global
    /// `WARPALLOC_EVENTS` (`warpalloc_device::event`), which
    /// `warpalloc bench --events` reads on a GPU. Same kernels, one more
    /// global; for counting, not timing.
    pub const KERNELS_TESTS_SM80_EVENTS: &str =
        include_str!(concat!(env!("OUT_DIR"), "/kernels_tests_sm80_events.ptx"));

    /// The module for a GPU of compute capability `cc`: the sm_80 build
    /// from 8.0 on, else the sm_75 one. The emulated device (0.0) gets the
    /// sm_75 module (the simulator runs the same Rust either way; which
    /// architecture's paths it takes is its launches' capability).
    pub fn for_capability(cc: (i32, i32)) -> &'static str {
        if cc >= (8, 0) {
            KERNELS_TESTS_SM80
        } else {
            KERNELS_TESTS
        }
    }

    /// The module that counts events on a GPU of compute capability `cc`
    /// (8.0 and later: [`KERNELS_TESTS_SM80_EVENTS`]); elsewhere
    /// [`for_capability`]'s — the simulator counts events in any build, and
    /// a Turing GPU has no events build (its loads of the sm_80 module
    /// would fail).
    pub fn events_for_capability(cc: (i32, i32)) -> &'static str {
        if cc >= (8, 0) {
            KERNELS_TESTS_SM80_EVENTS
        } else {
            for_capability(cc)
        }
    }

    /// A module of `ptx`'s header and its heap link's two globals alone
    /// (`WARPALLOC_HEAP`, `WARPALLOC_HEAP_LAYOUT`): what `Heap::link`
    /// reads and writes, and nothing a driver takes long to load
    /// (`warpalloc info --link-check`).
    pub fn link_only(ptx: &str) -> String {
        let mut text: String = ptx
            .lines()
            .filter(|l| {
                [".version", ".target", ".address_size"]
                    .iter()
                    .any(|h| l.starts_with(h))
                    || (l.starts_with(".visible .global") && l.contains("WARPALLOC_HEAP"))
            })
            .collect::<Vec<_>>()
            .join("\n");
        text.push('\n');
        text
    }

    /// [`KERNELS_TESTS`] with every function body emptied: the same globals
    /// and entry points, quick to parse where parsing is slow (the emulated
    /// device under Miri).
    pub const KERNELS_TESTS_DECLARATIONS: &str =
        include_str!(concat!(env!("OUT_DIR"), "/kernels_tests_declarations.ptx"));

    include!(concat!(env!("OUT_DIR"), "/kernels_tests_names.rs"));
}
