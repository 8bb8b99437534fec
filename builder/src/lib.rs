//! Builds a `no_std` kernel crate to one PTX file — the role rust-cuda's
//! `cuda_builder` plays, with the installed nightly's own tools:
//!
//! 1. `cargo build --target nvptx64-nvidia-cuda -Zbuild-std=core,alloc` of the
//!    kernel crate (its rlibs, and those of its dependencies, hold LLVM bitcode);
//! 2. a check that rustc marked every function of the crates that calls a
//!    warp collective `convergent` (`convergent.rs`; an older nightly did
//!    not), then `llvm-link` of every object of every rlib, `core`/`alloc`
//!    included;
//! 3. `opt`: internalize everything but the kernel crate's unmangled symbols
//!    (`#[no_mangle]` kernels and statics — what a cdylib would export), drop the
//!    dead code, optimise;
//! 4. `llc -mcpu=sm_XX` writes the PTX.
//!
//! From a build script:
//!
//! ```no_run
//! // build.rs
//! let out = warpalloc_builder::PtxBuilder::new("kernels")
//!     .arch(warpalloc_builder::Arch::Sm75)
//!     .build()
//!     // Its `Display` names the fix (a missing component's install
//!     // command, say); `expect` would print only its `Debug`.
//!     .unwrap_or_else(|e| panic!("building the kernels to PTX: {e}"));
//! // `out.path` is `$OUT_DIR/<lib name>.ptx`; `cargo:rerun-if-changed` lines
//! // for the kernel sources have been printed.
//! println!("cargo:rerun-if-changed=build.rs");
//! ```
//!
//! and then `include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"))`.
//!
//! Needs the `rust-src` and `llvm-tools` components of the nightly toolchain; when
//! one is missing, [`BuildError::MissingComponents`] names the command that adds it.
//! [`ptxas`] finds NVIDIA's assembler and parses its `-v` report.

mod arch;
mod convergent;
mod depinfo;
mod nested_env;
pub mod ptxas;
mod ptxfile;
mod toolchain;

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use arch::{Arch, ParseArchError};
pub use nested_env::is_scrubbed;
pub use ptxfile::{PtxFunction, PtxSymbols, declarations, functions, reachable, symbols};
pub use toolchain::{LLVM_TOOLS, REQUIRED_COMPONENTS, Toolchain, toolchain_name};

/// The rustc target the kernels are built for.
pub const TARGET: &str = "nvptx64-nvidia-cuda";
/// The environment variable that names the nested build's target directory
/// when [`PtxBuilder::target_dir`] is not called (the architecture is
/// appended).
pub const TARGET_DIR_ENV: &str = "WARPALLOC_PTX_TARGET_DIR";

/// The command that installs what the builder needs, for `toolchain`.
pub fn component_fix_command(toolchain: &str) -> String {
    format!(
        "rustup component add --toolchain {toolchain} {}",
        REQUIRED_COMPONENTS.join(" ")
    )
}

