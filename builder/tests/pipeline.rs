//! The whole pipeline on a fixture kernel workspace (`tests/fixture`), and its
//! error paths.

use std::path::{Path, PathBuf};

use warpalloc_builder::ptxas::{Ptxas, SETUP_COMMAND};
use warpalloc_builder::{Arch, BuildError, PtxBuilder};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixture")
}

/// The nested target directory the workspace's own build script uses, so
/// `core` for nvptx64 is compiled once for both.
fn shared_target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .join("warpalloc-ptx")
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn builder() -> PtxBuilder {
    PtxBuilder::new(fixture().join("kern"))
        .target_dir(shared_target_dir())
        .cargo_directives(false)
}

#[test]
fn builds_links_and_assembles() {
    let out = builder()
        .out_file(tmp("fixture_kern.ptx"))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let ptx = std::fs::read_to_string(&out.path).expect("the PTX file");
    assert_eq!(out.arch, Arch::Sm75);
    assert!(ptx.contains(".target sm_75"), "{ptx}");

    let mut kernels = out.kernels.clone();
    kernels.sort();
    assert_eq!(kernels, ["fixture_ballot", "fixture_boxed"]);
    let mut globals = out.globals.clone();
    globals.sort();
    assert_eq!(globals, ["FIXTURE_HEAP_TOP", "FIXTURE_LIMIT"]);
    assert!(out.functions.is_empty(), "{:?}", out.functions);

    assert!(ptx.contains("vote.sync.ballot"), "{ptx}");
    // What the kernel crate reads with `option_env!`, watched.
    assert_eq!(out.env_dependencies, ["WARPALLOC_FIXTURE_EXTRA"]);
    // A dependency's build script's `cargo:warning`, passed on.
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("fixture-dev@0.1.0: the fixture's build script ran")),
        "{:#?}",
        out.warnings
    );
    // Internalized and dropped: the unused helper, core, the allocator shim.
    assert!(!ptx.contains("unused_helper"), "{ptx}");
    assert!(!ptx.contains(".extern"), "{ptx}");
    assert!(!ptx.contains("___rust_no_alloc_shim"), "{ptx}");

    // Dependencies: the two crates' sources and manifests, the workspace
    // manifest and lock file; nothing of the sysroot or the registry.
    let fx = fixture().canonicalize().expect("fixture dir");
    for want in [
        "kern/src/lib.rs",
        "dev/src/lib.rs",
        "dev/build.rs",
        "helper/src/lib.rs",
        "kern/Cargo.toml",
        "dev/Cargo.toml",
        "helper/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        assert!(
            out.dependencies.contains(&fx.join(want)),
            "{want} missing from {:#?}",
            out.dependencies
        );
    }
    assert_eq!(out.dependencies.len(), 9, "{:#?}", out.dependencies);

    let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    for arch in [Arch::Sm75, Arch::Sm90] {
        let report = ptxas
            .assemble(&out.path, arch)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.kernels().count(), 2, "{}", report.log);
        for k in report.kernels() {
            eprintln!("{arch} {k}");
            assert!(k.registers.is_some(), "{}", report.log);
        }
    }
}

#[test]
fn undefined_symbols_are_a_typed_error() {
    let err = builder()
        .feature("undefined")
        .out_file(tmp("fixture_kern_undefined.ptx"))
        .build()
        .expect_err("a kernel calling an undefined function must not build");
    match &err {
        BuildError::UndefinedSymbols { symbols, hints } => {
            assert_eq!(symbols, &["fixture_missing_fn"]);
            assert!(hints[0].contains("extern"), "{hints:?}");
        }
        other => panic!("expected UndefinedSymbols, got {other}"),
    }
}

#[test]
fn compile_errors_are_reported() {
    let err = builder()
        .feature("compile-error")
        .out_file(tmp("fixture_kern_error.ptx"))
        .build()
        .expect_err("compile_error! must fail the build");
    let BuildError::Cargo { diagnostics, .. } = &err else {
        panic!("expected a cargo error, got {err}");
    };
    assert!(
        diagnostics.contains("fixture compile error"),
        "{diagnostics}"
    );
}

