//! Builds `kernels-tests` (and through it `warpalloc-device`) to PTX with
//! warpalloc-builder, for `warpalloc_tool::ptx`: an `sm_75` module, which
//! ptxas and the driver accept for every later architecture, and the same
//! crate built for `sm_80` (what Ampere and later run: it has what sm_80
//! added, `redux.sync` among them; assembled for sm_90 it gives the same
//! registers as a build for sm_90 itself, measured on every allocator
//! kernel, so one module serves Ampere, Ada, Hopper and Blackwell).

use std::path::PathBuf;

use warpalloc_builder::{Arch, PtxBuilder, PtxOutput, declarations};

/// The events global's name (`warpalloc_device::event::EVENTS_SYMBOL`,
/// which a build script cannot import: the device crate is no build
/// dependency; `tests/ptx.rs` checks that the two agree).
const EVENTS_SYMBOL: &str = "WARPALLOC_EVENTS";

/// Builds kernels-tests for `arch` to `file`, with the crate's `features`;
/// a compiler warning in the device code fails the build (the repository's
/// device code is warning-free).
fn build(arch: Arch, file: &std::path::Path, features: &[&str]) -> PtxOutput {
    let builder = features.iter().fold(
        PtxBuilder::new("kernels-tests").arch(arch).out_file(file),
        |b, f| b.feature(*f),
    );
    match builder.build() {
        Ok(ptx) if ptx.warnings.is_empty() => ptx,
        Ok(ptx) => {
            eprintln!(
                "error: kernels-tests for {arch} built with warnings:\n{}",
                ptx.warnings.join("\n")
            );
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("error: building kernels-tests to PTX for {arch}: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Some(out_dir) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        eprintln!("error: OUT_DIR is not set (not run by cargo?)");
        std::process::exit(1);
    };
    let ptx = build(Arch::Sm75, &out_dir.join("kernels_tests.ptx"), &[]);
    let sm80 = build(Arch::Sm80, &out_dir.join("kernels_tests_sm80.ptx"), &[]);
    if sm80.kernels != ptx.kernels || sm80.globals != ptx.globals {
        eprintln!(
            "error: the sm_75 and sm_80 builds of kernels-tests differ in kernels or globals"
        );
        std::process::exit(1);
    }
    // The events build (`warpalloc bench --events` on a GPU): the sm_80
    // kernels counting the allocator's events in one more global.
    let events = build(
        Arch::Sm80,
        &out_dir.join("kernels_tests_sm80_events.ptx"),
        &["gpu-events"],
    );
    let mut with_events = sm80.globals.clone();
    with_events.push(EVENTS_SYMBOL.into());
    let (mut got, mut want) = (events.globals.clone(), with_events);
    got.sort();
    want.sort();
    if events.kernels != sm80.kernels || got != want {
        eprintln!(
            "error: the events build of kernels-tests has kernels or globals other than the sm_80 build's and WARPALLOC_EVENTS: {:?}, {:?}",
            events.kernels, events.globals
        );
        std::process::exit(1);
    }
    let decls = out_dir.join("kernels_tests_declarations.ptx");
    let text = match std::fs::read_to_string(&ptx.path) {
        Ok(t) => declarations(&t),
        Err(e) => {
            eprintln!("error: reading {}: {e}", ptx.path.display());
            std::process::exit(1);
        }
    };
    if std::fs::read_to_string(&decls).ok().as_deref() != Some(text.as_str())
        && let Err(e) = std::fs::write(&decls, text)
    {
        eprintln!("error: writing {}: {e}", decls.display());
        std::process::exit(1);
    }
    let list = |names: &[String]| names.iter().map(|n| format!("{n:?}, ")).collect::<String>();
    let names = format!(
        "/// The `.entry` kernels of [`KERNELS_TESTS`], in file order.\n\
         pub const KERNEL_NAMES: &[&str] = &[{}];\n\
         /// The visible globals of [`KERNELS_TESTS`] (for `cuModuleGetGlobal`).\n\
         pub const GLOBAL_NAMES: &[&str] = &[{}];\n\
         /// The architecture [`KERNELS_TESTS`] targets.\n\
         pub const ARCH: &str = {:?};\n",
        list(&ptx.kernels),
        list(&ptx.globals),
        ptx.arch.as_str(),
    );
    let names_file = out_dir.join("kernels_tests_names.rs");
    if std::fs::read_to_string(&names_file).ok().as_deref() != Some(names.as_str())
        && let Err(e) = std::fs::write(&names_file, names)
    {
        eprintln!("error: writing {}: {e}", names_file.display());
        std::process::exit(1);
    }
}