/// Why a PTX build failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// `rust-src` or `llvm-tools` is not installed.
    #[error(
        "the {toolchain} toolchain lacks the rustup component(s) {missing}, which building \
         PTX needs; run `{fix}` (or `cargo xtask setup` in the warpalloc repository). \
         Looked in: {searched}",
        missing = missing.join(", "),
        fix = component_fix_command(toolchain),
        searched = searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    MissingComponents {
        /// The missing components (`rust-src`, `llvm-tools`).
        missing: Vec<String>,
        /// The toolchain to add them to.
        toolchain: String,
        /// Where they were looked for.
        searched: Vec<PathBuf>,
    },
    /// The kernel crate's directory has no `Cargo.toml`.
    #[error("no kernel crate at {0}: it has no Cargo.toml")]
    NoCrate(PathBuf),
    /// The kernel crate's workspace does not define the profile the build
    /// uses.
    #[error(
        "the workspace of {krate} defines no `{profile}` profile, which the PTX build uses; \
         add this to the workspace's Cargo.toml (the kernel crate's own if it is its \
         workspace):\n\n{snippet}",
        krate = krate.display(),
        snippet = profile_snippet(profile)
    )]
    MissingProfile {
        /// The kernel crate's manifest.
        krate: PathBuf,
        /// The profile.
        profile: String,
    },
    /// The toolchain is not a nightly: building `core` for the GPU
    /// (`-Zbuild-std`) needs one.
    #[error(
        "building PTX needs a nightly toolchain (it builds `core` and `alloc` for the GPU with \
         -Zbuild-std), and this build runs rustc {release}. Put a rust-toolchain.toml next to \
         your workspace's Cargo.toml:\n\n[toolchain]\nchannel = \"nightly\"\ncomponents = \
         [\"rust-src\", \"llvm-tools\"]\n\n(rustup installs it at the next cargo command)"
    )]
    NotNightly {
        /// `rustc -vV`'s release, e.g. `1.91.0`.
        release: String,
    },
    /// The kernel crate (or a dependency of it) uses `std`, which the GPU
    /// target does not have.
    #[error(
        "{krate} (or a crate it depends on) uses `std`, which the GPU target has not: add \
         `#![no_std]` at the top of its src/lib.rs (and `extern crate alloc;` for Vec, Box and \
         String, which WarpAlloc serves), and keep std-only dependencies out of it. The \
         compiler said:\n{diagnostics}",
        krate = krate.display()
    )]
    UsesStd {
        /// The kernel crate's manifest.
        krate: PathBuf,
        /// The compiler's errors.
        diagnostics: String,
    },
    /// The kernel crate is a `cdylib` (rust-cuda's habit): cargo would try to
    /// link it with `llvm-bitcode-linker`, which the nvptx64 target lacks here.
    #[error(
        "{krate} is a `cdylib`: cargo would link it with `llvm-bitcode-linker`, which this \
         toolchain cannot install; warpalloc-builder links the bitcode itself, so make the \
         kernel crate a plain library: in its Cargo.toml, `[lib] crate-type = [\"rlib\"]` \
         (or no crate-type at all)",
        krate = krate.display()
    )]
    CdylibCrate {
        /// The kernel crate's manifest.
        krate: PathBuf,
    },
    /// A tool could not be started.
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A tool ran and failed.
    #[error("`{command}` failed ({status}):\n{stderr}")]
    Tool {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// The nested `cargo build` for nvptx64 failed.
    #[error("building {krate} for {TARGET} failed ({status}):\n{diagnostics}")]
    Cargo {
        /// The kernel crate's manifest.
        krate: PathBuf,
        /// cargo's exit status.
        status: String,
        /// The compiler's errors, then cargo's stderr.
        diagnostics: String,
    },
    /// Something about the toolchain or cargo's output was not as expected.
    #[error("{0}")]
    Toolchain(String),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// After linking and dead-code elimination the module still calls or reads
    /// symbols nothing defines; `ptxas` and the driver would reject it.
    #[error(
        "the kernels use symbols that nothing defines: {}{}",
        symbols.join(", "),
        hints.iter().map(|h| format!("\n  hint: {h}")).collect::<String>()
    )]
    UndefinedSymbols {
        /// The undefined symbols.
        symbols: Vec<String>,
        /// What probably causes them.
        hints: Vec<String>,
    },
    /// rustc left a function that calls a warp collective unmarked
    /// `convergent` (a nightly older than rust-lang/rust#153995): LLVM may
    /// move the collective into divergent code.
    #[error(
        "rustc did not mark `{function}` (in {object}) `convergent`, though it calls a warp \
         collective: this nightly predates rust-lang/rust#153995 (April 2026), and LLVM may \
         move the collective into divergent code (a hang or wrong results on a GPU). Build \
         with a newer nightly: `rustup toolchain install nightly`"
    )]
    NotConvergent {
        /// The object (bitcode) holding it.
        object: String,
        /// The function.
        function: String,
    },
}

/// The `[profile.NAME]` section a kernel workspace needs (`ptx` by default).
pub fn profile_snippet(profile: &str) -> String {
    format!(
        "[profile.{profile}]\n\
         inherits = \"release\"\n\
         codegen-units = 1\n\
         panic = \"abort\"\n\
         debug = false\n\
         debug-assertions = false\n\
         overflow-checks = false\n\
         incremental = false\n"
    )
}

/// Whether a manifest's text asks for a `cdylib` (a `crate-type` line that
/// names it, outside comments).
fn declares_cdylib(manifest: &str) -> bool {
    manifest.lines().any(|l| {
        let code = l.split('#').next().unwrap_or("");
        code.trim_start().starts_with("crate-type") && code.contains("\"cdylib\"")
    })
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What [`PtxBuilder::build`] made.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PtxOutput {
    /// The PTX file.
    pub path: PathBuf,
    /// The architecture it was built for (its `.target`).
    pub arch: Arch,
    /// Its `.entry` kernels.
    pub kernels: Vec<String>,
    /// Its visible globals (`#[no_mangle] static`s, for `cuModuleGetGlobal`).
    pub globals: Vec<String>,
    /// Its visible non-kernel functions (`#[no_mangle]` device functions).
    pub functions: Vec<String>,
    /// The files the PTX depends on: the sources of the kernel crate and its
    /// non-registry dependencies, their `Cargo.toml`s, the workspace manifest and
    /// `Cargo.lock` (what was printed as `cargo:rerun-if-changed`).
    pub dependencies: Vec<PathBuf>,
    /// The compiler's warnings for the kernel crates, rendered.
    pub warnings: Vec<String>,
    /// The environment variables the kernel crates read at compile time
    /// (`env!`, `option_env!`: rustc's `# env-dep` lines), but cargo's own
    /// `CARGO_*`; what was printed as `cargo:rerun-if-env-changed`, so that
    /// a change of one builds the PTX again (it did not until 2026-12-07;
    /// a review).
    pub env_dependencies: Vec<String>,
}

/// Builds a kernel crate to PTX. See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct PtxBuilder {
    crate_path: PathBuf,
    arch: Arch,
    profile: String,
    target_dir: Option<PathBuf>,
    out_file: Option<PathBuf>,
    features: Vec<String>,
    no_default_features: bool,
    rustflags: Vec<String>,
    keep: Vec<String>,
    sysroot: Option<PathBuf>,
    llvm_tools_dir: Option<PathBuf>,
    cargo_directives: Option<bool>,
}

