//! `cargo xtask`: set-up, every check, and the demo.
//!
//! - `cargo xtask setup`: the nightly's components (rust-src, llvm-tools, miri,
//!   clippy, rustfmt), Miri's sysroot, and ptxas (PyPI `nvidia-cuda-nvcc`, pinned)
//!   in a cache outside the repository. Idempotent.
//! - `cargo xtask test`: set-up, then fmt, clippy, the workspace's tests, the first
//!   project (examples/first-project, run in the simulator), the loom
//!   models and the Miri tests; a table of step timings at the end.
//! - `cargo xtask ci`: what CI runs — the same as `test`, after printing the
//!   toolchain's versions.
//! - `cargo xtask run [ARGS]`: set-up, then `cargo run --release -p warpalloc --
//!   ARGS` (default `stress`: the stress kernels, checked, on the GPU or the
//!   simulator).
//! - `cargo xtask device-check [--candidate REV]`: stage the GPU check in
//!   `.device/` (with `--candidate`, a second build of git revision `REV`
//!   to time beside this one) and run its no-GPU path here.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use warpalloc_builder::ptxas;

/// The components `setup` installs (as `rustup component add` names them).
const COMPONENTS: &[&str] = &["rust-src", "llvm-tools", "miri", "clippy", "rustfmt"];

/// The Miri job: each entry is one `cargo miri test` run, its cargo
/// arguments and its test binary's. Miri runs the simulator's lanes as OS
/// threads and interprets every instruction, so it gets the small
/// workloads: the simulator's unit tests, the device crate's unit tests,
/// and the allocator's dedicated Miri workloads (`tests/miri.rs`: a `Heap`
/// on the emulated device, its RPC server thread and its backing, kernels
/// in the simulator's OS-thread mode — which runs the simulator's unsafe
/// code, a lane's context and its baton). The simulator's scheduler and
/// timing tests (`sim/tests`) run natively only since 2026-12-07: under
/// Miri they took 80 s of a CI run that reached 1 237 s on the build
/// machine (the limit is 1 200), and Miri cannot switch stacks, so the
/// fiber code they drive natively is not what it checks.
///
/// Miri interprets a program on one core, threads and all, so the runs go
/// side by side, as many at once as the machine has cores (`miri`), the
/// longest first: `tests/miri.rs` in two (its churn, about 160 s; the
/// rest, about 150 s, on 2026-12-07 on the build machine), which took
/// 300 s one after the other and 171 s side by side.
const MIRI_RUNS: &[(&[&str], &[&str])] = &[
    (
        &["-p", "warpalloc-tool", "--test", "miri"],
        &["--test-threads=1", "miri_churn"],
    ),
    (
        &["-p", "warpalloc-tool", "--test", "miri"],
        &["--test-threads=1", "--skip", "miri_churn"],
    ),
    (&["-p", "warpalloc-device", "--lib"], &[]),
    (&["-p", "warpalloc-sim", "--lib"], &[]),
];
/// `MIRIFLAGS` for the Miri job, unless the environment sets `MIRIFLAGS`:
/// pointers travel through integers (device addresses, the simulator's
/// binding word) with exposed provenance; proptest reads its regression
/// files, which needs the file system.
const MIRI_FLAGS: &str = "-Zmiri-permissive-provenance -Zmiri-disable-isolation";
/// Property-test cases per test under Miri (proptest's default is 256).
const MIRI_PROPTEST_CASES: &str = "16";

/// The loom job: each entry is one `cargo test --release --target-dir
/// target/loom ARGS` run with `RUSTFLAGS="--cfg loom"`. The models live in
/// test targets of their own (`device/tests/loom.rs`, `loom_rpc.rs`,
/// `#![cfg(loom)]`). (A run of the lib's tests named `*loom*` ran none:
/// there are none; a review, 2026-12-07.)
const LOOM_RUNS: &[&[&str]] = &[
    &["-p", "warpalloc-device", "--test", "loom"],
    &["-p", "warpalloc-device", "--test", "loom_rpc"],
];

