//! The `warpalloc` binary: the main job's demo runs, checks its result, and
//! says where it ran.

use std::process::Command;

fn warpalloc(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warpalloc"))
        .args(args)
        .output()
        .expect("run the warpalloc binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `warpalloc` with `args` (which ask for `--json`), requires it to
/// succeed, and returns its report.
fn warpalloc_json(args: &[&str]) -> serde_json::Value {
    let (ok, text) = warpalloc(args);
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):
{text}"
        )
    })
}

/// The GPU check report tests' bench: alloc-free at 64 B, 256 and 512
/// threads, in the simulator, as JSON (two rows).
const REPORT_BENCH: &[&str] = &[
    "--simulator",
    "bench",
    "--json",
    "--sizes",
    "64",
    "--threads",
    "256",
    "512",
    "--cases",
    "alloc-free",
    "--workers",
    "1",
];

/// An empty temporary folder for the outputs a report test makes up:
/// `warpalloc-<name>-<pid>`, emptied first.
fn report_dir(name: &str) -> std::path::PathBuf {
    let out = std::env::temp_dir().join(format!("warpalloc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("a temporary directory");
    out
}

#[test]
fn demo_in_the_simulator_gives_every_thread_a_unique_ticket() {
    for convergence in ["converged", "random"] {
        let (ok, text) = warpalloc(&[
            "--simulator",
            "demo",
            "--blocks",
            "7",
            "--threads",
            "100",
            "--workers",
            "1",
            "--seed",
            "3",
            "--convergence",
            convergence,
        ]);
        assert!(ok, "{text}");
        assert!(text.contains("target : CPU warp simulator"), "{text}");
        assert!(text.contains("700 distinct of 700"), "{text}");
        assert!(text.contains("every thread got a unique ticket"), "{text}");
    }
}

#[test]
fn requiring_a_gpu_without_one_is_a_clear_error() {
    if warpalloc_host::device::cuda::driver_present() {
        return; // This machine has a driver: the GPU path is tested by the GPU check.
    }
    let (ok, text) = warpalloc(&["--gpu", "demo"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("a GPU was required: no CUDA driver"),
        "{text}"
    );
    assert!(
        !text.contains("simulator still runs"),
        "--gpu must not promise the simulator: {text}"
    );
}

/// `info --link-check` links cudarc modules on a GPU (`run.sh` runs it);
/// with no GPU it says so and succeeds, as `info` does.
#[test]
fn info_link_check_says_when_there_is_no_gpu() {
    let (ok, text) = warpalloc(&["info", "--link-check"]);
    assert!(ok, "{text}");
    if text.contains("GPU: none") {
        assert!(
            text.contains("cudarc link check: not run (no GPU)"),
            "{text}"
        );
    } else {
        assert!(text.contains("cudarc link check: ok: "), "{text}");
    }
    let (ok, text) = warpalloc(&["info"]);
    assert!(ok && !text.contains("link check"), "{text}");
    // `--gpu` asks for the GPU: none is a failure, as for every command
    // (run.sh's `--gpu info --link-check` exited 0 with no GPU).
    let (ok, text) = warpalloc(&["--gpu", "info", "--link-check"]);
    if text.contains("GPU: none") {
        assert!(!ok && text.contains("error: --gpu: no GPU"), "{text}");
    } else {
        assert!(ok, "{text}");
    }
}

/// `stress --max-size` below the kernels' 16-byte tag is refused by the
/// parser (a lane's `clamp` panicked with its bounds crossed).
#[test]
fn stress_refuses_a_largest_size_below_the_tag() {
    let (ok, text) = warpalloc(&["--simulator", "stress", "--max-size", "8"]);
    assert!(!ok && text.contains("--max-size"), "{text}");
}

#[test]
fn info_names_the_embedded_ptx() {
    let (ok, text) = warpalloc(&["info"]);
    assert!(ok, "{text}");
    assert!(text.contains("embedded PTX: sm_75"), "{text}");
    assert!(text.contains("warp_tickets"), "{text}");
    // Every stress run `info` lists is a kernel of the PTX, under its name.
    let runs = text
        .lines()
        .find_map(|l| l.strip_prefix("stress runs (stress --kernels): "))
        .expect("info lists the stress runs");
    let ptx = text
        .lines()
        .find(|l| l.starts_with("embedded PTX"))
        .expect("the PTX line");
    for run in runs.split(", ") {
        assert!(
            ptx.contains(run),
            "stress run {run} is no PTX kernel: {text}"
        );
    }
}

#[test]
fn stress_in_the_simulator_reports_ok() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--blocks",
        "4",
        "--threads",
        "64",
        "--iterations",
        "4",
        "--workers",
        "1",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("CPU warp simulator"), "{text}");
    for kernel in [
        "churn",
        "size_sweep",
        "aligned",
        "fill",
        "lifetimes",
        "collections",
        "resize",
        "bad_input",
    ] {
        assert!(text.contains(kernel), "{kernel} missing: {text}");
    }
    assert!(text.contains("stress: OK"), "{text}");
}

/// The simulator runs the sm_75 paths when asked (`--capability 7.5`: a
/// free's lanes combine by runs, without `redux.sync`), says so, and every
/// kernel passes on them with random convergence.
#[test]
fn stress_on_the_sm75_paths_reports_ok() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--blocks",
        "4",
        "--threads",
        "64",
        "--iterations",
        "4",
        "--workers",
        "1",
        "--convergence",
        "random",
        "--capability",
        "7.5",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("lanes as on sm_75"), "{text}");
    assert!(text.contains("stress: OK"), "{text}");
    let (ok, text) = warpalloc(&["--simulator", "stress", "--capability", "7.0"]);
    assert!(!ok && text.contains("oldest module is for 7.5"), "{text}");
}

/// `--watchdog` sets the simulator's wall-clock limit: a run far longer
/// than one second stops at it with the simulator's report, and exits
/// non-zero, instead of running on.
#[test]
fn the_watchdog_option_stops_a_long_simulation() {
    let started = std::time::Instant::now();
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "churn",
        "--blocks",
        "64",
        "--threads",
        "256",
        "--iterations",
        "100000",
        "--watchdog",
        "1",
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains("watchdog"), "{text}");
    assert!(started.elapsed().as_secs() < 60, "{text}");
    let (ok, text) = warpalloc(&["--simulator", "stress", "--watchdog", "0"]);
    assert!(!ok && text.contains("--watchdog"), "{text}");
}