impl PtxBuilder {
    /// A builder for the kernel crate at `crate_path` (a directory with a
    /// `Cargo.toml`; relative paths are taken from `$CARGO_MANIFEST_DIR`, else
    /// from the current directory).
    pub fn new(crate_path: impl Into<PathBuf>) -> Self {
        PtxBuilder {
            crate_path: crate_path.into(),
            arch: Arch::default(),
            profile: "ptx".to_owned(),
            target_dir: None,
            out_file: None,
            features: Vec::new(),
            no_default_features: false,
            rustflags: Vec::new(),
            keep: Vec::new(),
            sysroot: None,
            llvm_tools_dir: None,
            cargo_directives: None,
        }
    }

    /// The GPU architecture (default `sm_75`).
    pub fn arch(mut self, arch: Arch) -> Self {
        self.arch = arch;
        self
    }

    /// The cargo profile of the nested build (default `ptx`; it must exist in the
    /// kernel crate's workspace, with `panic = "abort"`).
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = profile.into();
        self
    }

    /// The nested build's target directory. The architecture is appended. Default:
    /// `<target dir>/warpalloc-ptx/<arch>` next to the outer build's profile
    /// directories when run from a build script, else
    /// `<kernel crate>/target/warpalloc-ptx/<arch>`; the environment variable
    /// [`TARGET_DIR_ENV`] overrides both defaults (so that builds with another
    /// outer target directory, such as `cargo miri`'s, share one nested
    /// build). Keeping it stable means `core` is compiled once, not on every
    /// build.
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Where to write the PTX. Default: `$OUT_DIR/<lib name>.ptx`, or the nested
    /// target directory outside a build script.
    pub fn out_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.out_file = Some(file.into());
        self
    }

    /// Enables a feature of the kernel crate.
    pub fn feature(mut self, feature: impl Into<String>) -> Self {
        self.features.push(feature.into());
        self
    }

    /// Builds the kernel crate with `--no-default-features`.
    pub fn no_default_features(mut self) -> Self {
        self.no_default_features = true;
        self
    }

    /// An extra flag for rustc (after `-Ctarget-cpu=sm_XX`).
    pub fn rustflag(mut self, flag: impl Into<String>) -> Self {
        self.rustflags.push(flag.into());
        self
    }

    /// Keeps a symbol visible that would otherwise be internalized (mangled
    /// symbols of the kernel crate, or anything from `core`).
    pub fn keep_symbol(mut self, symbol: impl Into<String>) -> Self {
        self.keep.push(symbol.into());
        self
    }

    /// Uses this sysroot instead of `rustc --print sysroot` (for tests).
    pub fn sysroot(mut self, sysroot: impl Into<PathBuf>) -> Self {
        self.sysroot = Some(sysroot.into());
        self
    }

    /// Takes `llvm-link`, `opt`, `llc`... from this directory instead of the
    /// sysroot's `llvm-tools` component.
    pub fn llvm_tools_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.llvm_tools_dir = Some(dir.into());
        self
    }

    /// Whether to print `cargo:rerun-if-changed` and `cargo:warning` lines. Default:
    /// yes when run from a build script (`OUT_DIR` and `CARGO_CFG_TARGET_ARCH` set).
    pub fn cargo_directives(mut self, print: bool) -> Self {
        self.cargo_directives = Some(print);
        self
    }

    /// Builds the PTX.
    pub fn build(&self) -> Result<PtxOutput, BuildError> {
        let in_build_script = std::env::var_os("OUT_DIR").is_some()
            && std::env::var_os("CARGO_CFG_TARGET_ARCH").is_some();
        let directives = self.cargo_directives.unwrap_or(in_build_script);

        let crate_dir = self.crate_dir()?;
        let manifest = crate_dir.join("Cargo.toml");
        if !manifest.is_file() {
            return Err(BuildError::NoCrate(crate_dir));
        }
        let text = std::fs::read_to_string(&manifest).map_err(io_err(&manifest))?;
        if declares_cdylib(&text) {
            return Err(BuildError::CdylibCrate { krate: manifest });
        }
        let tc = Toolchain::discover(self.sysroot.as_deref(), self.llvm_tools_dir.as_deref())?;
        let target_dir = self.nested_target_dir(&crate_dir);
        std::fs::create_dir_all(&target_dir).map_err(io_err(&target_dir))?;

        let built = self.cargo_build(&tc, &manifest, &target_dir)?;
        // One work directory per configuration, locked while in use: two builds
        // (say `cargo build` and `cargo clippy` sharing the nested target
        // directory) never mix their intermediate files.
        let work = target_dir.join("warpalloc-builder").join(format!(
            "{}-{:016x}",
            built.kernel.name,
            self.config_hash()
        ));
        std::fs::create_dir_all(&work).map_err(io_err(&work))?;
        let lock_path = work.join(".lock");
        let lock = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
        lock.lock().map_err(io_err(&lock_path))?;
        let objects = extract_objects(&tc, &built, &work)?;
        let user_objs: Vec<&Path> = objects
            .iter()
            .filter(|o| !o.sysroot)
            .map(|o| o.path.as_path())
            .collect();
        if let Some((object, function)) = convergent::unmarked(&tc, &user_objs)? {
            return Err(BuildError::NotConvergent { object, function });
        }

        // The symbols to keep: every defined, unmangled, global symbol of the
        // user's crates — what a cdylib would export.
        let mut keep: BTreeSet<String> = self.keep.iter().cloned().collect();
        if !user_objs.is_empty() {
            for (name, kind) in nm(&tc, &user_objs, &["--defined-only", "--extern-only"])? {
                if kind != 'U' && !is_mangled(&name) && !name.starts_with("llvm.") {
                    keep.insert(name);
                }
            }
        }

        // Link.
        let linked = work.join("linked.bc");
        let mut link = Command::new(tc.tool("llvm-link"));
        link.args(objects.iter().map(|o| &o.path))
            .arg("-o")
            .arg(&linked);
        run(&mut link)?;

        // rlibs carry no allocator shim (rustc writes it only for final
        // artifacts): define the pieces of it the module asks for.
        let undefined = undefined_symbols(&tc, &linked)?;
        if let Some(shim) = allocator_shim(&tc, &undefined)? {
            let shim_path = work.join("alloc-shim.ll");
            std::fs::write(&shim_path, shim).map_err(io_err(&shim_path))?;
            let relinked = work.join("linked-shim.bc");
            run(Command::new(tc.tool("llvm-link"))
                .arg(&linked)
                .arg(&shim_path)
                .arg("-o")
                .arg(&relinked))?;
            std::fs::rename(&relinked, &linked).map_err(io_err(&linked))?;
        }

        // Internalize all but the exports, drop the dead, optimise.
        let keep_file = work.join("exports.txt");
        let keep_text: String = keep.iter().map(|k| format!("{k}\n")).collect();
        std::fs::write(&keep_file, keep_text).map_err(io_err(&keep_file))?;
        let optimised = work.join("opt.bc");
        let mut api_file = std::ffi::OsString::from("-internalize-public-api-file=");
        api_file.push(&keep_file);
        run(Command::new(tc.tool("opt"))
            .arg("-passes=internalize,globaldce,default<O3>,globaldce")
            .arg(api_file)
            .arg(&linked)
            .arg("-o")
            .arg(&optimised))?;

        let undefined = undefined_symbols(&tc, &optimised)?;
        if !undefined.is_empty() {
            let hints = undefined_hints(&undefined);
            return Err(BuildError::UndefinedSymbols {
                symbols: undefined,
                hints,
            });
        }

        // Emit PTX.
        let ptx_tmp = work.join("out.ptx");
        run(Command::new(tc.tool("llc"))
            .arg(format!("-mcpu={}", self.arch))
            .arg(&optimised)
            .arg("-o")
            .arg(&ptx_tmp))?;
        let ptx = std::fs::read_to_string(&ptx_tmp).map_err(io_err(&ptx_tmp))?;
        let out_file = match &self.out_file {
            Some(f) => f.clone(),
            None => default_out_dir(&target_dir).join(format!("{}.ptx", built.kernel.name)),
        };
        write_if_changed(&out_file, &ptx)?;

        let dependencies = self.dependencies(&tc, &built, &manifest, &target_dir)?;
        let env_dependencies = env_dependencies(&built);
        let syms = symbols(&ptx);
        if directives {
            println!("cargo:rerun-if-env-changed={TARGET_DIR_ENV}");
            for d in &dependencies {
                println!("cargo:rerun-if-changed={}", d.display());
            }
            for name in &env_dependencies {
                println!("cargo:rerun-if-env-changed={name}");
            }
            for w in &built.warnings {
                for line in w.lines().filter(|l| !l.trim().is_empty()) {
                    println!("cargo:warning={line}");
                }
            }
        }
        Ok(PtxOutput {
            path: out_file,
            arch: self.arch,
            kernels: syms.kernels,
            globals: syms.globals,
            functions: syms.functions,
            dependencies,
            warnings: built.warnings,
            env_dependencies,
        })
    }

    /// FNV-1a over what changes the nested build's output.
    fn config_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |s: &str| {
            for b in s.bytes().chain([0xff]) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        };
        eat(&self.profile);
        eat(if self.no_default_features { "nd" } else { "d" });
        self.features.iter().for_each(|f| eat(f));
        eat("|");
        self.rustflags.iter().for_each(|f| eat(f));
        eat("|");
        self.keep.iter().for_each(|f| eat(f));
        h
    }

    fn crate_dir(&self) -> Result<PathBuf, BuildError> {
        let p = &self.crate_path;
        let abs = if p.is_absolute() {
            p.clone()
        } else if let Some(base) = std::env::var_os("CARGO_MANIFEST_DIR") {
            PathBuf::from(base).join(p)
        } else {
            std::env::current_dir()
                .map_err(io_err(Path::new(".")))?
                .join(p)
        };
        abs.canonicalize()
            .map_err(|_| BuildError::NoCrate(abs.clone()))
    }

    fn nested_target_dir(&self, crate_dir: &Path) -> PathBuf {
        let from_env = std::env::var_os(TARGET_DIR_ENV).filter(|d| !d.is_empty());
        let base = match (&self.target_dir, from_env) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => PathBuf::from(d),
            (None, None) => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                // OUT_DIR = <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out
                .and_then(|o| o.ancestors().nth(4).map(|t| t.join("warpalloc-ptx")))
                .unwrap_or_else(|| crate_dir.join("target").join("warpalloc-ptx")),
        };
        base.join(self.arch.as_str())
    }

    fn cargo_build(
        &self,
        tc: &Toolchain,
        manifest: &Path,
        target_dir: &Path,
    ) -> Result<Built, BuildError> {
        let mut cmd = Command::new(&tc.cargo);
        cmd.arg("build")
            .arg("--lib")
            .arg("--manifest-path")
            .arg(manifest)
            .arg("--profile")
            .arg(&self.profile)
            .arg("--target")
            .arg(TARGET)
            .arg("-Zbuild-std=core,alloc")
            .arg("--message-format=json")
            .arg("--target-dir")
            .arg(target_dir);
        if self.no_default_features {
            cmd.arg("--no-default-features");
        }
        if !self.features.is_empty() {
            cmd.arg("--features").arg(self.features.join(","));
        }
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_none_or(is_scrubbed) {
                cmd.env_remove(&k);
            }
        }
        let mut flags = vec![format!("-Ctarget-cpu={}", self.arch)];
        flags.extend(self.rustflags.iter().cloned());
        cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\u{1f}"))
            .env("RUSTC", &tc.rustc)
            .env("CARGO_TERM_COLOR", "never");
        let shown = toolchain::show(&cmd);
        let out = cmd.output().map_err(|source| BuildError::Spawn {
            command: shown,
            source,
        })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let sysroot = canonical(&tc.sysroot);
        let manifest = canonical(manifest);
        let mut artifacts = Vec::new();
        let mut warnings = Vec::new();
        let mut errors = Vec::new();
        for line in stdout.lines().filter(|l| l.starts_with('{')) {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match msg["reason"].as_str() {
                Some("compiler-artifact") => {
                    if let Some(a) = Artifact::from_json(&msg, &sysroot) {
                        artifacts.push(a);
                    }
                }
                Some("compiler-message") => {
                    let m = &msg["message"];
                    let rendered = m["rendered"].as_str().unwrap_or_default().to_owned();
                    let from_sysroot = msg["manifest_path"]
                        .as_str()
                        .is_some_and(|p| canonical(Path::new(p)).starts_with(&sysroot));
                    match m["level"].as_str() {
                        Some("error" | "error: internal compiler error") => errors.push(rendered),
                        Some("warning") if !from_sysroot => warnings.push(rendered),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains(&format!("profile `{}` is not defined", self.profile)) {
                return Err(BuildError::MissingProfile {
                    krate: manifest,
                    profile: self.profile.clone(),
                });
            }
            let mut diagnostics = errors.join("\n");
            diagnostics.push_str(&stderr);
            if diagnostics.contains("can't find crate for `std`") {
                return Err(BuildError::UsesStd {
                    krate: manifest,
                    diagnostics,
                });
            }
            return Err(BuildError::Cargo {
                krate: manifest,
                status: out.status.to_string(),
                diagnostics,
            });
        }
        // A build script's `cargo:warning` lines: cargo prints them to
        // stderr (for path dependencies, and again on a fresh build), and
        // the JSON messages carry none; they were dropped until 2026-12-07
        // (a review).
        warnings.extend(build_script_warnings(&String::from_utf8_lossy(&out.stderr)));
        let kernel = artifacts
            .iter()
            .position(|a| a.manifest == manifest)
            .map(|i| artifacts.remove(i))
            .ok_or_else(|| {
                BuildError::Toolchain(format!(
                    "cargo built no library for {}; is it a [lib] crate?",
                    manifest.display()
                ))
            })?;
        let (host, deps) = artifacts.into_iter().partition(|a| a.host);
        Ok(Built {
            kernel,
            deps,
            host,
            warnings,
        })
    }

    fn dependencies(
        &self,
        tc: &Toolchain,
        built: &Built,
        manifest: &Path,
        target_dir: &Path,
    ) -> Result<Vec<PathBuf>, BuildError> {
        let sysroot = canonical(&tc.sysroot);
        let cargo_home = cargo_home().map(|h| canonical(&h));
        let target_dir = canonical(target_dir);
        let ws_manifest = workspace_manifest(tc, manifest)?;
        let ws_root = ws_manifest
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let outside = |p: &Path| {
            !p.starts_with(&sysroot)
                && !p.starts_with(&target_dir)
                && cargo_home.as_ref().is_none_or(|h| !p.starts_with(h))
        };
        let mut deps: Vec<PathBuf> = Vec::new();
        let mut push = |p: PathBuf| {
            if !deps.contains(&p) {
                deps.push(p);
            }
        };
        let dep_info = built.kernel.rlib.with_extension("d");
        match std::fs::read_to_string(&dep_info) {
            Ok(text) => {
                for p in depinfo::parse(&text) {
                    let p = if p.is_absolute() { p } else { ws_root.join(p) };
                    if outside(&p) {
                        push(p);
                    }
                }
            }
            // No dep-info: watch the crates' whole directories instead.
            Err(_) => {
                for a in std::iter::once(&built.kernel)
                    .chain(&built.deps)
                    .chain(&built.host)
                {
                    if !a.sysroot
                        && outside(&a.manifest)
                        && let Some(dir) = a.manifest.parent()
                    {
                        push(dir.to_path_buf());
                    }
                }
            }
        }
        for a in std::iter::once(&built.kernel)
            .chain(&built.deps)
            .chain(&built.host)
        {
            if !a.sysroot && outside(&a.manifest) {
                push(a.manifest.clone());
            }
        }
        push(ws_manifest.clone());
        let lock = ws_root.join("Cargo.lock");
        if lock.is_file() {
            push(lock);
        }
        Ok(deps)
    }
}

/// One library the nested build produced.
#[derive(Debug)]
struct Artifact {
    /// The library's crate name (`warpalloc_device`).
    name: String,
    /// Built for the host (a build script's or a proc-macro's dependency),
    /// not for the GPU: not linked.
    host: bool,
    manifest: PathBuf,
    rlib: PathBuf,
    sysroot: bool,
    /// rustc's own dep-info file (`deps/<name>-<hash>.d`, beside the
    /// `deps/lib<name>-<hash>.rmeta` cargo names), which lists the
    /// environment variables read (`# env-dep:`); cargo's (`lib<name>.d`)
    /// does not.
    rustc_dep_info: Option<PathBuf>,
}

impl Artifact {
    fn from_json(msg: &serde_json::Value, sysroot: &Path) -> Option<Artifact> {
        let kinds = msg["target"]["kind"].as_array()?;
        if !kinds
            .iter()
            .any(|k| matches!(k.as_str(), Some("lib" | "rlib")))
        {
            return None;
        }
        let rlib = msg["filenames"]
            .as_array()?
            .iter()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".rlib"))?;
        // Cargo also reports the host's libraries (a build script's
        // build-dependencies, a proc-macro's dependencies), built outside
        // the target's directory: not linked (their host objects made
        // `llvm-link` fail, "not bitcode"; a review, 2026-12-07: the
        // fixture's `helper`), but their manifests are watched.
        let host = !Path::new(rlib)
            .components()
            .any(|c| c.as_os_str() == TARGET);
        let manifest = canonical(Path::new(msg["manifest_path"].as_str()?));
        let rustc_dep_info = msg["filenames"]
            .as_array()?
            .iter()
            .filter_map(|f| f.as_str().map(Path::new))
            .filter(|f| f.parent().is_some_and(|d| d.ends_with("deps")))
            .find_map(|f| {
                let stem = f.file_stem()?.to_str()?.strip_prefix("lib")?;
                Some(f.with_file_name(format!("{stem}.d")))
            });
        Some(Artifact {
            name: msg["target"]["name"].as_str()?.replace('-', "_"),
            host,
            sysroot: manifest.starts_with(sysroot),
            manifest,
            rlib: PathBuf::from(rlib),
            rustc_dep_info,
        })
    }
}