#[derive(Parser)]
#[command(name = "cargo xtask", about = "warpalloc's set-up, checks and demo")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what the build and the tests need (idempotent).
    Setup,
    /// Set up, then run every check: fmt, clippy, docs (warnings denied), tests, loom, Miri.
    Test,
    /// What CI runs: `test`, after printing the toolchain's versions.
    Ci,
    /// Stage the GPU check in `.device/` (release binary, run.sh, the CUDA
    /// C++ baseline, report.py), compile the baseline with the PyPI nvcc
    /// where it works, build the peer allocator Gallatin when its source is
    /// in `.peers/gallatin` or `GALLATIN_DIR` (CCCL's headers from `CCCL` or
    /// PyPI), and run the check here to show its no-GPU path. On a GPU
    /// machine, run `OUT=<dir> .device/run.sh` (`STEPS=...` for fewer steps;
    /// `BACK=<dir>` for the report and an archive of every output alone).
    DeviceCheck {
        /// A second build to time beside this one, before and after a change
        /// in one device call: a git revision (a branch, a tag, a commit)
        /// built in a worktree and staged as `.device/candidate/warpalloc`.
        /// run.sh then runs the bench's alloc-free cases at every size and
        /// its mixed case with it too, each right after this build's, and
        /// the report sets the two side by side.
        #[arg(long, value_name = "REV")]
        candidate: Option<String>,
    },
    /// Set up, then run the warpalloc CLI in release mode (default: `stress`).
    Run {
        /// Arguments for the warpalloc CLI.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut steps = Steps::default();
    let result = match cli.command {
        Cmd::Setup => steps.run("setup", setup),
        Cmd::Test => test(&mut steps),
        Cmd::Ci => print_versions().and_then(|()| test(&mut steps)),
        Cmd::Run { args } => run(&mut steps, args),
        Cmd::DeviceCheck { candidate } => device_check(&mut steps, candidate.as_deref()),
    };
    match result {
        Ok(()) => {
            steps.summary();
            ExitCode::SUCCESS
        }
        Err(e) => {
            steps.summary();
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Named steps, timed; a failure stops at once.
#[derive(Default)]
struct Steps {
    done: Vec<(String, Duration, bool)>,
}

impl Steps {
    fn run(&mut self, name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
        eprintln!("xtask: ── {name}");
        let t = Instant::now();
        let r = f();
        self.done.push((name.to_owned(), t.elapsed(), r.is_ok()));
        r.with_context(|| format!("step `{name}` failed"))
    }

    fn summary(&self) {
        if self.done.len() < 2 {
            return;
        }
        let total: Duration = self.done.iter().map(|(_, d, _)| *d).sum();
        eprintln!("xtask: step timings");
        for (name, d, ok) in &self.done {
            let status = if *ok { "ok" } else { "FAILED" };
            eprintln!("  {name:<8} {:>8.1} s  {status}", d.as_secs_f64());
        }
        eprintln!("  {:<8} {:>8.1} s", "total", total.as_secs_f64());
    }
}

/// The README's test command. Every cargo build in it is `--locked` (and
/// so is the `xtask` alias): CI builds the committed lockfiles, and a
/// manifest change that leaves one stale fails here instead of being
/// resolved afresh on each machine (a review, 2026-12-07).
fn test(steps: &mut Steps) -> Result<()> {
    steps.run("setup", setup)?;
    steps.run("fmt", || cargo(&["fmt", "--all", "--check"]).status_ok())?;
    steps.run("clippy", || {
        cargo(&[
            "clippy",
            "--locked",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .status_ok()
    })?;
    // Every library's docs, warnings (a dead intra-doc link) as errors.
    steps.run("doc", || {
        cargo(&["doc", "--locked", "--workspace", "--no-deps", "--lib"])
            .env("RUSTDOCFLAGS", "-D warnings")
            .status_ok()
    })?;
    // `WARPALLOC_SIM_SEED` narrows every seeded sweep to one seed: not
    // from CI's environment (a review of the test driver, 2026-12-07).
    steps.run("test", || {
        cargo(&["test", "--locked", "--workspace"])
            .env_remove("WARPALLOC_SIM_SEED")
            .status_ok()
    })?;
    steps.run("first-project", first_project)?;
    steps.run("loom", || {
        // Warnings denied in the models' build: the clippy step above
        // compiles none of the code behind `cfg(loom)` (a review of the
        // test driver, 2026-12-07). A clippy pass with `--cfg loom` found
        // nothing and cost CI 22 s, which it cannot spare (it runs near
        // its 20 minutes): run it by hand after changing that code —
        // `RUSTFLAGS="--cfg loom" cargo clippy -p warpalloc-device --tests
        // --target-dir target/loom-clippy -- -D warnings`.
        for args in LOOM_RUNS {
            let mut cmd = cargo(&[
                "test",
                "--locked",
                "--release",
                "--target-dir",
                "target/loom",
            ]);
            cmd.args(*args)
                .env("RUSTFLAGS", "--cfg loom -D warnings")
                .env_remove("CARGO_ENCODED_RUSTFLAGS");
            cmd.status_ok()?;
        }
        Ok(())
    })?;
    steps.run("miri", || {
        let miri = |cargo_args: &[&str]| {
            let mut cmd = cargo(&["miri", "test", "--locked"]);
            // The embedded PTX: Miri's target directory would otherwise get
            // a nested nvptx build (core included) of its own; the tests
            // step built the same one already.
            cmd.args(cargo_args).env(
                warpalloc_builder::TARGET_DIR_ENV,
                root().join("target").join("warpalloc-ptx"),
            );
            if std::env::var_os("MIRIFLAGS").is_none() {
                cmd.env("MIRIFLAGS", MIRI_FLAGS);
            }
            if std::env::var_os("PROPTEST_CASES").is_none() {
                cmd.env("PROPTEST_CASES", MIRI_PROPTEST_CASES);
            }
            cmd
        };
        // Built one after the other (cargo's lock would have them wait),
        // then run side by side.
        let mut built = BTreeSet::new();
        for (cargo_args, _) in MIRI_RUNS {
            if built.insert(*cargo_args) {
                miri(cargo_args).arg("--no-run").status_ok()?;
            }
        }
        let runs = MIRI_RUNS
            .iter()
            .map(|(cargo_args, test_args)| {
                let mut cmd = miri(cargo_args);
                cmd.arg("--").args(*test_args);
                cmd
            })
            .collect();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        side_by_side(runs, cores)
    })
}

/// Runs `commands`, `jobs` at a time, in their order; each one's output is
/// printed whole when it ends (with its time), so that the logs of runs
/// side by side do not interleave. An error names every command that
/// failed, once all have ended.
fn side_by_side(commands: Vec<Command>, jobs: usize) -> Result<()> {
    use std::sync::Mutex;
    let queue = Mutex::new(commands.into_iter().enumerate().collect::<Vec<_>>());
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let next = {
                        let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                        if queue.is_empty() {
                            break;
                        }
                        queue.remove(0)
                    };
                    let (i, mut cmd) = next;
                    let shown = show(&cmd);
                    eprintln!("xtask: $ {shown} (started)");
                    let t = Instant::now();
                    let out = cmd.output();
                    let took = t.elapsed().as_secs_f64();
                    let ok = match out {
                        Ok(out) => {
                            eprintln!(
                                "xtask: $ {shown} ({}, {took:.0} s)\n{}{}",
                                out.status,
                                String::from_utf8_lossy(&out.stdout),
                                String::from_utf8_lossy(&out.stderr)
                            );
                            out.status.success()
                        }
                        Err(e) => {
                            eprintln!("xtask: could not run `{shown}`: {e}");
                            false
                        }
                    };
                    if !ok {
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((i, shown));
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    if failed.is_empty() {
        return Ok(());
    }
    failed.sort();
    let names: Vec<String> = failed.into_iter().map(|(_, shown)| shown).collect();
    bail!("failed: `{}`", names.join("`, `"))
}

/// The first project (examples/first-project, a workspace of its own, as a
/// user's is): its formatting, clippy with and without the `gpu` feature (the
/// GPU build compiles against cudarc), then a run in the simulator, which
/// checks the kernels' results and the heap's stats and exits non-zero when
/// one is wrong. It shares the repository's target directory, so the
/// dependencies it has in common are built once.
fn first_project() -> Result<()> {
    in_example(&["fmt", "--manifest-path", FIRST_PROJECT, "--all", "--check"]).status_ok()?;
    for features in [&[][..], &["--features", "gpu"][..]] {
        let mut cmd = in_example(&[
            "clippy",
            "--locked",
            "--manifest-path",
            FIRST_PROJECT,
            "--all-targets",
        ]);
        cmd.args(features).args(["--", "-D", "warnings"]);
        cmd.status_ok()?;
    }
    in_example(&[
        "run",
        "--locked",
        "--manifest-path",
        FIRST_PROJECT,
        "-p",
        "first-project",
    ])
    .status_ok()
}

/// The first project's manifest.
const FIRST_PROJECT: &str = "examples/first-project/Cargo.toml";

/// `cargo ARGS` for the first project (`--manifest-path FIRST_PROJECT`
/// among ARGS), in the repository's target directory.
fn in_example(args: &[&str]) -> Command {
    let mut cmd = cargo(args);
    cmd.env("CARGO_TARGET_DIR", root().join("target"));
    cmd
}

/// The full nvcc of the pinned CUDA (compiler, NVVM, headers, runtime), for
/// the GPU check's baseline; installed on demand, not by `setup`.
const NVCC_FULL: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.88",
];

/// The pinned nvcc (`nvcc_full`) compiling `source` to `out` for sm_90,
/// C++17, against its own runtime, at optimisation `opt`: the GPU check's
/// host programs (the baseline, the memcheck control).
fn nvcc_sm90(opt: &str, source: &Path, out: &Path) -> Result<Command> {
    let cuda = nvcc_full()?.join("nvidia/cu13");
    let mut cmd = Command::new(cuda.join("bin/nvcc"));
    cmd.args([opt, "-arch=sm_90", "-std=c++17"])
        .arg(format!("-L{}", cuda.join("lib").display()))
        .arg("-o")
        .arg(out)
        .arg(source);
    Ok(cmd)
}

fn nvcc_full() -> Result<PathBuf> {
    let dir = ptxas::cache_dir()
        .context("no cache directory: set HOME, XDG_CACHE_HOME or WARPALLOC_CACHE_DIR")?
        .join("cuda-nvcc-full-13.0.88");
    let nvcc = dir.join("nvidia/cu13/bin/nvcc");
    if nvcc.is_file() {
        return Ok(dir);
    }
    eprintln!(
        "xtask: installing nvcc ({}) into {}",
        NVCC_FULL.join(" "),
        dir.display()
    );
    pip_install(&dir, NVCC_FULL).context("pip install of the pinned nvcc")?;
    Ok(dir)
}

/// `pip install --no-deps --target DIR PACKAGES` (quiet).
fn pip_install(dir: &Path, packages: &[&str]) -> Result<String> {
    Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(dir)
        .args(packages)
        .output_ok()
}

fn device_check(steps: &mut Steps, candidate: Option<&str>) -> Result<()> {
    steps.run("setup", setup)?;
    let stage = root().join(".device");
    steps.run("build", || {
        cargo(&["build", "--release", "-p", "warpalloc-tool"]).status_ok()
    })?;
    // The first project built for GPU 0 (`--features gpu`): a user's
    // program, through cudarc and `heap.link(&module)` of a cudarc module,
    // which no other step runs.
    steps.run("first-project (gpu)", || {
        in_example(&[
            "build",
            "--release",
            "--manifest-path",
            FIRST_PROJECT,
            "-p",
            "first-project",
            "--features",
            "gpu",
        ])
        .status_ok()
    })?;
    steps.run("stage", || {
        if stage.exists() {
            std::fs::remove_dir_all(&stage)?;
        }
        std::fs::create_dir_all(&stage)?;
        std::fs::copy(
            root().join("target/release/warpalloc"),
            stage.join("warpalloc"),
        )?;
        std::fs::copy(
            root().join("target/release/first-project"),
            stage.join("first-project"),
        )?;
        for f in ["run.sh", "baseline.cu", "report.py"] {
            std::fs::copy(root().join("scripts/device-check").join(f), stage.join(f))?;
        }
        Ok(())
    })?;
    if let Some(rev) = candidate {
        steps.run("candidate", || stage_candidate(&stage, rev))?;
    }
    steps.run("baseline", || {
        // Built here when the PyPI nvcc works; the GPU machine rebuilds it
        // with its own nvcc when it has one.
        nvcc_sm90("-O3", &stage.join("baseline.cu"), &stage.join("baseline"))?
            .output_ok()
            .context("compiling baseline.cu")?;
        Ok(())
    })?;
    steps.run("peers", || peers(&stage))?;
    steps.run("no-GPU path", || {
        let out = stage.join("out-local");
        let back = stage.join("back-local");
        if back.exists() {
            std::fs::remove_dir_all(&back)?;
        }
        let status = Command::new(stage.join("run.sh"))
            .env("OUT", &out)
            .env("BACK", &back)
            .status()?;
        eprintln!(
            "xtask: run.sh here exited with {status}; its outputs are in {}",
            out.display()
        );
        // Its no-GPU path must end well: a failure here (report.py's, a
        // BACK it could not write) would end the GPU run the same way.
        if !status.success() {
            bail!("run.sh's no-GPU path exited with {status}");
        }
        let info = std::fs::read_to_string(out.join("info.txt")).unwrap_or_default();
        if !info.contains("GPU:") {
            bail!("`warpalloc --gpu info` did not say whether there is a GPU: {info}");
        }
        if !out.join("device-check.md").is_file() {
            bail!("report.py wrote no device-check.md");
        }
        if !out.join("first-project.txt").is_file() {
            bail!("run.sh did not run the staged first-project");
        }
        if stage.join("peers/gallatin-bench").is_file() && !out.join("gallatin.err").is_file() {
            bail!("run.sh did not run the staged peers/gallatin-bench");
        }
        if candidate.is_some() && !out.join("candidate-bench-mixed.err").is_file() {
            bail!("run.sh did not run the staged candidate build");
        }
        // What the device tool brings back: at most 8 files of its $OUT.
        let returned = std::fs::read_dir(&back)
            .with_context(|| format!("run.sh made no BACK folder {}", back.display()))?
            .count();
        if !back.join("device-check-raw.tgz").is_file()
            || !back.join("device-check.md").is_file()
            || returned > 8
        {
            bail!(
                "run.sh's BACK folder {} holds {returned} files, not the report and its archive",
                back.display()
            );
        }
        Ok(())
    })?;
    eprintln!(
        "xtask: staged {}; on a GPU machine run `OUT=<dir> .device/run.sh` (the device tool: carry `.device`, \
         run `BACK=$OUT OUT=/tmp/device-check .device/run.sh`, BACK first, with a timeout_s of 540: its $OUT brings back 8 files at most)",
        stage.display()
    );
    Ok(())
}

/// The memcheck control (`vmm_control.cu` of `shared`, the peers' folder)
/// built for sm_90 into `STAGE/peers/vmm_control`, as `build.sh` builds it;
/// nothing (said) where the source is missing.
fn vmm_control_alone(stage: &Path, shared: &Path) -> Result<()> {
    let source = shared.join("vmm_control.cu");
    if !source.is_file() {
        eprintln!(
            "xtask: no {}, so the GPU check runs no memcheck control",
            source.display()
        );
        return Ok(());
    }
    let out = stage.join("peers");
    std::fs::create_dir_all(&out)?;
    nvcc_sm90("-O2", &source, &out.join("vmm_control"))?
        .arg("-ldl")
        .output_ok()
        .context("compiling the memcheck control (vmm_control.cu)")?;
    eprintln!(
        "xtask: built the memcheck control {}",
        out.join("vmm_control").display()
    );
    Ok(())
}

/// Stages the warpalloc binary of git revision `rev` as
/// `STAGE/candidate/warpalloc` (and its commit in `candidate/revision`):
/// checked out in a detached worktree under `target/`, built in release
/// mode with a target folder of its own (kept between calls), the
/// worktree removed again.
fn stage_candidate(stage: &Path, rev: &str) -> Result<()> {
    let git = |args: &[&str]| -> Result<String> {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output_ok()
            .map(|out| out.trim().to_owned())
    };
    let commit = git(&["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
        .with_context(|| format!("`{rev}` names no commit of this repository"))?;
    let worktree = root().join("target/candidate-src");
    // A worktree an interrupted call left, with its folder or without
    // (`cargo clean`): gone, and unregistered.
    if worktree.exists() {
        let _ = git(&["worktree", "remove", "--force", &worktree.to_string_lossy()]);
        if worktree.exists() {
            std::fs::remove_dir_all(&worktree)?;
        }
    }
    git(&["worktree", "prune"])?;
    git(&[
        "worktree",
        "add",
        "--force",
        "--detach",
        &worktree.to_string_lossy(),
        &commit,
    ])?;
    let built = cargo(&["build", "--release", "-p", "warpalloc-tool"])
        .current_dir(&worktree)
        .env("CARGO_TARGET_DIR", root().join("target/candidate"))
        .status_ok();
    let removed = git(&["worktree", "remove", "--force", &worktree.to_string_lossy()]);
    built.with_context(|| format!("building the candidate {rev} ({commit})"))?;
    removed?;
    let dir = stage.join("candidate");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(
        root().join("target/candidate/release/warpalloc"),
        dir.join("warpalloc"),
    )?;
    std::fs::write(dir.join("revision"), format!("{rev} ({commit})\n"))?;
    eprintln!(
        "xtask: staged the candidate {rev} ({commit}) in {}",
        dir.display()
    );
    Ok(())
}

/// The CCCL headers (`nvidia-cuda-cccl`, pinned) that Gallatin needs: its
/// `cooperative_groups.h` includes `<nv/target>`, which the nvcc wheel lacks.
const CCCL_PACKAGE: &str = "nvidia-cuda-cccl==13.0.85";
/// Gallatin's header that the peer's bench includes: a source folder without
/// it is not a copy of saltsystemslab/gallatin.
const GALLATIN_HEADER: &str = "include/gallatin/allocators/global_allocator.cuh";
/// The mangled names of the kernels of `gallatin_bench.cu`, whose ptxas
/// register lines the `peers` step prints.
const GALLATIN_KERNELS: &[(&str, &str)] =
    &[("alloc_free", "_Z10alloc_freejj"), ("mixed", "_Z5mixedjj")];

/// The `peers` step of `device-check`: builds the peer allocator Gallatin's
/// bench and the memcheck control (`../shared/peers/build.sh`) into
/// `STAGE/peers/`, when Gallatin's source is given (`$GALLATIN_DIR`, else
/// `.peers/gallatin`); without it, the memcheck control alone (it needs
/// neither Gallatin nor CCCL: until 2026-12-07 a check staged without
/// Gallatin had no control for its memcheck row).
fn peers(stage: &Path) -> Result<()> {
    let shared = root()
        .parent()
        .context("the repository root has no parent folder (where shared/ is)")?
        .join("shared/peers");
    let Some(gallatin) = gallatin_dir()? else {
        eprintln!(
            "xtask: no Gallatin source, so the GPU check's report will have no Gallatin column: \
             set GALLATIN_DIR to a copy of github.com/saltsystemslab/gallatin (or unpack one into .peers/gallatin)"
        );
        return vmm_control_alone(stage, &shared);
    };
    let build = shared.join("build.sh");
    if !build.is_file() {
        bail!(
            "Gallatin's source is given ({}), but {} is missing",
            gallatin.display(),
            build.display()
        );
    }
    let nvcc = nvcc_full()?.join("nvidia/cu13/bin/nvcc");
    let cccl = cccl()?;
    let out = stage.join("peers");
    eprintln!(
        "xtask: building Gallatin's bench from {} into {}",
        gallatin.display(),
        out.display()
    );
    let mut cmd = Command::new("bash");
    cmd.arg(build)
        .arg(gallatin)
        .arg(&out)
        .env("NVCC", nvcc)
        .env("CCCL", cccl);
    let shown = show(&cmd);
    let done = cmd
        .output()
        .with_context(|| format!("could not run `{shown}`"))?;
    // ptxas's `-v` lines are on stderr.
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    if !done.status.success() {
        bail!("`{shown}` failed ({}):\n{log}", done.status);
    }
    for f in ["gallatin-bench", "vmm_control"] {
        if !out.join(f).is_file() {
            bail!("`{shown}` made no {}", out.join(f).display());
        }
    }
    for (name, mangled) in GALLATIN_KERNELS {
        match ptxas_registers(&log, mangled) {
            Some(line) => eprintln!("xtask: Gallatin's {name} kernel (sm_90): {line}"),
            None => {
                eprintln!("xtask: no ptxas register line for Gallatin's {name} kernel ({mangled})")
            }
        }
    }
    Ok(())
}

/// Gallatin's source: `$GALLATIN_DIR`, else `.peers/gallatin` (git-ignored)
/// when it exists; `None` when neither is given.
fn gallatin_dir() -> Result<Option<PathBuf>> {
    let dir = match std::env::var_os("GALLATIN_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let dir = root().join(".peers/gallatin");
            if !dir.exists() {
                return Ok(None);
            }
            dir
        }
    };
    if !dir.join(GALLATIN_HEADER).is_file() {
        bail!(
            "{} is not a copy of github.com/saltsystemslab/gallatin (it has no {GALLATIN_HEADER})",
            dir.display()
        );
    }
    Ok(Some(dir))
}

/// The CCCL headers' include folder: `$CCCL`, else
/// `.peers/cccl/nvidia/cu13/include/cccl` (git-ignored), where the pinned
/// wheel is installed with pip on demand.
fn cccl() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CCCL").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("nv/target").is_file() {
            bail!(
                "CCCL={} has no nv/target (want the cccl include folder of the unpacked {CCCL_PACKAGE} wheel)",
                dir.display()
            );
        }
        return Ok(dir);
    }
    let base = root().join(".peers/cccl");
    let include = base.join("nvidia/cu13/include/cccl");
    if include.join("nv/target").is_file() {
        return Ok(include);
    }
    eprintln!(
        "xtask: installing the CCCL headers ({CCCL_PACKAGE}) into {}",
        base.display()
    );
    if base.exists() {
        std::fs::remove_dir_all(&base).with_context(|| format!("removing {}", base.display()))?;
    }
    pip_install(&base, &[CCCL_PACKAGE]).context("pip install of the CCCL headers")?;
    if !include.join("nv/target").is_file() {
        bail!(
            "{CCCL_PACKAGE} installed, but {} has no nv/target (package layout changed?)",
            include.display()
        );
    }
    Ok(include)
}

/// ptxas's register line (`Used N registers, …`) for the entry function
/// `mangled` in nvcc's `-Xptxas -v` output.
fn ptxas_registers<'a>(log: &'a str, mangled: &str) -> Option<&'a str> {
    let entry = format!("Compiling entry function '{mangled}'");
    log.lines()
        .skip_while(|l| !l.contains(&entry))
        .skip(1)
        .take_while(|l| !l.contains("Compiling entry function"))
        .find(|l| l.contains("Used ") && l.contains(" registers"))
        .map(|l| l.split_once(": ").map_or(l, |(_, rest)| rest).trim())
}

fn run(steps: &mut Steps, mut args: Vec<String>) -> Result<()> {
    steps.run("setup", setup)?;
    if args.is_empty() {
        args.push("stress".to_owned());
    }
    steps.run("run", || {
        let mut cmd = cargo(&[
            "run",
            "--release",
            "-p",
            "warpalloc-tool",
            "--bin",
            "warpalloc",
            "--",
        ]);
        cmd.args(&args);
        cmd.status_ok()
    })
}

/// The repository root (this crate's parent directory).
fn root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

/// The toolchain the repository pins (`channel` in rust-toolchain.toml).
fn toolchain() -> String {
    std::fs::read_to_string(root().join("rust-toolchain.toml"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == "channel").then(|| v.trim().trim_matches('"').to_owned())
            })
        })
        .unwrap_or_else(|| "nightly".to_owned())
}

