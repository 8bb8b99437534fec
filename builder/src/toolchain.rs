//! The installed nightly: its cargo, rustc, sysroot and `llvm-tools`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildError;

/// The `llvm-tools` binaries the builder runs.
pub const LLVM_TOOLS: &[&str] = &["llvm-ar", "llvm-link", "llvm-nm", "opt", "llc"];

/// The components the builder needs, as `rustup component add` spells them.
pub const REQUIRED_COMPONENTS: &[&str] = &["rust-src", "llvm-tools"];

/// The toolchain the builder drives.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// The `cargo` to run (the outer build's own, from `$CARGO`).
    pub cargo: PathBuf,
    /// The `rustc` next to it.
    pub rustc: PathBuf,
    /// `rustc --print sysroot`, or an override.
    pub sysroot: PathBuf,
    /// The host triple (`x86_64-unknown-linux-gnu`).
    pub host: String,
    /// Where `llvm-link`, `opt`, `llc`... are.
    pub llvm_bin: PathBuf,
}

impl Toolchain {
    /// Finds the toolchain and checks that its `rust-src` and `llvm-tools` are there.
    pub fn discover(
        sysroot_override: Option<&Path>,
        llvm_bin_override: Option<&Path>,
    ) -> Result<Self, BuildError> {
        let cargo = std::env::var_os("CARGO")
            .filter(|c| !c.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("cargo"));
        let rustc = sibling_rustc(&cargo).unwrap_or_else(|| PathBuf::from("rustc"));

        let version = capture(Command::new(&rustc).arg("-vV"))?;
        let host = version
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .map(|h| h.trim().to_owned())
            .ok_or_else(|| {
                BuildError::Toolchain(format!("`{} -vV` printed no host triple", rustc.display()))
            })?;
        if let Some(release) = version.lines().find_map(|l| l.strip_prefix("release: "))
            && !builds_std(release.trim())
        {
            return Err(BuildError::NotNightly {
                release: release.trim().to_owned(),
            });
        }
        let sysroot = match sysroot_override {
            Some(s) => s.to_path_buf(),
            None => {
                PathBuf::from(capture(Command::new(&rustc).args(["--print", "sysroot"]))?.trim())
            }
        };
        let llvm_bin = match llvm_bin_override {
            Some(b) => b.to_path_buf(),
            None => sysroot.join("lib/rustlib").join(&host).join("bin"),
        };
        let tc = Toolchain {
            cargo,
            rustc,
            sysroot,
            host,
            llvm_bin,
        };
        tc.check_components()?;
        Ok(tc)
    }

    /// `Err(MissingComponents)` unless `rust-src` and every [`LLVM_TOOLS`] binary exist.
    pub fn check_components(&self) -> Result<(), BuildError> {
        let mut missing = Vec::new();
        if !self.rust_src().join("core/src/lib.rs").is_file()
            || !self.rust_src().join("Cargo.lock").is_file()
        {
            missing.push("rust-src".to_owned());
        }
        if LLVM_TOOLS.iter().any(|t| !self.tool(t).is_file()) {
            missing.push("llvm-tools".to_owned());
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(BuildError::MissingComponents {
                missing,
                toolchain: toolchain_name(),
                searched: vec![self.rust_src(), self.llvm_bin.clone()],
            })
        }
    }

    /// The standard library's sources (`rust-src`).
    pub fn rust_src(&self) -> PathBuf {
        self.sysroot.join("lib/rustlib/src/rust/library")
    }

    /// The path of one `llvm-tools` binary.
    pub fn tool(&self, name: &str) -> PathBuf {
        self.llvm_bin
            .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
    }
}

/// Whether a rustc of `release` (`rustc -vV`'s line) takes `-Zbuild-std`:
/// a nightly or a local build (`-dev`), or any rustc told so by
/// `RUSTC_BOOTSTRAP=1`.
fn builds_std(release: &str) -> bool {
    release.contains("nightly")
        || release.contains("-dev")
        || std::env::var("RUSTC_BOOTSTRAP").is_ok_and(|v| v == "1")
}

/// The toolchain to name in a fix command: `$RUSTUP_TOOLCHAIN` without the host
/// triple (`nightly-x86_64-unknown-linux-gnu` → `nightly`), else `nightly`.
pub fn toolchain_name() -> String {
    let t = std::env::var("RUSTUP_TOOLCHAIN").unwrap_or_default();
    let t = t.trim();
    if t.is_empty() || t.contains('/') || t.contains('\\') {
        return "nightly".to_owned();
    }
    strip_host(t)
}

/// `nightly-2026-05-19-x86_64-unknown-linux-gnu` → `nightly-2026-05-19`.
fn strip_host(t: &str) -> String {
    const ARCHES: &[&str] = &[
        "-x86_64-",
        "-aarch64-",
        "-i686-",
        "-riscv64",
        "-powerpc64",
        "-s390x-",
        "-loongarch64-",
        "-arm",
    ];
    ARCHES
        .iter()
        .filter_map(|m| t.find(m))
        .min()
        .map_or_else(|| t.to_owned(), |i| t[..i].to_owned())
}

fn sibling_rustc(cargo: &Path) -> Option<PathBuf> {
    if !cargo.is_absolute() {
        return None;
    }
    let r = cargo
        .parent()?
        .join(format!("rustc{}", std::env::consts::EXE_SUFFIX));
    r.is_file().then_some(r)
}

/// Runs a command to completion and returns its stdout, or a typed error.
pub(crate) fn capture(cmd: &mut Command) -> Result<String, BuildError> {
    let shown = show(cmd);
    let out = cmd.output().map_err(|source| BuildError::Spawn {
        command: shown.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(BuildError::Tool {
            command: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command line for messages.
pub(crate) fn show(cmd: &Command) -> String {
    let mut s: OsString = cmd.get_program().to_owned();
    for a in cmd.get_args() {
        s.push(" ");
        s.push(a);
    }
    s.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_host_triple() {
        assert_eq!(strip_host("nightly-x86_64-unknown-linux-gnu"), "nightly");
        assert_eq!(
            strip_host("nightly-2026-05-19-aarch64-unknown-linux-gnu"),
            "nightly-2026-05-19"
        );
        assert_eq!(strip_host("nightly"), "nightly");
    }

    #[test]
    fn only_a_nightly_builds_std() {
        assert!(builds_std("1.97.0-nightly"));
        assert!(builds_std("1.98.0-dev"));
        if std::env::var_os("RUSTC_BOOTSTRAP").is_none() {
            assert!(!builds_std("1.91.0"));
            assert!(!builds_std("1.92.0-beta.3"));
        }
        let err = BuildError::NotNightly {
            release: "1.91.0".into(),
        };
        let text = err.to_string();
        assert!(
            text.contains("rustc 1.91.0")
                && text.contains("[toolchain]\nchannel = \"nightly\"")
                && text.contains("components = [\"rust-src\", \"llvm-tools\"]"),
            "{text}"
        );
    }
}