struct Built {
    kernel: Artifact,
    /// The GPU's libraries the kernel crate depends on: linked.
    deps: Vec<Artifact>,
    /// The host's (build scripts' dependencies): watched, not linked.
    host: Vec<Artifact>,
    warnings: Vec<String>,
}

struct Object {
    path: PathBuf,
    sysroot: bool,
}

/// `llvm-ar x` every rlib into its own directory; returns the `.o` members.
fn extract_objects(tc: &Toolchain, built: &Built, work: &Path) -> Result<Vec<Object>, BuildError> {
    let objs_dir = work.join("objects");
    if objs_dir.exists() {
        std::fs::remove_dir_all(&objs_dir).map_err(io_err(&objs_dir))?;
    }
    let mut out = Vec::new();
    for (i, a) in std::iter::once(&built.kernel)
        .chain(&built.deps)
        .enumerate()
    {
        let dir = objs_dir.join(format!("{i:03}-{}", a.name));
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        run(Command::new(tc.tool("llvm-ar"))
            .arg("x")
            .arg(&a.rlib)
            .current_dir(&dir))?;
        let mut members: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "o"))
            .collect();
        members.sort();
        out.extend(members.into_iter().map(|path| Object {
            path,
            sysroot: a.sysroot,
        }));
    }
    Ok(out)
}