/// `cargo ARGS` in the repository root, with the cargo that runs xtask.
fn cargo(args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(root());
    cmd
}

trait CommandExt {
    /// Runs, inheriting stdio; an error unless it exits with 0.
    fn status_ok(&mut self) -> Result<()>;
    /// Runs quietly; stdout on success, an error with all output otherwise.
    fn output_ok(&mut self) -> Result<String>;
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

impl CommandExt for Command {
    fn status_ok(&mut self) -> Result<()> {
        let shown = show(self);
        eprintln!("xtask: $ {shown}");
        let status = self
            .status()
            .with_context(|| format!("could not run `{shown}`"))?;
        if !status.success() {
            bail!("`{shown}` failed ({status})");
        }
        Ok(())
    }

    fn output_ok(&mut self) -> Result<String> {
        let shown = show(self);
        let out = self
            .output()
            .with_context(|| format!("could not run `{shown}`"))?;
        if !out.status.success() {
            bail!(
                "`{shown}` failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn setup() -> Result<()> {
    let toolchain = toolchain();
    let added = components(&toolchain)?;
    miri_setup()?;
    let ptxas = ptxas_setup()?;
    let added = if added.is_empty() {
        String::new()
    } else {
        format!(" (added {})", added.join(", "))
    };
    eprintln!(
        "xtask: setup ok: {toolchain} with {}{added}; Miri sysroot; ptxas {}",
        COMPONENTS.join(", "),
        ptxas.display()
    );
    Ok(())
}

/// Adds the missing [`COMPONENTS`]; returns the ones it added.
fn components(toolchain: &str) -> Result<Vec<String>> {
    let listed = Command::new("rustup")
        .args(["component", "list", "--installed", "--toolchain", toolchain])
        .output_ok()
        .context("listing the toolchain's components (is rustup installed?)")?;
    let installed = installed_components(&listed);
    let missing: Vec<String> = COMPONENTS
        .iter()
        .filter(|c| !installed.contains(**c))
        .map(|c| (*c).to_owned())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "xtask: adding components {} to {toolchain}",
            missing.join(", ")
        );
        Command::new("rustup")
            .args(["component", "add", "--toolchain", toolchain])
            .args(&missing)
            .status_ok()?;
    }
    Ok(missing)
}

/// Component names from `rustup component list --installed`, without the host
/// triple (`llvm-tools-x86_64-unknown-linux-gnu` → `llvm-tools`).
fn installed_components(listed: &str) -> BTreeSet<String> {
    listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let l = l.split_whitespace().next().unwrap_or(l);
            COMPONENTS
                .iter()
                .find(|c| {
                    l == **c
                        || l.strip_prefix(**c)
                            .is_some_and(|rest| rest.starts_with('-'))
                })
                .map_or_else(|| l.to_owned(), |c| (*c).to_owned())
        })
        .collect()
}