/// Under a memory cap every kernel passes: nulls are answers, and a
/// shrinking `realloc` with no memory to move to keeps its block (it once
/// returned null, which `resize` counted as lost contents). The runs that
/// found it: a 16 MiB limit with random convergence, and a 16-slab pool.
/// `collections` (infallible `Vec`/`Box`/`String`) is skipped, with the
/// reason, instead of aborting the process when the heap runs out (an
/// 8 MiB limit with 16 blocks of 32 threads did).
#[test]
fn stress_under_a_memory_cap_passes() {
    let runs: [&[&str]; 3] = [
        &[
            "--limit",
            "16777216",
            "--convergence",
            "random",
            "--seed",
            "11",
            "--blocks",
            "4",
        ],
        &[
            "--pool-slabs",
            "16",
            "--large-one-in",
            "0",
            "--seed",
            "3",
            "--blocks",
            "4",
        ],
        &[
            "--limit",
            "8388608",
            "--convergence",
            "random",
            "--seed",
            "23",
            "--blocks",
            "16",
            "--threads",
            "32",
        ],
    ];
    for cap in runs {
        let mut args = vec![
            "--simulator",
            "stress",
            "--kernels",
            "size_sweep,resize,collections",
        ];
        args.extend(cap);
        let (ok, text) = warpalloc(&args);
        assert!(ok, "{cap:?}: {text}");
        assert!(text.contains("stress: OK"), "{cap:?}: {text}");
        assert!(
            text.contains("skipped: collections"),
            "{cap:?}: collections ran under a cap: {text}"
        );
    }
}

/// A heap capped at one slab: `resize`'s 16-byte blocks take it, so every
/// growth fails and the last `realloc` (16 to 24 bytes) is a grow that may
/// fail too. The kernel once counted that null, and the 16 bytes a moved
/// block kept of 24, as lost contents (CI failed on the 8 MiB run above
/// when a lane's first growth found the heap full). One worker: the same
/// schedule every time.
#[test]
fn resize_at_a_one_slab_cap_counts_failed_growth_as_nulls() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "resize",
        "--limit",
        "2097152",
        "--workers",
        "1",
        "--blocks",
        "1",
        "--threads",
        "32",
        "--json",
    ]);
    assert!(ok, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).expect(&text);
    let resize = &report["kernels"][0];
    assert_eq!(resize["kernel"], "resize", "{text}");
    assert!(resize["allocs"].as_u64() > Some(0), "{text}");
    assert!(resize["nulls"].as_u64() > Some(0), "{text}");
    assert_eq!(resize["corrupt"], 0, "{text}");
    assert_eq!(resize["broken"], 0, "{text}");
}

#[test]
fn stress_fails_loudly_on_a_planted_corruption() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "lifetimes",
        "--blocks",
        "2",
        "--threads",
        "64",
        "--iterations",
        "4",
        "--plant-corruption",
        "20",
    ]);
    assert!(!ok, "a corrupted run exited 0: {text}");
    assert!(
        text.contains("FAIL: ") && text.contains("failed their pattern check"),
        "{text}"
    );
    assert!(text.contains("stress: FAILED"), "{text}");
}

/// Every stress kernel allocates through warpalloc in the simulator —
/// `collections` (Vec/Box/String) included, through the tool's global
/// allocator — and the report shows the heap's traffic for each.
#[test]
fn stress_shows_heap_traffic_for_every_kernel() {
    let report = warpalloc_json(&[
        "--simulator",
        "stress",
        "--blocks",
        "2",
        "--threads",
        "64",
        "--iterations",
        "2",
        "--workers",
        "1",
        "--json",
    ]);
    let kernels = report["kernels"].as_array().expect("kernels");
    assert_eq!(kernels.len(), 8, "{report}");
    for k in kernels {
        let name = k["kernel"].as_str().unwrap_or("?");
        let traffic = k["heap_traffic"].as_u64().expect("heap_traffic");
        assert!(traffic > 0, "{name}: no heap traffic: {k}");
        assert_eq!(k["live_after"].as_u64(), Some(0), "{name}: {k}");
    }
}

#[test]
fn stress_json_is_machine_readable() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "churn",
        "--blocks",
        "2",
        "--threads",
        "64",
        "--seed",
        "7",
        "--workers",
        "1",
        "--json",
    ]);
    assert!(ok, "{text}");
    assert!(
        text.trim_start().starts_with('{') && text.contains("\"ok\": true"),
        "{text}"
    );
    // The run's settings: enough to replay it.
    for said in [
        "\"seed\": 7",
        "\"simulator_workers\": 1",
        "\"simulator_convergence\": \"converged\"",
        "\"simulator_capability\": \"9.0\"",
        "\"iterations\": 10",
        "\"blocks\": 2",
        "\"command_line\"",
        "\"mode\": \"rpc\"",
    ] {
        assert!(text.contains(said), "{said} not in {text}");
    }
}

/// Where stderr is a log, not a terminal (CI), stress prints a line per
/// finished kernel instead of a progress bar.
#[test]
fn stress_prints_a_line_per_kernel_in_a_log() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "size_sweep,aligned",
        "--blocks",
        "1",
    ]);
    assert!(ok, "{text}");
    assert!(
        text.contains("stress: size_sweep ok in") && text.contains("stress: aligned ok in"),
        "{text}"
    );
}

#[test]
fn bench_prints_every_case_and_keeps_going_past_a_failed_one() {
    // 0 threads is a launch the simulator refuses (a grid of no blocks): that
    // case fails, and every other case still runs and prints its row.
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--sizes",
        "64",
        "--threads",
        "0,64",
        "--rounds",
        "1",
        "--block",
        "32",
    ]);
    assert!(!ok, "a failed case must make bench fail:\n{text}");
    let rows: Vec<&str> = text.lines().collect();
    assert!(
        rows.iter()
            .any(|l| l.starts_with("alloc_free") && l.contains("FAILED")),
        "no FAILED row for 0 threads:\n{text}"
    );
    let good = rows
        .iter()
        .find(|l| l.starts_with("alloc_free ") && !l.contains("FAILED") && l.contains(" 64 "))
        .unwrap_or_else(|| panic!("no alloc_free row for 64 threads:\n{text}"));
    // The simulator's deterministic cost per pair: steps/RMWs/system-scope
    // accesses.
    assert!(good.contains('/'), "no simulator counts in {good:?}");
    for case in [
        "rising",
        "alloc_free warmed up",
        "alloc_free spread",
        "mixed 16 B-8 KiB",
        "fragmentation",
        "footprint",
        "out of memory",
    ] {
        assert!(
            rows.iter()
                .any(|l| l.starts_with(case) && !l.contains("FAILED")),
            "no {case} row after the failed case:\n{text}"
        );
    }
    assert!(text.contains("1 case(s) failed"), "{text}");
}