/// `(name, type letter)` for every symbol `llvm-nm` lists.
fn nm(tc: &Toolchain, files: &[&Path], flags: &[&str]) -> Result<Vec<(String, char)>, BuildError> {
    let mut cmd = Command::new(tc.tool("llvm-nm"));
    cmd.args(flags).arg("--format=posix").arg("--no-sort");
    cmd.args(files);
    let text = toolchain::capture(&mut cmd)?;
    Ok(parse_nm_posix(&text))
}

/// Parses `llvm-nm --format=posix` lines: `name type [value size]`. Lines that
/// name the file (`file.o:`) are skipped.
fn parse_nm_posix(text: &str) -> Vec<(String, char)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let kind = it.next()?.chars().next()?;
            (kind.is_ascii_alphabetic() && !name.ends_with(':')).then(|| (name.to_owned(), kind))
        })
        .collect()
}

fn undefined_symbols(tc: &Toolchain, module: &Path) -> Result<Vec<String>, BuildError> {
    let mut v: Vec<String> = nm(tc, &[module], &["--undefined-only"])?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| !n.starts_with("llvm."))
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// Whether a symbol name is Rust-mangled (legacy `_ZN` or v0 `_R`).
fn is_mangled(name: &str) -> bool {
    name.starts_with("_ZN") || name.starts_with("_R")
}