/// `cargo miri setup`: builds Miri's sysroot once; quiet when it exists.
fn miri_setup() -> Result<()> {
    cargo(&["miri", "setup"])
        .output_ok()
        .context("`cargo miri setup` (Miri's sysroot)")?;
    Ok(())
}

/// Installs the pinned ptxas into the cache unless it (or `$WARPALLOC_PTXAS`) is there.
fn ptxas_setup() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(ptxas::ENV_PTXAS).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("{}={} is not a file", ptxas::ENV_PTXAS, p.display());
        }
        return Ok(p);
    }
    let dir = ptxas::pinned_install_dir()
        .context("no cache directory: set HOME, XDG_CACHE_HOME or WARPALLOC_CACHE_DIR")?;
    let bin = dir.join(ptxas::PTXAS_IN_PACKAGE);
    if bin.is_file() && Command::new(&bin).arg("--version").output_ok().is_ok() {
        return Ok(bin);
    }
    let spec = format!("{}=={}", ptxas::NVCC_PACKAGE, ptxas::NVCC_VERSION);
    eprintln!(
        "xtask: installing ptxas ({spec} from PyPI) into {}",
        dir.display()
    );
    let parent = dir.parent().context("cache dir has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // Install beside the final place, then rename: an interrupted install never
    // leaves a half-filled directory that looks done.
    let staging = parent.join(format!(
        ".cuda-nvcc-{}-{}",
        ptxas::NVCC_VERSION,
        std::process::id()
    ));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .context("ptxas is installed with pip: python3 is needed")?;
    Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .arg("--target")
        .arg(&staging)
        .arg(&spec)
        .output_ok()
        .with_context(|| format!("`pip install {spec}` (needs pip and network access to PyPI)"))?;
    if !staging.join(ptxas::PTXAS_IN_PACKAGE).is_file() {
        bail!(
            "{spec} installed, but has no {} (package layout changed?)",
            ptxas::PTXAS_IN_PACKAGE
        );
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::rename(&staging, &dir)
        .with_context(|| format!("moving {} to {}", staging.display(), dir.display()))?;
    Command::new(&bin)
        .arg("--version")
        .output_ok()
        .context("the installed ptxas does not run")?;
    Ok(bin)
}

fn print_versions() -> Result<()> {
    let toolchain = toolchain();
    for (what, mut cmd) in [("rustc", Command::new("rustc")), ("cargo", cargo(&[]))] {
        cmd.arg("-V").current_dir(root());
        let v = cmd.output_ok().with_context(|| format!("{what} -V"))?;
        eprintln!("xtask: {}", v.trim());
    }
    eprintln!("xtask: toolchain {toolchain}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names() {
        let listed = "cargo-x86_64-unknown-linux-gnu\nclippy-x86_64-unknown-linux-gnu\n\
                      llvm-tools-x86_64-unknown-linux-gnu\nmiri-x86_64-unknown-linux-gnu\n\
                      rust-src\nrustfmt-x86_64-unknown-linux-gnu\n";
        let got = installed_components(listed);
        for c in COMPONENTS {
            assert!(got.contains(*c), "{c} not in {got:?}");
        }
        let got = installed_components("rust-std-x86_64-unknown-linux-gnu\nllvm-tools-preview\n");
        assert!(got.contains("llvm-tools"));
        assert!(!got.contains("rust-src"), "{got:?}");
    }

    #[test]
    fn toolchain_is_pinned() {
        assert!(toolchain().starts_with("nightly"));
    }

    #[test]
    fn ptxas_register_lines() {
        let log = "ptxas info    : Compiling entry function '_Z5mixedjj' for 'sm_90'\n\
                   ptxas info    : Function properties for _Z5mixedjj\n\
                   \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                   ptxas info    : Used 71 registers, used 0 barriers\n\
                   ptxas info    : Compiling entry function '_Z10alloc_freejj' for 'sm_90'\n\
                   ptxas info    : Function properties for _Z10alloc_freejj\n\
                   ptxas info    : Used 70 registers, used 0 barriers\n";
        assert_eq!(
            ptxas_registers(log, "_Z10alloc_freejj"),
            Some("Used 70 registers, used 0 barriers")
        );
        assert_eq!(
            ptxas_registers(log, "_Z5mixedjj"),
            Some("Used 71 registers, used 0 barriers")
        );
        assert_eq!(ptxas_registers(log, "_Z4nonev"), None);
    }

    #[test]
    fn cli_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::parse_from(["xtask", "run", "demo", "--seed", "3"]);
        let Cmd::Run { args } = cli.command else {
            panic!("not run");
        };
        assert_eq!(args, ["demo", "--seed", "3"]);
    }
}