/// `--timed` schedules the simulator by time: the report names the model
/// and each row a warp's mean cycles per pair — at least the path's round
/// trips (7 of 300 cycles each), and none without it.
#[test]
fn bench_timed_reports_cycles_per_pair() {
    let args = [
        "--simulator",
        "bench",
        "--json",
        "--cases",
        "alloc-free",
        "--sizes",
        "64",
        "--threads",
        "256",
        "--workers",
        "1",
    ];
    let timed: Vec<&str> = args.iter().copied().chain(["--timed"]).collect();
    let report = warpalloc_json(&timed);
    let timing = report["settings"]["simulator_timing"].as_str();
    assert!(
        timing.is_some_and(|t| t.contains("round_trip: 300")),
        "{report}"
    );
    let cycles = report["rows"][0]["sim_cycles_per_pair"].as_f64();
    assert!(
        cycles.is_some_and(|c| (7.0 * 300.0..100_000.0).contains(&c)),
        "{report}"
    );
    let untimed = warpalloc_json(&args);
    assert!(
        untimed["settings"]["simulator_timing"].is_null(),
        "{untimed}"
    );
    assert!(
        untimed["rows"][0]["sim_cycles_per_pair"].is_null(),
        "{untimed}"
    );
}

/// `bench --events` prints the allocator's events of each warm launch
/// under its row and puts them in the JSON (here the simulator's counts:
/// on a GPU the kernels' events build's), per group; without the flag
/// there are none. A warm alloc-free launch of whole warps at 64 B makes a
/// group a warp: each malloc scans once, and every group-malloc locks a
/// slot.
#[test]
fn bench_events_counts_the_allocators_events_per_group() {
    let args = [
        "--simulator",
        "bench",
        "--cases",
        "alloc-free,mixed",
        "--sizes",
        "64",
        "--threads",
        "512",
        "--block",
        "128",
        "--workers",
        "1",
    ];
    let with: Vec<&str> = args.iter().copied().chain(["--events"]).collect();
    let (ok, text) = warpalloc(&with);
    assert!(ok, "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("events (")).collect();
    assert_eq!(lines.len(), 2, "an events line a row:\n{text}");
    for (line, unit) in lines.iter().zip(["warp-pair", "free group"]) {
        assert!(
            line.starts_with(&format!("    events (simulator, per {unit} of "))
                && line.contains(" scans, ")
                && line.contains(" extra walk rounds, "),
            "{line}"
        );
    }
    let json: Vec<&str> = with.iter().copied().chain(["--json"]).collect();
    let report = warpalloc_json(&json);
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{report}");
    for row in rows {
        let events = &row["events"];
        assert_eq!(events["counted_on"], "simulator", "{row}");
        assert!(events["units"].as_u64().is_some_and(|g| g > 0), "{row}");
        for k in [
            "scans",
            "slot_locks",
            "full_locks",
            "partial_fits",
            "creation_waits",
            "claims",
            "extra_walk_rounds",
            "looks",
        ] {
            let per = events[k].as_f64();
            assert!(per.is_some_and(|p| (0.0..10.0).contains(&p)), "{k}: {row}");
        }
    }
    // 512 threads at 64 B, 4 rounds: 64 warp-pairs, each of whose mallocs
    // scans and locks a slot at least once. Mixed sizes are per free group.
    // (A free's groups may outnumber the malloc's: a group the slabs' room
    // split frees into two.)
    assert_eq!(rows[1]["events"]["unit"], "free group", "{report}");
    let events = &rows[0]["events"];
    assert_eq!(events["unit"], "warp-pair", "{report}");
    assert_eq!(events["units"], 512 / 32 * 4, "{report}");
    for k in ["scans", "slot_locks"] {
        assert!(
            events[k].as_f64().is_some_and(|p| p >= 1.0),
            "{k}: {report}"
        );
    }
    let (ok, text) = warpalloc(&args);
    assert!(ok && !text.contains("events ("), "{text}");
    let plain: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let report = warpalloc_json(&plain);
    assert!(report["rows"][0]["events"].is_null(), "{report}");
}

/// `bench` on the emulated device gives each warp the simulator runs at
/// once a search stream of its own, as a GPU's heap has one per resident
/// warp: 4 096 threads of 64 B on two workers (128 warps at once) walk no
/// more than a GPU-like launch. With the emulated device's own 32 streams,
/// four warps a stream took each other's freed runs: 0.40 extra walk
/// rounds per warp-pair (2026-12-07, 02:10 UTC).
#[test]
fn bench_gives_each_simulated_warp_a_stream() {
    let report = warpalloc_json(&[
        "--simulator",
        "bench",
        "--json",
        "--events",
        "--cases",
        "alloc-free",
        "--sizes",
        "64",
        "--threads",
        "4096",
        "--workers",
        "2",
    ]);
    let walk = report["rows"][0]["events"]["extra_walk_rounds"].as_f64();
    assert!(walk.is_some_and(|w| w < 0.1), "{report}");
}

/// The GPU check's events step (`run.sh`: `bench --events` with the
/// kernels' events build) becomes a table in its report, a row per bench
/// row with its events per group, and the JSON's `events` rows; a row with
/// no events (a GPU with no events build) says so. Here the rows are the
/// simulator's.
#[test]
fn the_device_report_shows_the_events_counted_on_the_gpu() {
    let out = report_dir("events");
    let md = device_report(&out);
    assert!(
        !md.contains("events on the GPU"),
        "an events section with no events step:\n{md}"
    );
    let args: Vec<&str> = REPORT_BENCH.iter().copied().chain(["--events"]).collect();
    let mut got = warpalloc_json(&args);
    // The second row as a GPU with no events build reports it.
    got["rows"][1]["events"] = serde_json::Value::Null;
    std::fs::write(out.join("events-alloc-free-64.json"), got.to_string()).unwrap();
    std::fs::write(out.join("events-alloc-free-64.err"), "exit 0\n").unwrap();
    let md = device_report(&out);
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("device-check.json")).expect("the JSON"),
    )
    .expect("JSON");
    let _ = std::fs::remove_dir_all(&out);
    let section = md
        .split("## the allocator's events on the GPU")
        .nth(1)
        .unwrap_or_else(|| panic!("no events section:\n{md}"));
    let row = |threads: u32| {
        section
            .lines()
            .find(|l| l.starts_with(&format!("| alloc_free | {threads} | 64 B |")))
            .unwrap_or_else(|| panic!("no row at {threads} threads:\n{section}"))
    };
    let units = got["rows"][0]["events"]["units"].as_u64().expect("units");
    assert!(
        row(256).contains(&format!("| simulator | warp-pair | {units} | ")),
        "{}",
        row(256)
    );
    assert!(row(512).contains("no events"), "{}", row(512));
    let rows = json["events"]["rows"].as_array().expect("events rows");
    assert_eq!(rows.len(), 1, "{}", json["events"]);
    assert_eq!(rows[0]["threads"], 256);
    assert_eq!(rows[0]["units"], units);
}

