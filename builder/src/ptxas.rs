//! NVIDIA's PTX assembler: where to find it, running it, reading its `-v` report.
//!
//! `ptxas` comes from the PyPI package `nvidia-cuda-nvcc` ([`NVCC_VERSION`], CUDA
//! 13.0, the GPU machines' driver generation), which `cargo xtask setup` installs
//! into [`pinned_install_dir`] (outside the repository). [`find`] looks, in order,
//! at `$WARPALLOC_PTXAS`, that cache, and `PATH`.
//!
//! `ptxas -v` reports, per function, the registers, stack frame and spill
//! stores/loads — a static performance signal that needs no GPU.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Arch;

/// The pinned `nvidia-cuda-nvcc` version (CUDA 13.0).
pub const NVCC_VERSION: &str = "13.0.88";
/// The PyPI package that ships `ptxas`.
pub const NVCC_PACKAGE: &str = "nvidia-cuda-nvcc";
/// Environment variable naming a `ptxas` binary to use.
pub const ENV_PTXAS: &str = "WARPALLOC_PTXAS";
/// Environment variable overriding the cache directory.
pub const ENV_CACHE_DIR: &str = "WARPALLOC_CACHE_DIR";
/// `ptxas` inside the installed package.
pub const PTXAS_IN_PACKAGE: &str = "nvidia/cu13/bin/ptxas";
/// The command that installs the pinned `ptxas`.
pub const SETUP_COMMAND: &str = "cargo xtask setup";

/// Why `ptxas` could not be found or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PtxasError {
    /// No `ptxas` anywhere.
    #[error(
        "ptxas not found (looked at: {}). Install it with `python3 -m pip install --no-deps \
         --target {} {NVCC_PACKAGE}=={NVCC_VERSION}` (in warpalloc's own repository, \
         `{SETUP_COMMAND}` does that), or set {ENV_PTXAS} to a ptxas binary",
        searched.join("; "),
        pinned_install_dir().map_or_else(|| "~/.cache/warpalloc/cuda-nvcc-13.0.88".to_owned(), |d| d.display().to_string())
    )]
    NotFound {
        /// Where it was looked for.
        searched: Vec<String>,
    },
    /// `$WARPALLOC_PTXAS` names something that is not a file.
    #[error("{ENV_PTXAS}={0} is not a file")]
    BadOverride(PathBuf),
    /// `ptxas` could not be started.
    #[error("could not run {path}: {source}")]
    Spawn {
        /// The binary.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `ptxas` rejected the PTX.
    #[error("`{command}` failed ({status}):\n{log}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed.
        log: String,
    },
}

/// The cache directory: `$WARPALLOC_CACHE_DIR`, else `$XDG_CACHE_HOME/warpalloc`,
/// else `$HOME/.cache/warpalloc`.
pub fn cache_dir() -> Option<PathBuf> {
    let non_empty = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    non_empty(ENV_CACHE_DIR)
        .or_else(|| non_empty("XDG_CACHE_HOME").map(|d| d.join("warpalloc")))
        .or_else(|| non_empty("HOME").map(|d| d.join(".cache").join("warpalloc")))
}

/// Where `cargo xtask setup` installs the pinned package: `<cache>/cuda-nvcc-13.0.88`.
pub fn pinned_install_dir() -> Option<PathBuf> {
    cache_dir().map(|c| c.join(format!("cuda-nvcc-{NVCC_VERSION}")))
}

/// The pinned `ptxas` (which may not be installed yet).
pub fn pinned_ptxas() -> Option<PathBuf> {
    pinned_install_dir().map(|d| d.join(PTXAS_IN_PACKAGE))
}

/// Finds `ptxas`: `$WARPALLOC_PTXAS`, then the set-up cache, then `PATH`.
pub fn find() -> Result<PathBuf, PtxasError> {
    let mut searched = Vec::new();
    if let Some(p) = std::env::var_os(ENV_PTXAS).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(PtxasError::BadOverride(p))
        };
    }
    searched.push(format!("${ENV_PTXAS} (unset)"));
    if let Some(p) = pinned_ptxas() {
        if p.is_file() {
            return Ok(p);
        }
        searched.push(p.display().to_string());
    }
    let exe = format!("ptxas{}", std::env::consts::EXE_SUFFIX);
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(&exe);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    searched.push("PATH".to_owned());
    Err(PtxasError::NotFound { searched })
}