/// The allocator shim's symbols as rustc (v0-)mangles them end in these.
const SHIM_NO_ALLOC_SHIM: &str = "___rust_no_alloc_shim_is_unstable_v2";
const SHIM_OOM: &str = "___rust_alloc_error_handler";
const SHIM_OOM_SHOULD_PANIC: &str = "___rust_alloc_error_handler_should_panic_v2";

/// LLVM IR defining the allocator-shim symbols among `undefined`, if any.
///
/// rustc emits `__rust_alloc` & co. in the crate with the `#[global_allocator]`,
/// but the marker `__rust_no_alloc_shim_is_unstable_v2` and the
/// allocation-error hook only in the shim of a final artifact, which an rlib
/// build never makes. On the GPU an allocation error traps, as a panic does.
fn allocator_shim(tc: &Toolchain, undefined: &[String]) -> Result<Option<String>, BuildError> {
    let mut body = String::new();
    for sym in undefined {
        if sym.ends_with(SHIM_NO_ALLOC_SHIM) {
            body.push_str(&format!(
                "define void @\"{sym}\"() unnamed_addr {{\n  ret void\n}}\n"
            ));
        } else if sym.ends_with(SHIM_OOM_SHOULD_PANIC) {
            body.push_str(&format!(
                "define i8 @\"{sym}\"() unnamed_addr {{\n  ret i8 0\n}}\n"
            ));
        } else if sym.ends_with(SHIM_OOM) {
            body.push_str(&format!(
                "define void @\"{sym}\"(i64 %size, i64 %align) unnamed_addr cold noreturn nounwind {{\n  call void @llvm.trap()\n  unreachable\n}}\n"
            ));
        }
    }
    if body.is_empty() {
        return Ok(None);
    }
    let spec = toolchain::capture(
        Command::new(&tc.rustc)
            .args([
                "-Zunstable-options",
                "--print",
                "target-spec-json",
                "--target",
                TARGET,
            ])
            // `-Z` on any toolchain the build accepted (a stable one with
            // `RUSTC_BOOTSTRAP=1` included, which removing it refused; a
            // review, 2026-12-07): a print, it changes no build.
            .env("RUSTC_BOOTSTRAP", "1"),
    )?;
    let spec: serde_json::Value = serde_json::from_str(&spec)
        .map_err(|e| BuildError::Toolchain(format!("rustc's target spec for {TARGET}: {e}")))?;
    let layout = spec["data-layout"].as_str().ok_or_else(|| {
        BuildError::Toolchain(format!(
            "rustc's target spec for {TARGET} has no data-layout"
        ))
    })?;
    let triple = spec["llvm-target"].as_str().unwrap_or(TARGET);
    Ok(Some(format!(
        "; warpalloc-builder: the allocator-shim symbols an rlib build lacks\n\
         target datalayout = \"{layout}\"\ntarget triple = \"{triple}\"\n\n{body}\n\
         declare void @llvm.trap() cold noreturn nounwind\n"
    )))
}