#[test]
fn bench_runs_the_cases_asked_for() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--cases",
        "footprint",
        "--threads",
        "256",
        "--block",
        "64",
    ]);
    assert!(ok, "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("warpalloc") && !l.starts_with("case"))
        .collect();
    assert_eq!(rows.len(), 3, "one footprint row per size:\n{text}");
    for (row, size) in rows.iter().zip(["16 B", "64 B", "256 B"]) {
        assert!(
            row.starts_with("footprint") && row.contains(size),
            "{row:?}\n{text}"
        );
        // 256 threads × 16 B in a 2 MiB slab: the ratio is printed.
        assert!(row.contains("requested: one block per thread"), "{row:?}");
    }
}

/// `bench --cases warmed` profiles the largest size at the most threads on
/// one heap and runs it on a fresh heap warmed up from that profile: the
/// note says how many slabs the warm-up published; and a row of the same
/// launch twice with a spread between.
#[test]
fn bench_warmed_case_publishes_the_profiles_slabs() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--cases",
        "warmed",
        "--sizes",
        "8192",
        "--threads",
        "1024",
        "--block",
        "64",
    ]);
    assert!(ok, "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("alloc_free warmed up"))
        .unwrap_or_else(|| {
            panic!(
                "no warmed-up row:
{text}"
            )
        });
    let published: u32 = row
        .split("warmed up: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no slab count in {row:?}"));
    // The profiled launch held some of its 1 024 blocks of 8 KiB at once
    // (255 a slab): at least one slab.
    assert!(published >= 1, "{row}");
    // And the spread between two launches on one heap.
    let spread = text
        .lines()
        .find(|l| l.starts_with("alloc_free spread"))
        .unwrap_or_else(|| panic!("no spread row:\n{text}"));
    assert!(
        spread.contains("Heap::spread between the launches"),
        "{spread}"
    );
}

/// `bench --cases rising` runs the largest size at the fewest threads, then
/// at the most, on one heap, and says what each launch took from the host.
#[test]
fn bench_rising_case_runs_two_launches_on_one_heap() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--cases",
        "rising",
        "--sizes",
        "64,8192",
        "--threads",
        "2048,128",
        "--block",
        "64",
    ]);
    assert!(ok, "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("rising"))
        .unwrap_or_else(|| panic!("no rising row:\n{text}"));
    assert!(row.contains("2048") && row.contains("8.0 KiB"), "{row}");
    // "128 threads (slabs from the host: N), then 2048 (slabs from the
    // host: M)": the first launch of a fresh heap took at least one slab.
    let note = row
        .split("  ")
        .find(|part| part.contains("threads ("))
        .unwrap_or_else(|| panic!("no launches in the note: {row}"));
    let first: u64 = note
        .split("host: ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no slab count in {note:?}"));
    assert!(
        note.starts_with("128 threads") && note.contains("then 2048 ("),
        "{note}"
    );
    assert!(first >= 1, "{note}");
}

/// What the help says is what the parser takes: byte counts with units,
/// lists separated by spaces as well as commas; a bad unit is an error that
/// lists the units.
#[test]
fn units_and_space_separated_lists_are_accepted() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "size_sweep",
        "resize",
        "--limit",
        "16MiB",
        "--blocks",
        "4",
    ]);
    assert!(ok && text.contains("stress: OK"), "{text}");
    assert!(
        text.contains("size_sweep") && text.contains("resize"),
        "{text}"
    );
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--sizes",
        "16",
        "32",
        "--cases",
        "alloc-free",
        "--threads",
        "64",
        "--block",
        "32",
    ]);
    assert!(ok, "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("alloc_free"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0].contains("16 B") && rows[1].contains("32 B"),
        "{text}"
    );
    let (ok, text) = warpalloc(&["--simulator", "stress", "--limit", "64XB"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("unknown unit") && text.contains("MiB"),
        "{text}"
    );
}