/// A `ptxas` binary.
#[derive(Debug, Clone)]
pub struct Ptxas {
    path: PathBuf,
}

static CUBIN_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Ptxas {
    /// The `ptxas` [`find`] finds.
    pub fn find() -> Result<Self, PtxasError> {
        find().map(|path| Ptxas { path })
    }

    /// The `ptxas` at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Ptxas { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last line of `ptxas --version` (`Build cuda_13.0.r13.0/...`) and the
    /// `release` line, joined.
    pub fn version(&self) -> Result<String, PtxasError> {
        let mut cmd = Command::new(&self.path);
        cmd.arg("--version");
        let log = self.run(&mut cmd)?;
        Ok(log
            .lines()
            .filter(|l| l.contains("release") || l.starts_with("Build"))
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// `ptxas -arch=<arch> -v <ptx>`, the cubin going to a temporary file that is
    /// deleted afterwards.
    pub fn assemble(&self, ptx: &Path, arch: Arch) -> Result<PtxasReport, PtxasError> {
        self.assemble_temporary(ptx, arch, None)
    }

    /// [`Ptxas::assemble`] with every function held to `max_registers`
    /// (`--maxrregcount`): what does not fit spills, and the report says so.
    /// Whether a function fits a register count, as opposed to how many
    /// ptxas gives it by default (it may take more where more cost nothing).
    pub fn assemble_capped(
        &self,
        ptx: &Path,
        arch: Arch,
        max_registers: u32,
    ) -> Result<PtxasReport, PtxasError> {
        self.assemble_temporary(ptx, arch, Some(max_registers))
    }

    fn assemble_temporary(
        &self,
        ptx: &Path,
        arch: Arch,
        max_registers: Option<u32>,
    ) -> Result<PtxasReport, PtxasError> {
        let n = CUBIN_COUNTER.fetch_add(1, Ordering::Relaxed);
        let cubin = std::env::temp_dir().join(format!(
            "warpalloc-ptxas-{}-{n}-{arch}.cubin",
            std::process::id()
        ));
        let r = self.assemble_with(ptx, arch, &cubin, max_registers);
        // Best effort: a leftover temporary file is not an error.
        let _ = std::fs::remove_file(&cubin);
        r
    }

    /// `ptxas -arch=<arch> -v <ptx> -o <cubin>`.
    pub fn assemble_to(
        &self,
        ptx: &Path,
        arch: Arch,
        cubin: &Path,
    ) -> Result<PtxasReport, PtxasError> {
        self.assemble_with(ptx, arch, cubin, None)
    }

    fn assemble_with(
        &self,
        ptx: &Path,
        arch: Arch,
        cubin: &Path,
        max_registers: Option<u32>,
    ) -> Result<PtxasReport, PtxasError> {
        let mut cmd = Command::new(&self.path);
        cmd.arg(format!("-arch={arch}")).arg("-v");
        if let Some(n) = max_registers {
            cmd.arg(format!("--maxrregcount={n}"));
        }
        cmd.arg(ptx).arg("-o").arg(cubin);
        let log = self.run(&mut cmd)?;
        Ok(parse_report(&log, arch))
    }

    fn run(&self, cmd: &mut Command) -> Result<String, PtxasError> {
        let out = cmd.output().map_err(|source| PtxasError::Spawn {
            path: self.path.clone(),
            source,
        })?;
        let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        if out.status.success() {
            Ok(log)
        } else {
            Err(PtxasError::Failed {
                command: crate::toolchain::show(cmd),
                status: out.status.to_string(),
                log,
            })
        }
    }
}

/// What `ptxas -v` said about one module.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PtxasReport {
    /// The architecture it assembled for.
    pub arch: Arch,
    /// Every function it reported on, in report order.
    pub functions: Vec<FunctionReport>,
    /// Bytes of global memory the module defines (`N bytes gmem`).
    pub gmem: Option<u64>,
    /// `ptxas warning` lines.
    pub warnings: Vec<String>,
    /// Everything it printed.
    pub log: String,
}

impl PtxasReport {
    /// The `.entry` kernels' reports.
    pub fn kernels(&self) -> impl Iterator<Item = &FunctionReport> {
        self.functions.iter().filter(|f| f.entry)
    }

    /// The report for `name`.
    pub fn get(&self, name: &str) -> Option<&FunctionReport> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// Resource usage of one function, as `ptxas -v` reports it.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct FunctionReport {
    /// The function's PTX name.
    pub name: String,
    /// Whether it is an `.entry` (kernel).
    pub entry: bool,
    /// Registers per thread (`Used N registers`).
    pub registers: Option<u32>,
    /// Barriers (`used N barriers`).
    pub barriers: Option<u32>,
    /// Stack frame bytes.
    pub stack_frame: u64,
    /// Spill store bytes.
    pub spill_stores: u64,
    /// Spill load bytes.
    pub spill_loads: u64,
    /// `N bytes cumulative stack size` (with calls).
    pub cumulative_stack: Option<u64>,
    /// Static shared memory bytes (`N bytes smem`).
    pub smem: Option<u64>,
    /// Constant memory per bank (`N bytes cmem[B]` → `(B, N)`).
    pub cmem: Vec<(u32, u64)>,
    /// Compile time in milliseconds.
    pub compile_ms: Option<f64>,
    /// Items of the `Used ...` line this parser does not know.
    pub other: Vec<String>,
}

impl FunctionReport {
    /// Whether it spills (spill stores or loads above zero).
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

impl std::fmt::Display for FunctionReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} registers, {} B stack frame, {} B spill stores, {} B spill loads",
            self.name,
            self.registers
                .map_or_else(|| "?".to_owned(), |r| r.to_string()),
            self.stack_frame,
            self.spill_stores,
            self.spill_loads
        )?;
        if let Some(s) = self.smem {
            write!(f, ", {s} B smem")?;
        }
        Ok(())
    }
}

