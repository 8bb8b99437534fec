//! Which inherited environment variables the nested `cargo build` must not see.
//!
//! A build script inherits the outer build's environment: its rustflags, its
//! wrappers (clippy-driver, sccache, miri), its target directory, its profile
//! and feature variables. Passed on, they would break the nvptx64 build (x86
//! flags, `clippy-driver` as the compiler) or tie it to the outer build.

/// Variables removed by name.
const EXACT: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC",
    "RUSTDOC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTDOC_WRAPPER",
    "RUSTC_LINKER",
    "CLIPPY_ARGS",
    "CLIPPY_CONF_DIR",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "NUM_JOBS",
    "OPT_LEVEL",
    "DEBUG",
    "PROFILE",
    "LLVM_PROFILE_FILE",
];

/// Prefixes removed.
const PREFIXES: &[&str] = &["MIRI", "__CARGO", "DEP_", "CARGO_"];

/// `CARGO_*` variables kept: where cargo's home and registries are and how to
/// reach them, the jobserver, logging.
const CARGO_KEEP: &[&str] = &[
    "CARGO_HOME",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
    "CARGO_SOURCE_",
    "CARGO_MAKEFLAGS",
    "CARGO_LOG",
    "CARGO_TERM_",
];

/// Whether the nested build drops the inherited variable `key`.
///
/// Dropped: rustflags (`RUSTFLAGS`, `CARGO_ENCODED_RUSTFLAGS`), wrappers
/// (`RUSTC_WRAPPER`, `RUSTC_WORKSPACE_WRAPPER`), `MIRI*`, the variables cargo
/// sets for build scripts (`OUT_DIR`, `TARGET`, `CARGO_CFG_*`, `CARGO_FEATURE_*`,
/// `CARGO_PKG_*`, `CARGO_PRIMARY_PACKAGE`...), and cargo's configuration
/// variables (`CARGO_TARGET_DIR`, `CARGO_BUILD_*`, `CARGO_PROFILE_*`,
/// `CARGO_UNSTABLE_*`...). Kept: `CARGO_HOME`, network and registry settings,
/// the jobserver (`CARGO_MAKEFLAGS`, `MAKEFLAGS`), `RUSTUP_*`, `PATH`, `HOME`.
pub fn is_scrubbed(key: &str) -> bool {
    if EXACT.contains(&key) {
        return true;
    }
    if key.starts_with("CARGO_") {
        return !CARGO_KEEP.iter().any(|k| key.starts_with(k));
    }
    PREFIXES.iter().any(|p| key.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::is_scrubbed;

    #[test]
    fn scrubbed() {
        for k in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "RUSTC",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_BUILD_RUSTFLAGS",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_CFG_TARGET_ARCH",
            "CARGO_FEATURE_STD",
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_PROFILE_RELEASE_LTO",
            "CARGO_UNSTABLE_BUILD_STD",
            "CARGO_TARGET_NVPTX64_NVIDIA_CUDA_RUSTFLAGS",
            "CARGO_INCREMENTAL",
            "MIRIFLAGS",
            "MIRI_SYSROOT",
            "CLIPPY_ARGS",
            "__CARGO_DEFAULT_LIB_METADATA",
            "OUT_DIR",
            "TARGET",
            "DEP_Z_INCLUDE",
        ] {
            assert!(is_scrubbed(k), "{k} should be scrubbed");
        }
    }

    #[test]
    fn kept() {
        for k in [
            "PATH",
            "HOME",
            "CARGO_HOME",
            "CARGO_NET_OFFLINE",
            "CARGO_HTTP_TIMEOUT",
            "CARGO_REGISTRIES_CRATES_IO_PROTOCOL",
            "CARGO_MAKEFLAGS",
            "MAKEFLAGS",
            "RUSTUP_TOOLCHAIN",
            "RUSTUP_HOME",
            "RUST_BACKTRACE",
        ] {
            assert!(!is_scrubbed(k), "{k} should be kept");
        }
    }
}