/// Launch shapes the kernels cannot index are refused before anything
/// runs, each with what was wrong: more than 16 Mi threads (blocks ×
/// threads wrapped a `u32` to a grid of one block, whose `fill` buffers the
/// kernel then wrote past), no threads (`size_sweep` divided by them), a
/// block past CUDA's 1 024.
#[test]
fn launch_shapes_past_the_kernels_limits_are_refused() {
    for (args, said) in [
        (
            &["--blocks", "4194304", "--threads", "1024"][..],
            "more than 16777216 threads",
        ),
        (&["--blocks", "16385", "--threads", "1024"], "more than"),
        (&["--kernels", "size_sweep", "--threads", "0"], "--threads"),
        (&["--threads", "2048"], "--threads"),
        (&["--blocks", "0"], "--blocks"),
        (&["--iterations", "2147483648"], "--iterations"),
        (&["--iterations", "0"], "--iterations"),
        (
            &["--kernels", "churn", "--plant-corruption", "4"],
            "--plant-corruption",
        ),
    ] {
        let mut all = vec!["--simulator", "stress"];
        all.extend_from_slice(args);
        let (ok, text) = warpalloc(&all);
        assert!(!ok, "{args:?}: {text}");
        assert!(text.contains(said), "{args:?}: {said:?} not in {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
    }
    let (ok, text) = warpalloc(&["--simulator", "bench", "--threads", "16777217"]);
    assert!(!ok && text.contains("--threads"), "{text}");
}

/// `bench --plot FILE.svg` draws the alloc/free rows: an SVG with a line
/// per size, warm and cold, and the axes named; asked with no alloc/free
/// row to draw, it says so and fails.
#[test]
fn bench_plots_pairs_per_second_against_threads() {
    let dir = std::env::temp_dir().join(format!("warpalloc-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let svg = dir.join("bench.svg");
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--cases",
        "alloc-free",
        "--sizes",
        "16,1024",
        "--threads",
        "64,256",
        "--block",
        "32",
        "--plot",
        svg.to_str().expect("a UTF-8 path"),
    ]);
    assert!(ok, "{text}");
    let drawn = std::fs::read_to_string(&svg).expect("the plot");
    assert!(drawn.starts_with("<svg"), "{drawn}");
    for said in [
        "16 B warm",
        "16 B cold",
        "1024 B warm",
        "threads",
        "malloc+free pairs per second",
    ] {
        assert!(drawn.contains(said), "{said} not in the plot");
    }
    let (ok, text) = warpalloc(&[
        "--simulator",
        "bench",
        "--cases",
        "footprint",
        "--threads",
        "64",
        "--block",
        "32",
        "--plot",
        dir.join("none.svg").to_str().expect("a UTF-8 path"),
    ]);
    assert!(!ok && text.contains("no alloc/free rows to draw"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every column a report prints that is not self-evident is explained in
/// its command's `--help`, by the name the header prints.
#[test]
fn the_help_explains_the_columns_the_reports_print() {
    let cases: [(&[&str], &[&str], &str); 2] = [
        (
            &[
                "--simulator",
                "stress",
                "--kernels",
                "fill",
                "--blocks",
                "2",
                "--threads",
                "64",
                "--iterations",
                "2",
                "--workers",
                "1",
            ],
            &[
                "allocs",
                "nulls",
                "corrupt",
                "broken",
                "traffic",
                "peak live",
                "peak mapped",
                "÷",
                "allocs/s",
            ],
            "kernel ",
        ),
        (
            &[
                "--simulator",
                "bench",
                "--sizes",
                "64",
                "--threads",
                "256",
                "--cases",
                "alloc-free",
                "--workers",
                "1",
            ],
            &[
                "cold pairs",
                "warm pairs",
                "nulls",
                "peak map",
                "map/req",
                "sim steps/rmw/sys",
            ],
            "case ",
        ),
    ];
    for (args, columns, header_start) in cases {
        let (ok, text) = warpalloc(args);
        assert!(ok, "{text}");
        let header = text
            .lines()
            .find(|l| l.starts_with(header_start))
            .unwrap_or_else(|| panic!("no header line in:\n{text}"));
        let command = args[1];
        let (ok, help) = warpalloc(&[command, "--help"]);
        assert!(ok, "{help}");
        for column in columns {
            assert!(
                header.contains(column),
                "`{command}` prints no column {column:?}: {header}"
            );
            assert!(
                help.contains(&format!("`{column}`")),
                "`{command} --help` does not explain the column {column:?}:\n{help}"
            );
        }
    }
}

/// The GPU check's report says whether the first project (a user's
/// program through cudarc, run by `run.sh` on the GPU) passed: its exit
/// status and its last lines, and nothing when it did not run; and what
/// `info --link-check` found.
#[test]
fn the_device_report_says_whether_the_first_project_ran_on_the_gpu() {
    let out = report_dir("first-project");
    let md = device_report(&out);
    assert!(!md.contains("first project"), "{md}");
    let lines = |tail: &str, exit: i32| {
        let text: String = (0..20).map(|i| format!("line {i}\n")).collect();
        std::fs::write(
            out.join("first-project.txt"),
            format!("{text}{tail}\nexit {exit}\n"),
        )
        .unwrap();
        device_report(&out)
    };
    std::fs::write(
        out.join("info.txt"),
        "GPU: NVIDIA H200\ncudarc link check: ok: a module of the heap's context linked\n",
    )
    .unwrap();
    let md = lines("first project: every check passed", 0);
    assert!(
        md.contains(
            "cudarc link check (`info --link-check`): ok: a module of the heap's context linked"
        ),
        "{md}"
    );
    assert!(
        md.contains("## first project (a user's program through cudarc): OK"),
        "{md}"
    );
    assert!(
        md.contains("every check passed") && !md.contains("line 8\n"),
        "{md}"
    );
    let md = lines("Error: WrongDevice", 1);
    assert!(
        md.contains("cudarc): FAILED") && md.contains("exit 1"),
        "{md}"
    );
    let json = std::fs::read_to_string(out.join("device-check.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["first_project"]["exit"], 1, "{json}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The GPU check's report gives issue 20's drift verdict: each kernel's
/// allocs/s at 300 rounds ÷ at 10 against 0.8, its nulls and the run's
/// refusals (the first GPU run's own figures fail it: it printed "300
/// rounds: OK" for them before), a 300-round run that timed out fails with
/// why, and a drift step that did not run says so; a stress run with no
/// rows says why.
#[test]
fn the_device_report_gives_the_drift_verdict() {
    let out = report_dir("drift");
    let md = device_report(&out);
    assert!(md.contains("## drift: not run"), "{md}");
    let kernel = |name: &str, ops: f64, nulls: u64| {
        serde_json::json!({
            "kernel": name, "threads": 135168, "allocs": 1000, "nulls": nulls, "corrupt": 0,
            "ops_per_second": ops, "problems": [], "peak_live_bytes": 1 << 20,
            "peak_mapped_bytes": 2 << 20,
        })
    };
    let run = |kernels: Vec<serde_json::Value>, refusals: u64| {
        serde_json::json!({ "ok": true, "kernels": kernels, "refusals": refusals }).to_string()
    };
    let write = |name: &str, text: &str| std::fs::write(out.join(name), text).unwrap();
    write(
        "drift-10.json",
        &run(
            vec![kernel("lifetimes", 98e6, 0), kernel("churn", 50e6, 0)],
            0,
        ),
    );
    write("drift-10.err", "exit 0\n");
    // The first GPU run: lifetimes 32× slower, churn's nulls and refusals.
    write(
        "drift-300.json",
        &run(
            vec![
                kernel("lifetimes", 3.05e6, 0),
                kernel("churn", 45e6, 148_080),
            ],
            148_080,
        ),
    );
    write("drift-300.err", "exit 0\n");
    let md = device_report(&out);
    for said in [
        "## drift: FAIL",
        "- lifetimes: FAIL — 0.03× its 10-round allocs/s (target ≥ 0.8)",
        "- churn: FAIL — 148080 nulls; 148080 refusals in the run",
    ] {
        assert!(md.contains(said), "{said:?} not in\n{md}");
    }
    // What the issue asks for.
    write(
        "drift-300.json",
        &run(
            vec![kernel("lifetimes", 90e6, 0), kernel("churn", 41e6, 0)],
            0,
        ),
    );
    let md = device_report(&out);
    assert!(md.contains("## drift: PASS"), "{md}");
    assert!(md.contains("- churn: PASS\n"), "{md}");
    let json = std::fs::read_to_string(out.join("device-check.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["drift_verdicts"]["lifetimes"]["pass"], true, "{json}");
    // A kernel the 300-round run lacks (it passed before: only the
    // 300-round run's kernels were judged).
    write("drift-300.json", &run(vec![kernel("churn", 41e6, 0)], 0));
    let md = device_report(&out);
    for said in ["## drift: FAIL", "- lifetimes: FAIL — no 300-round figure"] {
        assert!(md.contains(said), "{said:?} not in\n{md}");
    }
    // Cut by its limit: no rows, and why.
    write("drift-300.json", "");
    write("drift-300.err", "exit 124\n");
    write(
        "stress-rpc.err",
        "skipped: run.sh's time budget (465 s) is spent\nexit 254\n",
    );
    let md = device_report(&out);
    assert!(
        md.contains("## drift: FAIL") && md.contains("the 300-round run gave no rows (timed out)"),
        "{md}"
    );
    assert!(
        md.contains("No rows: skipped: run.sh's time budget was spent."),
        "{md}"
    );
    // A bench case whose launch failed: its error, not a rate of 0.
    let row = serde_json::json!({
        "case": "alloc_free", "mode": "rpc", "threads": 10240, "min_bytes": 64,
        "max_bytes": 64, "cold_pairs_per_second": 0.0, "warm_pairs_per_second": 0.0,
        "error": "launch: CUDA_ERROR_ILLEGAL_ADDRESS",
    });
    write(
        "bench-alloc-free-64.json",
        &serde_json::json!({ "rows": [row] }).to_string(),
    );
    write("bench-alloc-free-64.err", "exit 1\n");
    let md = device_report(&out);
    assert!(
        md.contains("| FAILED: launch: CUDA_ERROR_ILLEGAL_ADDRESS | - |")
            && !md.contains("| 0 /s |"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Runs the GPU check's report (`scripts/device-check/report.py`) on the
/// outputs in `out`; its markdown (`device-check.md`, beside
/// `device-check.json`).
fn device_report(out: &std::path::Path) -> String {
    let got = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/device-check/report.py"
        ))
        .arg(out)
        .output()
        .expect("python3 runs the report (the GPU machine has it; so does this one)");
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    std::fs::read_to_string(out.join("device-check.md")).expect("the report")
}

/// The GPU check's report (`scripts/device-check/report.py`, run on the GPU
/// machine by `run.sh`) draws pairs per second against threads, warpalloc
/// beside CUDA malloc and Gallatin, from the tool's own `bench --json`
/// rows and the peers' JSON lines. Here the rows are the simulator's and
/// the peers' lines made up: the picture's series, legend and link are
/// what is checked, not the figures.
#[test]
fn the_device_report_draws_warpalloc_beside_its_peers() {
    let out = report_dir("report");
    let (ok, json) = {
        let got = Command::new(env!("CARGO_BIN_EXE_warpalloc"))
            .args(REPORT_BENCH)
            .output()
            .expect("run the warpalloc binary");
        (
            got.status.success(),
            String::from_utf8_lossy(&got.stdout).into_owned(),
        )
    };
    assert!(ok, "{json}");
    std::fs::write(out.join("bench-alloc-free.json"), json).unwrap();
    std::fs::write(out.join("bench-alloc-free.err"), "exit 0\n").unwrap();
    let peer = |name: &str, scale: f64| {
        let rows: String = [256u32, 512]
            .iter()
            .map(|&threads| {
                format!(
                    "{{\"impl\":\"{name}\",\"case\":\"alloc_free\",\"threads\":{threads},\"size\":64,\
                     \"pairs\":{},\"nulls\":0,\"pairs_per_second\":{}}}\n",
                    threads * 4,
                    scale * f64::from(threads)
                )
            })
            .collect();
        rows
    };
    std::fs::write(out.join("baseline.jsonl"), peer("cuda", 1e3)).unwrap();
    std::fs::write(out.join("gallatin.jsonl"), peer("gallatin", 1e5)).unwrap();
    let md = device_report(&out);
    let svg = std::fs::read_to_string(out.join("alloc-free.svg")).expect("the picture");
    let _ = std::fs::remove_dir_all(&out);
    for who in ["warpalloc", "CUDA malloc", "Gallatin"] {
        assert!(
            svg.contains(&format!(">64 B {who}</text>")),
            "no {who} series in the legend:\n{svg}"
        );
    }
    // One line per series, each through its two thread counts.
    assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
    assert!(
        md.contains("](alloc-free.svg)"),
        "the report does not show the picture:\n{md}"
    );
}

/// Each bench row says what timed it (`timed_by`): the host's clock in the
/// simulator, two CUDA events around the kernel on a GPU (as the peers'
/// drivers time theirs). The GPU check's report says whether warpalloc's
/// rows and the peers' were timed alike: here the simulator's rows as they
/// are, then the same rows marked as timed by CUDA events.
#[test]
fn the_device_report_says_which_clock_timed_the_rows() {
    let out = report_dir("clock");
    let mut mine = warpalloc_json(REPORT_BENCH);
    let rows = mine["rows"].as_array().expect("bench rows");
    assert!(!rows.is_empty(), "no rows");
    for row in rows {
        assert_eq!(row["timed_by"], "host clock", "{row}");
    }
    let peers = "{\"impl\":\"cuda\",\"case\":\"alloc_free\",\"threads\":256,\"size\":64,\
                 \"pairs\":1024,\"nulls\":0,\"pairs_per_second\":1000000}\n";
    std::fs::write(out.join("baseline.jsonl"), peers).unwrap();
    let report = |bench: &serde_json::Value| {
        std::fs::write(out.join("bench-alloc-free-64.json"), bench.to_string()).unwrap();
        std::fs::write(out.join("bench-alloc-free-64.err"), "exit 0\n").unwrap();
        device_report(&out)
    };
    let md = report(&mine);
    assert!(
        md.contains("Not like for like in time: warpalloc's rows timed by host clock"),
        "{md}"
    );
    for row in mine["rows"].as_array_mut().expect("bench rows") {
        row["timed_by"] = serde_json::json!("cuda events");
    }
    let md = report(&mine);
    let _ = std::fs::remove_dir_all(&out);
    assert!(md.contains("Like for like in time"), "{md}");
    assert!(!md.contains("Not like for like in time"), "{md}");
}

/// With a candidate build staged (`cargo xtask device-check --candidate
/// REV`), the GPU check's report sets each of its bench rows beside this
/// build's same case (case, mode, threads, sizes): both rates and their
/// ratio, in the markdown and the JSON. Here the candidate's rows are this
/// build's simulator rows with their warm rate doubled at 256 threads and
/// halved at 512, and one row this build lacks (1 024 threads: no ratio);
/// without a candidate there is no such section.
#[test]
fn the_device_report_sets_a_candidate_build_beside_this_one() {
    let out = report_dir("candidate");
    let mine = warpalloc_json(REPORT_BENCH);
    let mut theirs = mine.clone();
    let rows = theirs["rows"].as_array_mut().expect("bench rows");
    assert_eq!(rows.len(), 2, "{mine}");
    let mut lone = rows[1].clone();
    lone["threads"] = serde_json::json!(1024);
    rows.push(lone);
    for row in rows.iter_mut() {
        let warm = row["warm_pairs_per_second"].as_f64().expect("a warm rate");
        let factor = if row["threads"] == 256 { 2.0 } else { 0.5 };
        row["warm_pairs_per_second"] = serde_json::json!(factor * warm);
    }
    std::fs::write(out.join("bench-alloc-free-64.json"), mine.to_string()).unwrap();
    std::fs::write(out.join("bench-alloc-free-64.err"), "exit 0\n").unwrap();
    let report = |out: &std::path::Path| {
        let md = device_report(out);
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("device-check.json")).expect("the JSON"),
        )
        .expect("JSON");
        (md, json)
    };
    let (md, json) = report(&out);
    assert!(
        !md.contains("## candidate"),
        "a candidate section with none staged:\n{md}"
    );
    assert!(json["candidate"].is_null(), "{}", json["candidate"]);
    std::fs::write(
        out.join("candidate-bench-alloc-free-64.json"),
        theirs.to_string(),
    )
    .unwrap();
    std::fs::write(out.join("candidate-bench-alloc-free-64.err"), "exit 0\n").unwrap();
    std::fs::write(
        out.join("candidate-revision.txt"),
        "rows-early-look (0123abc)\n",
    )
    .unwrap();
    let (md, json) = report(&out);
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        md.contains("## candidate rows-early-look (0123abc) beside this build"),
        "{md}"
    );
    // The candidate table's rows (the first table has alloc_free rows too).
    let section = md
        .split("## candidate")
        .nth(1)
        .expect("the candidate section");
    let row = |threads: u32| {
        section
            .lines()
            .find(|l| {
                l.starts_with("| alloc_free |") && l.contains(&format!("| {threads} | 64 B |"))
            })
            .unwrap_or_else(|| panic!("no alloc_free row at {threads} threads:\n{section}"))
    };
    assert!(row(256).ends_with("| 2.00× |"), "{}", row(256));
    assert!(row(512).ends_with("| 0.50× |"), "{}", row(512));
    assert!(
        row(1024).ends_with("| — |"),
        "a ratio with no row of this build: {}",
        row(1024)
    );
    let pairs = json["candidate"]["pairs"]
        .as_array()
        .expect("candidate pairs");
    assert_eq!(pairs.len(), 3, "{pairs:?}");
    let ratios: Vec<Option<f64>> = pairs
        .iter()
        .map(|p| p["candidate_per_this"].as_f64())
        .collect();
    assert_eq!(ratios.len(), 3);
    for (want, got) in [Some(2.0), Some(0.5), None].iter().zip(&ratios) {
        match (want, got) {
            (Some(w), Some(g)) => assert!((w - g).abs() < 1e-9, "{ratios:?}"),
            (None, None) => {}
            _ => panic!("candidate ÷ this build: {ratios:?}"),
        }
    }
    assert!(
        json["candidate"]["missing"]
            .as_array()
            .is_some_and(|m| m.is_empty())
    );
}

/// The GPU check runs compute-sanitizer on the stress kernels (synccheck in
/// RPC mode, memcheck in pool mode): its report gives each run's error
/// count, exit, the stress verdict and the heap traffic that shows
/// warpalloc served the kernels. Here the sanitizer logs are made up and
/// the stress report is the simulator's.
#[test]
fn the_device_report_shows_the_sanitized_stress_runs() {
    let out = report_dir("sanitized");
    let stress = warpalloc_json(&[
        "--simulator",
        "stress",
        "--kernels",
        "churn",
        "--blocks",
        "1",
        "--threads",
        "32",
        "--iterations",
        "2",
        "--json",
    ]);
    let traffic = stress["kernels"][0]["heap_traffic"]
        .as_u64()
        .expect("heap traffic");
    assert!(traffic > 0, "{stress}");
    std::fs::write(out.join("synccheck-stress.json"), stress.to_string()).unwrap();
    std::fs::write(
        out.join("synccheck-stress.log"),
        "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\nexit 0\n",
    )
    .unwrap();
    std::fs::write(
        out.join("memcheck-stress-pool.log"),
        "========= ERROR SUMMARY: 3 errors\nexit 1\n",
    )
    .unwrap();
    let md = device_report(&out);
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        md.contains("## compute-sanitizer on the stress kernels"),
        "{md}"
    );
    assert!(
        md.contains(&format!(
            "| synccheck-stress | 0 | exit 0 | OK | 1 | {traffic} |"
        )),
        "{md}"
    );
    assert!(
        md.contains("| memcheck-stress-pool | 3 | exit 1 | no report | 0 | 0 |"),
        "{md}"
    );
}

/// A stress run on a pool too small for its kernels says, per kernel,
/// which classes ran dry and by how many slabs (nulls are answers there,
/// not failures).
#[test]
fn stress_on_a_dry_pool_names_the_classes_short() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "fill",
        "--pool-slabs",
        "2",
        "--blocks",
        "4",
        "--threads",
        "128",
        "--workers",
        "1",
    ]);
    assert!(ok, "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("fill: the pool ran dry: class "))
        .unwrap_or_else(|| panic!("no dry-pool line:\n{text}"));
    assert!(
        line.contains("more slab") && line.contains("nulls") && line.contains("--pool-slabs"),
        "{line}"
    );
}

/// `warpalloc stress --limit` prints, for a kernel that ran out, the heap's
/// snapshot at its first out-of-memory null (each kernel a phase): its
/// classes' nulls and the limit the host refused; with `--spill` the same
/// run gets no null and says how much went to host memory.
#[test]
fn stress_under_a_limit_prints_the_snapshot_and_spill_serves_it() {
    let args = [
        "--simulator",
        "stress",
        "--kernels",
        "fill",
        "--limit",
        "8MiB",
        "--blocks",
        "4",
        "--threads",
        "128",
        "--workers",
        "1",
    ];
    let (ok, text) = warpalloc(&args);
    assert!(ok, "{text}");
    let at = text
        .find("fill: the heap at its first out-of-memory null:")
        .unwrap_or_else(|| panic!("no snapshot:\n{text}"));
    let snapshot = &text[at..];
    for said in [
        "phase \"fill\", at its first out-of-memory null",
        " nulls\n",
        "the host refused a slab or a large block (2.0 MiB): the heap's limit (8.0 MiB) was reached",
    ] {
        assert!(snapshot.contains(said), "{said:?} not in:\n{snapshot}");
    }
    let spill: Vec<&str> = args.iter().copied().chain(["--spill", "--json"]).collect();
    let report = warpalloc_json(&spill);
    let fill = &report["kernels"][0];
    assert_eq!(fill["kernel"], "fill");
    assert_eq!(fill["nulls"], 0, "{fill}");
    assert!(fill["out_of_memory"].is_null(), "{fill}");
    assert!(fill["peak_spilled_bytes"].as_u64() > Some(0), "{fill}");
    assert_eq!(report["args"]["spill"], true);
}

/// `warpalloc bench --cases spill` runs the same fill under an 8 MiB limit
/// with and without spill: the spilled row has no null and says what it
/// spilled; the other has nulls and its out-of-memory snapshot.
#[test]
fn bench_spill_case_pairs_a_spilled_run_with_one_that_got_nulls() {
    let report = warpalloc_json(&[
        "--simulator",
        "bench",
        "--cases",
        "spill",
        "--threads",
        "2048",
        "--json",
    ]);
    let rows = report["rows"].as_array().expect("rows");
    let row = |case: &str| {
        rows.iter()
            .find(|r| r["case"] == case)
            .unwrap_or_else(|| panic!("no {case} row in {report}"))
    };
    let (off, on) = (row("spill off"), row("spill"));
    assert!(off["nulls"].as_u64() > Some(0), "{off}");
    assert!(
        off["snapshot"]
            .as_str()
            .is_some_and(|s| s.contains("the heap's limit (8.0 MiB)")),
        "{off}"
    );
    assert_eq!(on["nulls"], 0, "{on}");
    assert!(on["snapshot"].is_null(), "{on}");
    assert!(
        on["note"]
            .as_str()
            .is_some_and(|n| n.contains("spilled to host memory") && !n.contains(" 0 B spilled")),
        "{on}"
    );
}

/// `warpalloc stress --pool-slabs 2 --pool-fallback`: the pool runs dry and
/// asks the host, so `fill` gets no null and no dry-pool line, and after
/// `trim` only the pool's own two slabs stay mapped; `--pool-fallback`
/// without `--pool-slabs` is refused by the argument parser.
#[test]
fn stress_on_a_pool_with_fallback_gets_no_null() {
    let args = [
        "--simulator",
        "stress",
        "--kernels",
        "fill",
        "--pool-slabs",
        "2",
        "--pool-fallback",
        "--blocks",
        "4",
        "--threads",
        "128",
        "--workers",
        "1",
        "--json",
    ];
    let report = warpalloc_json(&args);
    let fill = &report["kernels"][0];
    assert_eq!(fill["nulls"], 0, "{fill}");
    assert_eq!(fill["pool_shortfall"].as_array().map(Vec::len), Some(0));
    assert!(report["rpc_allocs"].as_u64() > Some(0), "{report}");
    assert_eq!(report["mapped_after_trim"], 2 * 2 * 1024 * 1024);
    let (ok, text) = warpalloc(&["--simulator", "stress", "--pool-fallback"]);
    assert!(!ok && text.contains("--pool-slabs"), "{text}");
}

#[test]
fn stress_bad_input_counts_exactly_what_it_made_and_the_record_names_the_kernel() {
    // One warp, whatever the grid asked for (`run_bad_input`): each lane
    // frees two pointers into its block's middle, reallocs one, frees its block
    // twice, and frees a pointer the heap never handed out. The run passes
    // only if the heap counted exactly those and its error record names a
    // lane of `bad_input`.
    let args = [
        "--simulator",
        "stress",
        "--kernels",
        "bad_input",
        "--blocks",
        "2",
        "--threads",
        "64",
        "--json",
    ];
    let report = warpalloc_json(&args);
    let bad = &report["kernels"][0];
    assert_eq!(bad["kernel"], "bad_input", "{bad}");
    assert_eq!(bad["threads"], 32, "{bad}");
    assert_eq!(
        (bad["double_frees"].as_u64(), bad["invalid_frees"].as_u64()),
        (Some(32), Some(4 * 32)),
        "{bad}"
    );
    assert_eq!(bad["problems"].as_array().map(Vec::len), Some(0), "{bad}");
}

/// A stress run whose every kernel was skipped stressed nothing: it fails,
/// saying so (it said "OK" and exited 0).
#[test]
fn stress_with_every_kernel_skipped_fails() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "collections",
        "--limit",
        "64MiB",
    ]);
    assert!(!ok && text.contains("no kernel ran"), "{text}");
}

/// A planted corruption that the run did not find fails it, saying why:
/// one block in N is planted at random, so a large N may plant none.
#[test]
fn a_planted_corruption_never_found_fails_the_run() {
    let (ok, text) = warpalloc(&[
        "--simulator",
        "stress",
        "--kernels",
        "lifetimes",
        "--blocks",
        "1",
        "--threads",
        "32",
        "--plant-corruption",
        "4000000000",
    ]);
    assert!(!ok && text.contains("no corrupt block found"), "{text}");
}

/// Arguments that can only give an empty or wrong report are refused
/// before anything runs: no rounds, a size of 0, no simulator worker, a
/// demo past its 32-bit tickets.
#[test]
fn arguments_that_measure_nothing_are_refused() {
    for args in [
        &["--simulator", "bench", "--rounds", "0"][..],
        &["--simulator", "bench", "--sizes", "0"],
        &["--simulator", "demo", "--workers", "0"],
    ] {
        let (ok, text) = warpalloc(args);
        assert!(!ok && text.contains("invalid value"), "{args:?}: {text}");
    }
    let (ok, text) = warpalloc(&[
        "--simulator",
        "demo",
        "--blocks",
        "4194304",
        "--threads",
        "1024",
    ]);
    assert!(!ok && text.contains("32-bit tickets"), "{text}");
}

/// The mixed row's note counts the kernel's own atomics as the kernel makes
/// them: four a thread, once (`mixed_pairs`), so 1.0 a pair at 4 rounds.
#[test]
fn the_mixed_rows_note_counts_the_kernels_own_atomics() {
    let report = warpalloc_json(&[
        "--simulator",
        "bench",
        "--json",
        "--cases",
        "mixed",
        "--threads",
        "256",
        "--workers",
        "1",
    ]);
    let rows = report["rows"].as_array().expect("rows");
    let note = rows
        .iter()
        .find(|r| r["case"].as_str().is_some_and(|c| c.starts_with("mixed")))
        .and_then(|r| r["note"].as_str())
        .unwrap_or_else(|| panic!("no mixed row: {report}"));
    assert!(note.contains("counters: 1.0/pair"), "{note}");
}

/// The GPU check's script parses: a syntax error there would end the
/// scarce GPU run at once, and no other test runs it.
#[test]
fn the_gpu_check_script_parses() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/device-check/run.sh");
    let out = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