/// Parses the report `ptxas -v` prints. Lines it does not understand are ignored.
pub fn parse_report(log: &str, arch: Arch) -> PtxasReport {
    let mut report = PtxasReport {
        arch,
        functions: Vec::new(),
        gmem: None,
        warnings: Vec::new(),
        log: log.to_owned(),
    };
    // The function being compiled (`Used` and `Compile time` lines) and the one
    // whose properties come next.
    let mut current: Option<usize> = None;
    let mut props: Option<usize> = None;
    for raw in log.lines() {
        let line = raw.trim();
        if let Some(w) = line.strip_prefix("ptxas warning") {
            report
                .warnings
                .push(w.trim_start_matches([' ', ':']).to_owned());
            continue;
        }
        // A warning tied to a line of the PTX: `ptxas /x.ptx, line 894;
        // warning : ...` (it was dropped: a review, 2026-12-07).
        if line.starts_with("ptxas ")
            && let Some((at, w)) = line.split_once("; warning")
        {
            let at = at.trim_start_matches("ptxas ").trim();
            report
                .warnings
                .push(format!("{at}: {}", w.trim_start_matches([' ', ':'])));
            continue;
        }
        let Some(info) = line.strip_prefix("ptxas info") else {
            // `    N bytes stack frame, N bytes spill stores, N bytes spill loads`
            if let (Some(i), true) = (props, line.contains("stack frame")) {
                let f = &mut report.functions[i];
                for item in line.split(',') {
                    match bytes_item(item) {
                        Some((n, "stack frame")) => f.stack_frame = n,
                        Some((n, "spill stores")) => f.spill_stores = n,
                        Some((n, "spill loads")) => f.spill_loads = n,
                        _ => {}
                    }
                }
                props = None;
            }
            continue;
        };
        let info = info.trim_start_matches([' ', ':']).trim();
        if let Some(rest) = info.strip_prefix("Compiling entry function") {
            let i = function(&mut report.functions, quoted(rest));
            report.functions[i].entry = true;
            current = Some(i);
        } else if let Some(rest) = info.strip_prefix("Compiling function") {
            current = Some(function(&mut report.functions, quoted(rest)));
        } else if let Some(rest) = info.strip_prefix("Function properties for") {
            props = Some(function(&mut report.functions, rest.trim()));
        } else if let Some(rest) = info.strip_prefix("Compile time =") {
            if let Some(i) = current {
                report.functions[i].compile_ms =
                    rest.trim().trim_end_matches("ms").trim().parse().ok();
            }
        } else if info.starts_with("Used ") {
            let Some(i) = current.or(props) else {
                continue;
            };
            let f = &mut report.functions[i];
            for item in info.split(',').map(str::trim) {
                let words: Vec<&str> = item.split_whitespace().collect();
                match words.as_slice() {
                    ["Used" | "used", n, "registers"] => f.registers = n.parse().ok(),
                    ["Used" | "used", n, "barriers"] => f.barriers = n.parse().ok(),
                    _ => match bytes_item(item) {
                        Some((n, "smem")) => f.smem = Some(n),
                        Some((n, "cumulative stack size")) => f.cumulative_stack = Some(n),
                        Some((n, what)) if what.starts_with("cmem[") => {
                            match what["cmem[".len()..].trim_end_matches(']').parse() {
                                Ok(bank) => f.cmem.push((bank, n)),
                                Err(_) => f.other.push(item.to_owned()),
                            }
                        }
                        _ => f.other.push(item.to_owned()),
                    },
                }
            }
        } else if info.contains("bytes gmem") {
            report.gmem = info.split(',').find_map(|i| match bytes_item(i) {
                Some((n, "gmem")) => Some(n),
                _ => None,
            });
        }
    }
    report
}