#[test]
fn missing_rust_src_names_the_fix() {
    let empty = tmp("empty-sysroot");
    std::fs::create_dir_all(&empty).expect("temp dir");
    let err = builder()
        .sysroot(&empty)
        .build()
        .expect_err("an empty sysroot has no rust-src");
    let BuildError::MissingComponents { missing, .. } = &err else {
        panic!("expected MissingComponents, got {err}");
    };
    assert_eq!(missing, &["rust-src", "llvm-tools"]);
    let msg = err.to_string();
    assert!(
        msg.contains("rustup component add --toolchain ") && msg.contains(" rust-src llvm-tools"),
        "{msg}"
    );
    assert!(msg.contains("cargo xtask setup"), "{msg}");
}

#[test]
fn missing_llvm_tools_names_the_fix() {
    let empty = tmp("empty-llvm-tools");
    std::fs::create_dir_all(&empty).expect("temp dir");
    let err = builder()
        .llvm_tools_dir(&empty)
        .build()
        .expect_err("an empty tool dir has no llvm-link");
    let BuildError::MissingComponents { missing, .. } = &err else {
        panic!("expected MissingComponents, got {err}");
    };
    assert_eq!(missing, &["llvm-tools"]);
    assert!(
        err.to_string()
            .contains("rust-src llvm-tools` (or `cargo xtask setup`"),
        "{err}"
    );
}

#[test]
fn missing_crate_is_a_typed_error() {
    let err = PtxBuilder::new(fixture().join("no-such-crate"))
        .cargo_directives(false)
        .build()
        .expect_err("no crate there");
    assert!(matches!(err, BuildError::NoCrate(_)), "{err}");
}

#[test]
fn ptxas_setup_command_is_named() {
    assert_eq!(SETUP_COMMAND, "cargo xtask setup");
}

/// A one-crate workspace in the test's temporary directory.
fn scratch_crate(name: &str, manifest_tail: &str) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(dir.join("src")).expect("create the crate");
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [workspace]\n\n{manifest_tail}"
        ),
    )
    .expect("write Cargo.toml");
    std::fs::write(dir.join("src/lib.rs"), "#![no_std]\n").expect("write lib.rs");
    dir
}

#[test]
fn a_workspace_without_the_ptx_profile_gets_the_snippet_to_paste() {
    let dir = scratch_crate("no_profile_kern", "");
    let err = PtxBuilder::new(&dir)
        .target_dir(tmp("no_profile_target"))
        .cargo_directives(false)
        .build()
        .expect_err("no ptx profile");
    assert!(matches!(err, BuildError::MissingProfile { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("[profile.ptx]\ninherits = \"release\"")
            && text.contains("panic = \"abort\""),
        "{text}"
    );
}

#[test]
fn a_cdylib_kernel_crate_is_told_to_be_a_plain_library() {
    let dir = scratch_crate(
        "cdylib_kern",
        "[lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n",
    );
    let err = PtxBuilder::new(&dir)
        .cargo_directives(false)
        .build()
        .expect_err("a cdylib");
    assert!(matches!(err, BuildError::CdylibCrate { .. }), "{err}");
    assert!(err.to_string().contains("crate-type = [\"rlib\"]"), "{err}");
}

#[test]
fn a_kernel_crate_with_std_is_told_to_add_no_std() {
    let dir = scratch_crate(
        "std_kern",
        "[profile.ptx]\ninherits = \"release\"\npanic = \"abort\"\n",
    );
    std::fs::write(
        dir.join("src/lib.rs"),
        "pub fn bytes() -> Vec<u8> {\n    std::vec::Vec::new()\n}\n",
    )
    .expect("write lib.rs");
    let err = PtxBuilder::new(&dir)
        .target_dir(tmp("std_kern_target"))
        .cargo_directives(false)
        .build()
        .expect_err("a std crate");
    assert!(matches!(err, BuildError::UsesStd { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.lines()
            .next()
            .is_some_and(|first| first.contains("add `#![no_std]`")),
        "{text}"
    );
}