fn undefined_hints(undefined: &[String]) -> Vec<String> {
    let mut hints = Vec::new();
    if undefined.iter().any(|s| s.ends_with("rust_begin_unwind")) {
        hints.push(
            "no #[panic_handler]: enable warpalloc-device's `panic-handler` feature or define one"
                .to_owned(),
        );
    }
    if undefined
        .iter()
        .any(|s| s.contains("___rust_alloc") || s.contains("___rust_dealloc"))
    {
        hints.push("`alloc` is used but no #[global_allocator] is defined".to_owned());
    }
    if hints.is_empty() {
        hints.push(
            "an `extern` function or static is declared but no crate of the kernel build \
             defines it"
                .to_owned(),
        );
    }
    hints
}

/// `cargo locate-project --workspace` for the kernel crate.
fn workspace_manifest(tc: &Toolchain, manifest: &Path) -> Result<PathBuf, BuildError> {
    let mut cmd = Command::new(&tc.cargo);
    cmd.args(["locate-project", "--workspace", "--message-format", "plain"])
        .arg("--manifest-path")
        .arg(manifest);
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_none_or(is_scrubbed) {
            cmd.env_remove(&k);
        }
    }
    Ok(canonical(Path::new(toolchain::capture(&mut cmd)?.trim())))
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