/// `"  64 bytes stack frame"` → `(64, "stack frame")`.
fn bytes_item(item: &str) -> Option<(u64, &str)> {
    let item = item.trim();
    let (n, rest) = item.split_once(' ')?;
    let what = rest.trim_start().strip_prefix("bytes")?.trim();
    Some((n.parse().ok()?, what))
}

/// `" 'name' for 'sm_75'"` → `name`.
fn quoted(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
        .unwrap_or(s)
}

fn function(fs: &mut Vec<FunctionReport>, name: &str) -> usize {
    if let Some(i) = fs.iter().position(|f| f.name == name) {
        return i;
    }
    fs.push(FunctionReport {
        name: name.to_owned(),
        ..FunctionReport::default()
    });
    fs.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
ptxas info    : 8 bytes gmem, 8 bytes cmem[4]
ptxas info    : Compiling entry function 'k2' for 'sm_75'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers, used 0 barriers, 128 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 5.470 ms
ptxas info    : Compiling entry function 'k1' for 'sm_75'
ptxas info    : Function properties for k1
    64 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 8 registers, used 1 barriers, 64 bytes cumulative stack size, 360 bytes cmem[0], 7 bytes frobs
ptxas info    : Compile time = 0.965 ms
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas warning : Registers are spilled to local memory in function 'k1', 8 bytes spill stores, 12 bytes spill loads
ptxas /tmp/x.ptx, line 894; warning   : Instruction 'vote' without '.sync' is deprecated
";

    #[test]
    fn parses_a_report() {
        let r = parse_report(LOG, Arch::Sm75);
        assert_eq!(r.gmem, Some(8));
        assert_eq!(r.functions.len(), 3);
        let k2 = r.get("k2").unwrap();
        assert!(k2.entry);
        assert_eq!(k2.registers, Some(6));
        assert_eq!(k2.barriers, Some(0));
        assert_eq!(k2.smem, Some(128));
        assert_eq!(k2.cmem, vec![(0, 360)]);
        assert_eq!(k2.compile_ms, Some(5.47));
        assert!(!k2.spills());
        let k1 = r.get("k1").unwrap();
        assert_eq!(
            (k1.stack_frame, k1.spill_stores, k1.spill_loads),
            (64, 8, 12)
        );
        assert_eq!(k1.cumulative_stack, Some(64));
        assert_eq!(k1.barriers, Some(1));
        assert_eq!(k1.other, vec!["7 bytes frobs".to_owned()]);
        assert!(k1.spills());
        let h = r.get("helper").unwrap();
        assert!(!h.entry);
        assert_eq!(h.stack_frame, 16);
        assert_eq!(h.registers, None);
        assert_eq!(r.kernels().count(), 2);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert_eq!(
            r.warnings[1],
            "/tmp/x.ptx, line 894: Instruction 'vote' without '.sync' is deprecated"
        );
        assert!(k1.to_string().contains("8 registers, 64 B stack frame"));
    }

    #[test]
    fn garbage_gives_an_empty_report() {
        let r = parse_report(
            "nonsense\nptxas info : Used x registers\n    stack frame\n",
            Arch::Sm90,
        );
        assert!(r.functions.is_empty());
        assert_eq!(r.gmem, None);
    }

    #[test]
    fn bytes_items() {
        assert_eq!(
            bytes_item(" 64 bytes stack frame"),
            Some((64, "stack frame"))
        );
        assert_eq!(bytes_item("360 bytes cmem[0]"), Some((360, "cmem[0]")));
        assert_eq!(bytes_item("x bytes y"), None);
        assert_eq!(quoted(" 'k' for 'sm_75'"), "k");
    }
}