fn default_out_dir(target_dir: &Path) -> PathBuf {
    std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir.to_path_buf())
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// Writes `text` unless the file already holds it (keeps its mtime, so what
/// `include_str!`s it is not rebuilt for nothing).
fn write_if_changed(path: &Path, text: &str) -> Result<(), BuildError> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    std::fs::write(path, text).map_err(io_err(path))
}

fn run(cmd: &mut Command) -> Result<(), BuildError> {
    toolchain::capture(cmd).map(drop)
}

/// The environment variables that the kernel crate and its GPU
/// dependencies (not the sysroot's) read at compile time, from rustc's
/// dep-info (`# env-dep:NAME` or `# env-dep:NAME=value`), sorted, without
/// cargo's own `CARGO_*` (set per package by the nested cargo itself).
fn env_dependencies(built: &Built) -> Vec<String> {
    let mut names: Vec<String> = std::iter::once(&built.kernel)
        .chain(&built.deps)
        .filter(|a| !a.sysroot)
        .filter_map(|a| std::fs::read_to_string(a.rustc_dep_info.as_ref()?).ok())
        .flat_map(|text| env_deps_of(&text))
        .filter(|name| !name.starts_with("CARGO_"))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The names of a dep-info text's `# env-dep:` lines.
fn env_deps_of(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# env-dep:"))
        .map(|rest| rest.split('=').next().unwrap_or(rest).to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The `cargo:warning` lines of build scripts in cargo's stderr: cargo
/// writes each as `warning: <package>@<version>: <text>` (its own
/// warnings name no package).
fn build_script_warnings(stderr: &str) -> impl Iterator<Item = String> + '_ {
    stderr.lines().filter_map(|line| {
        let (who, _) = line.strip_prefix("warning: ")?.split_once(": ")?;
        (who.contains('@') && !who.contains(' ')).then(|| line.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::env_deps_of;

    #[test]
    fn env_deps_are_rustcs_comment_lines() {
        let text = "x.d: src/lib.rs\n\nsrc/lib.rs:\n\n# env-dep:WARPALLOC_X\n# env-dep:CARGO_PKG_NAME=kern\n";
        assert_eq!(env_deps_of(text), ["WARPALLOC_X", "CARGO_PKG_NAME"]);
    }

    use super::build_script_warnings;

    #[test]
    fn build_script_warnings_are_cargos_package_lines() {
        let stderr = "   Compiling dep v0.1.0 (/x/dep)\n\
                      warning: dep@0.1.0: hello from its build script\n\
                      warning: unused manifest key: package.foo\n\
                      warning: profiles for the non root package will be ignored\n";
        let got: Vec<String> = build_script_warnings(stderr).collect();
        assert_eq!(got, ["warning: dep@0.1.0: hello from its build script"]);
    }

    use super::*;

    #[test]
    fn nm_posix() {
        let text = "linked.bc:\nHEAP_TOP D ---------------- ----------------\n\
                    boxy T\n_RNvCs_7___rustc12___rust_alloc T 0 0\nmissing_fn U\n\n";
        assert_eq!(
            parse_nm_posix(text),
            vec![
                ("HEAP_TOP".to_owned(), 'D'),
                ("boxy".to_owned(), 'T'),
                ("_RNvCs_7___rustc12___rust_alloc".to_owned(), 'T'),
                ("missing_fn".to_owned(), 'U'),
            ]
        );
    }

    #[test]
    fn mangling() {
        assert!(is_mangled("_ZN4core9panicking5panic17h0123456789abcdefE"));
        assert!(is_mangled("_RNvCseulmdZsCeCG_7___rustc17rust_begin_unwind"));
        assert!(!is_mangled("simt_ballot"));
        assert!(!is_mangled("WARPALLOC_HEAP"));
    }

    #[test]
    fn hints_name_the_cause() {
        let h = undefined_hints(&["_RNvCs_7___rustc17rust_begin_unwind".to_owned()]);
        assert!(h[0].contains("panic_handler"), "{h:?}");
        let h = undefined_hints(&["missing_fn".to_owned()]);
        assert!(h[0].contains("extern"), "{h:?}");
    }

    #[test]
    fn fix_command() {
        assert_eq!(
            component_fix_command("nightly"),
            "rustup component add --toolchain nightly rust-src llvm-tools"
        );
    }
}
