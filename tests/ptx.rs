//! PTX checks of the embedded `kernels-tests` module (`warpalloc_tool::ptx`):
//! ptxas assembles it for sm_75 and sm_90 (and the sm_80 module for sm_80
//! and sm_90), the collectives come out as the expected instructions, no
//! function spills registers, and the allocator's kernels stay within their
//! register budgets; and the device crate built with `c-abi` exports C's
//! allocation functions, which a kernel calling them by name assembles with.
//!
//! Needs `ptxas` (`cargo xtask setup` installs it); without it the test fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;

use warpalloc_builder::ptxas::{Ptxas, PtxasReport};
use warpalloc_builder::{Arch, functions, reachable, symbols};
use warpalloc_tool::ptx;

/// Kernels whose code (with what it calls) must contain these instructions.
/// A kernel not in the module is not checked; one in the module and not here
/// has no instruction expectation (it is still assembled and spill-checked).
const EXPECTED: &[(&str, &[&str])] = &[
    ("simt_ballot", &["vote.sync.ballot", "activemask"]),
    ("simt_match_any", &["match.any.sync"]),
    ("simt_shfl", &["shfl.sync.idx"]),
    ("simt_sleep", &["nanosleep"]),
    ("simt_syncwarp", &["bar.warp.sync"]),
    // The mailbox's orderings are the host's too: `.sys`, which neither
    // loom nor the simulator can tell from `.gpu` (a review, 2026-12-07).
    // The client's release before its flip and the server's answer read
    // by an acquire: on a ping, a malloc's request for a slab and a large
    // free's request.
    ("rpc_ping", &["fence.acq_rel.sys", "ld.acquire.sys"]),
    ("malloc_only", &["fence.acq_rel.sys", "ld.acquire.sys"]),
    ("free_only", &["fence.acq_rel.sys"]),
];

fn ptx_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.ptx"));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// ptxas's report for `arch`, assembled once per test binary (the tests
/// that read it run in parallel).
fn assemble(arch: Arch) -> &'static PtxasReport {
    static SM75: OnceLock<PtxasReport> = OnceLock::new();
    static SM90: OnceLock<PtxasReport> = OnceLock::new();
    let cell = match arch {
        Arch::Sm75 => &SM75,
        Arch::Sm90 => &SM90,
        other => panic!("no report kept for {other}"),
    };
    cell.get_or_init(|| {
        let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
        let file = ptx_file(&format!("kernels_tests_{arch}"), ptx::KERNELS_TESTS);
        ptxas
            .assemble(&file, arch)
            .unwrap_or_else(|e| panic!("ptxas rejected the embedded PTX for {arch}: {e}"))
    })
}

/// ptxas's report for the sm_80 module ([`ptx::KERNELS_TESTS_SM80`])
/// assembled for `arch`, once per test binary.
fn assemble_sm80_module(arch: Arch) -> &'static PtxasReport {
    static SM80: OnceLock<PtxasReport> = OnceLock::new();
    static SM90: OnceLock<PtxasReport> = OnceLock::new();
    let cell = match arch {
        Arch::Sm80 => &SM80,
        Arch::Sm90 => &SM90,
        other => panic!("no report kept for {other}"),
    };
    cell.get_or_init(|| {
        let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
        let file = ptx_file(
            &format!("kernels_tests_sm80_{arch}"),
            ptx::KERNELS_TESTS_SM80,
        );
        ptxas
            .assemble(&file, arch)
            .unwrap_or_else(|e| panic!("ptxas rejected the sm_80 PTX for {arch}: {e}"))
    })
}

/// The reports of every assembly the checks cover: the sm_75 module for
/// sm_75 and sm_90, and the sm_80 module for sm_80 and sm_90.
fn reports() -> [(&'static str, &'static PtxasReport); 4] {
    [
        ("sm_75", assemble(Arch::Sm75)),
        ("sm_90", assemble(Arch::Sm90)),
        ("sm_80 module, sm_80", assemble_sm80_module(Arch::Sm80)),
        ("sm_80 module, sm_90", assemble_sm80_module(Arch::Sm90)),
    ]
}

#[test]
fn kernel_names_match_the_ptx() {
    let found = symbols(ptx::KERNELS_TESTS);
    assert_eq!(found.kernels, ptx::KERNEL_NAMES);
    assert_eq!(found.globals, ptx::GLOBAL_NAMES);
    assert!(
        !ptx::KERNEL_NAMES.is_empty(),
        "kernels-tests built to a PTX module without kernels"
    );
    assert!(ptx::KERNELS_TESTS.contains(&format!(".target {}", ptx::ARCH)));
}

/// Functions of the allocator (by a piece of their mangled names) and the
/// `bar.warp.sync`s their bodies hold at least, one per `simt::syncwarp`
/// that orders memory among a group's lanes there. The simulator runs a
/// warp's lanes on one thread, so every collective orders its memory, and
/// neither it nor loom can tell one of these gone; on a GPU only
/// `bar.warp.sync` orders memory among lanes (a review, 2026-12-08).
const SYNCWARPS: &[(&str, usize)] = &[
    // Its start (the slab's words, zeroed by its creator, before each
    // lane's walk) and its end (the lanes after their head's acquire).
    ("4Slab8allocate", 2),
    // The lanes' last accesses to their blocks before their heads' clears
    // (`Slab::clear_at_head`), and the clears before the leader's release
    // of the slot (heap/mod.rs).
    ("10DeviceHeap10deallocate", 2),
    // `Slab::init`: the slab's last use before the lanes' stores, and
    // their stores before the leader publishes it.
    ("10DeviceHeap6create", 2),
];

#[test]
fn the_syncwarps_that_order_memory_are_in_the_ptx() {
    for module in [ptx::KERNELS_TESTS, ptx::KERNELS_TESTS_SM80] {
        let fns = functions(module);
        for (name, least) in SYNCWARPS {
            let found: Vec<_> = fns.iter().filter(|f| f.name.contains(name)).collect();
            assert_eq!(found.len(), 1, "one function named like {name}");
            let n = found[0].body.matches("bar.warp.sync").count();
            assert!(
                n >= *least,
                "{name}: {n} bar.warp.sync, at least {least} expected (a syncwarp that \
                 orders memory among lanes gone?)"
            );
        }
    }
}

#[test]
fn expected_instructions() {
    let fns = functions(ptx::KERNELS_TESTS);
    let mut checked = 0;
    let mut failures = String::new();
    for (kernel, instructions) in EXPECTED {
        // A kernel renamed or gone would drop its checks silently.
        if !ptx::KERNEL_NAMES.contains(kernel) {
            let _ = writeln!(failures, "{kernel}: no such kernel in the module");
            continue;
        }
        let code: String = reachable(&fns, kernel)
            .iter()
            .map(|f| f.body.as_str())
            .collect();
        for ins in *instructions {
            checked += 1;
            if code.contains(ins) {
                eprintln!("{kernel}: {ins} ok");
            } else {
                let _ = writeln!(failures, "{kernel}: no `{ins}` in its code or callees");
            }
        }
    }
    eprintln!(
        "{checked} instruction expectations checked over kernels {:?}",
        ptx::KERNEL_NAMES
    );
    assert!(failures.is_empty(), "{failures}");
}

/// The sm_80 module has the sm_75 module's kernels and globals, is what the
/// tool loads on compute capability 8.0 and later, and uses `redux.sync`
/// where the sm_75 module combines a free's bits by shuffles.
#[test]
fn the_sm80_module_matches_and_uses_what_sm80_added() {
    let sm80 = symbols(ptx::KERNELS_TESTS_SM80);
    assert_eq!(sm80.kernels, ptx::KERNEL_NAMES);
    assert_eq!(sm80.globals, ptx::GLOBAL_NAMES);
    assert!(ptx::KERNELS_TESTS_SM80.contains(".target sm_80"));
    for (cc, module) in [
        ((0, 0), ptx::KERNELS_TESTS),
        ((7, 5), ptx::KERNELS_TESTS),
        ((8, 0), ptx::KERNELS_TESTS_SM80),
        ((8, 9), ptx::KERNELS_TESTS_SM80),
        ((9, 0), ptx::KERNELS_TESTS_SM80),
        ((10, 0), ptx::KERNELS_TESTS_SM80),
    ] {
        assert!(ptx::for_capability(cc) == module, "{cc:?}");
    }
    let code = |text: &str| -> String {
        let fns = functions(text);
        reachable(&fns, "free_only")
            .iter()
            .map(|f| f.body.as_str())
            .collect()
    };
    assert!(code(ptx::KERNELS_TESTS_SM80).contains("redux.sync.or"));
    assert!(!code(ptx::KERNELS_TESTS).contains("redux.sync"));
}

/// The events build ([`ptx::KERNELS_TESTS_SM80_EVENTS`], for `bench
/// --events` on a GPU) has the sm_80 module's kernels and one more global,
/// `WARPALLOC_EVENTS`, of `EVENT_ROWS` rows of `EVENTS` counters; the
/// allocator's code counts into it with a reduction (no path waits for
/// it), the other modules have no such global, the tool loads it only
/// where asked and on compute capability 8.0 or later, it carries the
/// host's heap layout, and ptxas assembles it for sm_90 with no spill.
#[test]
fn the_events_build_counts_into_its_own_global() {
    use warpalloc_device::event::{EVENT_ROWS, EVENT_STRIDE, EVENTS_SYMBOL};
    let events = symbols(ptx::KERNELS_TESTS_SM80_EVENTS);
    assert_eq!(events.kernels, ptx::KERNEL_NAMES);
    let mut want: Vec<String> = ptx::GLOBAL_NAMES.iter().map(|g| g.to_string()).collect();
    want.push(EVENTS_SYMBOL.into());
    let mut got = events.globals.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // Aligned to a row's 128 bytes (a cache line): it was 8.
    let declaration = format!(
        ".visible .global .align 128 .b8 {EVENTS_SYMBOL}[{}]",
        EVENT_ROWS * EVENT_STRIDE * 8
    );
    assert!(
        ptx::KERNELS_TESTS_SM80_EVENTS.contains(&declaration),
        "no {declaration}"
    );
    for plain in [ptx::KERNELS_TESTS, ptx::KERNELS_TESTS_SM80] {
        assert!(!plain.contains(EVENTS_SYMBOL));
    }
    // The allocator's paths count: a malloc scans, a free touches a slab —
    // reductions of their own, beyond the heap's counters' (which the plain
    // build has too), into the global.
    let reductions = |text: &str, kernel: &str| -> (usize, bool) {
        let fns = functions(text);
        let code: String = reachable(&fns, kernel)
            .iter()
            .map(|f| f.body.as_str())
            .collect();
        (
            code.matches("red.relaxed.gpu.global.add.u64").count(),
            code.contains(EVENTS_SYMBOL),
        )
    };
    for kernel in ["malloc_only", "free_only"] {
        let (counting, names) = reductions(ptx::KERNELS_TESTS_SM80_EVENTS, kernel);
        let (plain, _) = reductions(ptx::KERNELS_TESTS_SM80, kernel);
        assert!(
            names && counting > plain,
            "{kernel} does not count into {EVENTS_SYMBOL}: {counting} reductions, {plain} without the feature"
        );
    }
    for (cc, module) in [
        ((0, 0), ptx::KERNELS_TESTS),
        ((7, 5), ptx::KERNELS_TESTS),
        ((8, 0), ptx::KERNELS_TESTS_SM80_EVENTS),
        ((9, 0), ptx::KERNELS_TESTS_SM80_EVENTS),
    ] {
        assert!(ptx::events_for_capability(cc) == module, "{cc:?}");
    }
    check_heap_layout(ptx::KERNELS_TESTS_SM80_EVENTS);
    let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    let file = ptx_file("kernels_tests_sm80_events", ptx::KERNELS_TESTS_SM80_EVENTS);
    let report = ptxas
        .assemble(&file, Arch::Sm90)
        .unwrap_or_else(|e| panic!("ptxas rejected the events build: {e}"));
    for k in ptx::KERNEL_NAMES {
        assert!(
            report.get(k).is_some_and(|f| f.entry),
            "{k}:\n{}",
            report.log
        );
    }
    let spills: Vec<String> = report
        .functions
        .iter()
        .filter(|f| f.spills())
        .map(|f| f.to_string())
        .collect();
    assert!(spills.is_empty(), "the events build spills: {spills:?}");
    // A warning fails here as in the other modules (it was not looked at;
    // a review of the test driver, 2026-12-07).
    assert!(
        report.warnings.is_empty(),
        "ptxas warned on the events build: {:?}",
        report.warnings
    );
}

#[test]
fn ptxas_assembles_without_spills() {
    let mut table = String::new();
    let mut spills = String::new();
    for (arch, report) in reports() {
        for k in ptx::KERNEL_NAMES {
            assert!(
                report.get(k).is_some_and(|f| f.entry),
                "ptxas reported nothing for kernel {k} ({arch}):\n{}",
                report.log
            );
        }
        for f in &report.functions {
            let line = format!("{arch} {:<5} {f}", if f.entry { "entry" } else { "func" });
            eprintln!("{line}");
            let _ = writeln!(table, "{line}");
            if f.spills() {
                let _ = writeln!(spills, "{line}");
            }
        }
        for w in &report.warnings {
            eprintln!("{arch} ptxas warning: {w}");
            let _ = writeln!(table, "{arch} ptxas warning: {w}");
            // A warning fails the test (it was printed only, while the
            // `c-abi` module's failed; a review of the test driver,
            // 2026-12-07).
            let _ = writeln!(spills, "{arch} ptxas warning: {w}");
        }
    }
    assert!(
        spills.is_empty(),
        "functions spill registers, or ptxas warned:\n{spills}\nfull report:\n{table}"
    );
}

/// The device heap's layout as each PTX module carries it (the initialiser of
/// `WARPALLOC_HEAP_LAYOUT`) is the host's, and `WARPALLOC_HEAP` is a heap
/// link (8 zero bytes):
/// a field that exists on one side only, or is laid out differently, fails
/// here — on the CPU, before any GPU run.
#[test]
fn the_ptx_carries_the_hosts_heap_layout() {
    for text in [ptx::KERNELS_TESTS, ptx::KERNELS_TESTS_SM80] {
        check_heap_layout(text);
    }
}

fn check_heap_layout(text: &str) {
    use warpalloc_device::abi::{HEAP_SYMBOL, LAYOUT_SYMBOL, LAYOUT_WORDS, Layout};
    use warpalloc_device::heap::LAYOUT;
    let module = warpalloc_host::device::ptx::parse(text).expect("the PTX parses");
    let words = module
        .global(LAYOUT_SYMBOL)
        .unwrap_or_else(|| panic!("the PTX has no {LAYOUT_SYMBOL}"));
    assert_eq!(words.size, 8 * LAYOUT_WORDS);
    let mut bytes = words.init.clone();
    bytes.resize(words.size, 0);
    let words: [u64; LAYOUT_WORDS] = std::array::from_fn(|i| {
        u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
    });
    let theirs = Layout::from_words(&words).expect("the layout magic");
    assert_eq!(
        theirs.first_difference(&LAYOUT),
        None,
        "the PTX's device heap is laid out differently: (field, PTX, host)"
    );
    let heap = module
        .global(HEAP_SYMBOL)
        .expect("the PTX has WARPALLOC_HEAP");
    assert_eq!(
        (heap.size, heap.align),
        (8, 8),
        "WARPALLOC_HEAP's declaration (size, align) is not a heap link's"
    );
    assert!(
        heap.init.is_empty(),
        "WARPALLOC_HEAP must start unlinked (zero)"
    );
}

/// The declarations-only module (what the Miri tests load) declares exactly
/// the full module's globals and entry points.
#[test]
fn the_declarations_module_declares_what_the_module_does() {
    use warpalloc_host::device::ptx::parse;
    let full = parse(ptx::KERNELS_TESTS).expect("the PTX parses");
    let decls = parse(ptx::KERNELS_TESTS_DECLARATIONS).expect("the declarations parse");
    assert_eq!(full, decls);
    assert!(ptx::KERNELS_TESTS_DECLARATIONS.len() * 10 < ptx::KERNELS_TESTS.len());
}

/// Register, stack and spill budgets of the allocator's paths, per kernel and
/// architecture: ptxas's counts are deterministic, so this is a test. A
/// kernel above its budget fails; lower the budget when a change brings the
/// count down (it is a ratchet). Targets (`TARGETS`, checked here too): a
/// malloc-only kernel ≤ 46, a free-only one ≤ 24, malloc and free ≤ 48, 0 B
/// of stack and no spills in every column. `malloc_free_once` is "malloc
/// and free" with no state of its own; `alloc_free` is the benchmark's loop
/// (malloc, write, check, free, with its round, its thread id and two 32-bit
/// counts live across the calls), held to 60. The hot-path issue set 40 and
/// 48; growth to the demand (a search that waits for a creation it counts
/// on, a claim sent to its class's emptied slab) raised `alloc_free` to 54,
/// and a search that tells a claim not tagged yet from another class's
/// creation (and passes other classes' creations with one load) raised
/// `malloc_only` to 46 and `alloc_free` to 60 — both on 2026-12-04, before a
/// GPU could say whether that pays (BENCHMARKS.md, "Growth and spreading"
/// and "Drift"). A hint per warp in a table beside the heap (its index
/// computed in 32 bits), a slot locked only when its count has room for
/// the group, and a bitfield walk from the warp's own word brought them
/// down again on 2026-12-05: `malloc_only` 42 / 43 / 44 / 43,
/// `malloc_free_once` 44 / 46 / 48 / 46, `alloc_free` 55 / 60 / 58 / 60
/// (the table's index in 64-bit arithmetic had cost `malloc_free_once` 2
/// registers over its target on sm_90). One 64-bit word per slot
/// (pointer, count and class: one `fetch_add` takes a reference and reads
/// the slab and its class, no header read) brought them down once more
/// the same day: `malloc_only` 42 / 42 / 44 / 42, `malloc_free_once`
/// 42 / 46 / 46 / 46, `alloc_free` 54 / 58 / 56 / 58 — and `free_only` on
/// the sm_80 module up from 24 / 25 to 26 / 26 (the class the free reads
/// from the counter, in place of the header's block, lives through the
/// lock; still within `FREE_UP_TO`, and held to 24 it fits). On an H200,
/// A claim that no longer looks again for an emptied slab of its class
/// (`create_alone`; the look is the scan's, `look_or_claim`) lowered them
/// once more (2026-12-05, 14:55 UTC): `malloc_only` 43 / 42 / 44 / 42,
/// `malloc_free_once` 46 on every column, `alloc_free` 54 / 58 / 56 / 58.
/// On an H200,
/// 60 registers keep `alloc_free`'s 4 blocks of
/// 256 threads per SM (52 did not fit a fifth); `malloc_only` at 44 holds
/// 5 such blocks instead of 6.
///
/// No budget may exceed its target, with one allowance: where a register
/// above the target costs no occupancy (`FREE_UP_TO`), ptxas's default
/// count may be higher than the target provided the kernel *fits* the
/// target, assembled again with `--maxrregcount` at the target: no stack,
/// no spills. That is every kernel at most 64 registers on sm_75
/// (`alloc_free` was 52 by default and fit 48 before): ptxas guards each
/// collective in a possibly diverged warp with a fallback that is a call on
/// sm_75 (inline on sm_90), and with no occupancy to gain it does not pack
/// its registers around those calls (BENCHMARKS.md, 2026-12-04 afternoon
/// and evening); and at most 32 on sm_80 and sm_90, which only `free_only`
/// is: 26 and 25 on sm_90 since `free` tells a block's start (or its start
/// aligned up, from `aligned_alloc`) from a pointer into its middle, an
/// invalid free that frees nothing — held to 24 it fits (2026-12-04) — and
/// 26 on the sm_80 module's sm_80 and sm_90 since the slot's counter names
/// the class (2026-12-05; held to 24 it fits).
const TARGETS: &[(&str, [u32; 4])] = &[
    ("malloc_only", [46; 4]),
    ("free_only", [24; 4]),
    ("malloc_free_once", [48; 4]),
    ("alloc_free", [60; 4]),
];

/// Per column, the registers per thread up to which a kernel's count costs
/// no occupancy. A Turing SM holds at most 32 warps and 64 K registers, so
/// 64 per thread keep every warp resident (Turing Tuning Guide,
/// "Occupancy"). An sm_80 or sm_90 SM holds 64 warps with the same
/// registers, so 32 per thread keep every warp resident there (64 warps ×
/// 32 lanes × 32 registers, in whole 256-register warp allocations), and a
/// register above 32 can cost warps.
const FREE_UP_TO: [u32; 4] = [64, 32, 32, 32];

/// The module and architecture of each column of `reports()`, assembled
/// again with every function held to `max_registers`.
fn assemble_capped(column: usize, max_registers: u32) -> PtxasReport {
    let (name, text, arch) = [
        ("kernels_tests", ptx::KERNELS_TESTS, Arch::Sm75),
        ("kernels_tests", ptx::KERNELS_TESTS, Arch::Sm90),
        ("kernels_tests_sm80", ptx::KERNELS_TESTS_SM80, Arch::Sm80),
        ("kernels_tests_sm80", ptx::KERNELS_TESTS_SM80, Arch::Sm90),
    ][column];
    let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    let file = ptx_file(&format!("{name}_{arch}_capped_{max_registers}"), text);
    ptxas
        .assemble_capped(&file, arch, max_registers)
        .unwrap_or_else(|e| panic!("ptxas rejected {name} for {arch}, capped: {e}"))
}

#[test]
fn allocator_paths_stay_within_their_register_budgets() {
    // (kernel, registers: the sm_75 module for sm_75, for sm_90; the sm_80
    // module for sm_80, for sm_90)
    // sm_75 `malloc_only` 40 → 42 and `malloc_free_once` 42 → 44 on
    // 2026-12-05 (the exhausted mark read after the blind lock, a round
    // trip off the path of every malloc of 16 B to 2 KiB; within
    // `FREE_UP_TO`: no warp lost on Turing). BENCHMARKS.md.
    // On 2026-12-05 (afternoon), a hint per freed block and the exhausted
    // mark read after the look (the path 8 → 7 round trips per pair at
    // 1 KiB, 9 → 8 at 8 KiB): `malloc_only` 42 / 42 / 44 / 42 → 43 / 44 /
    // 46 / 44, `malloc_free_once` 44 / 46 / 46 / 46 → 46 / 46 / 47 / 46,
    // `alloc_free` on sm_80 56 → 58, all within their targets; `free_only`
    // 24 / 26 / 26 / 26 → 25 / 26 / 26 / 28 (the free stores its stream's
    // hint), within `FREE_UP_TO` and fitting 24. BENCHMARKS.md, "A hint
    // per freed block".
    // On 2026-12-06, room three times over near the hint (heap/search.rs,
    // `headroom`: extra walk rounds per group-malloc at 8 KiB 0.054-0.086
    // → 0.025-0.059 in the contention test's warm launch): the sm_90
    // columns' `malloc_free_once` 46 → 47, within its target and within
    // the warp's register allocation that 46 took (256 registers a unit:
    // 41 to 48 a thread take 1 536 a warp, so no block of 256 threads is
    // lost on an SM), and `alloc_free` 58 → 57; sm_75 and sm_80 unchanged.
    // The same counts as four times over (tried that morning), whose forms
    // measured (ptxas, 07:25-08:09 UTC; sm_90 `malloc_only` /
    // `malloc_free_once`): the kept one, 42 / 47; the headroom computed as
    // a shift, 46 / 46 (and sm_75 44 / 47, sm_80 46 / 48); the group
    // counted twice near the hint, 48 / 49; caps in `guard::wanted`, 45 to
    // 48 / 50 to 52; any group, 45 / 47; groups of half a warp or more,
    // 42 / 47. BENCHMARKS.md, "Room three times over near the hint".
    // Later that day, a claim's look back for room behind the hints
    // (heap/search.rs, `room_behind`, the group's lanes a slot each, with
    // the look for an emptied slab's outcome shared before it): the sm_90
    // columns' `malloc_only` 42 → 40, `malloc_free_once` 47 → 45 and
    // `alloc_free` 57 → 56, sm_80's `malloc_free_once` 46 → 45 and
    // `alloc_free` 56 → 55; sm_75 unchanged. The leader alone looking
    // back took 44 / 43 / 44 / 43, 47 / 45 / 46 / 45, 56 / 59 / 56 / 59,
    // and out of line 47 / 46 / 46 / 47, 48 / 50 / 48 / 49, 59 / 62 / 60 /
    // 61. BENCHMARKS.md, "A look back at the claim, for a class with room".
    // Its look capped at four rounds (a lone lane's claim made up to 128
    // loads one after another): sm_75 `alloc_free` 54 → 55, within its
    // target and the same register allocation (a thread's registers go by
    // eights: 56 for either). The same cap computed with `wrap` instead of
    // `%` took 43 / 43 / 44 / 43, 46 / 47 / 46 / 47 and 55 / 58 / 57 / 58.
    // On 2026-12-06 (evening), a scan that registered on a crowded
    // creation passes the slots the lanes counted before it will fill
    // (`crowded_past`: under the simulator's timed schedule, scans per
    // group-malloc 4.8 → 1.8 in the cold launch at 8 KiB): the sm_90
    // columns' `alloc_free` 56 → 58, within its target and the same 4
    // blocks of 256 threads an SM (57 to 64 registers take 2 048 a warp:
    // 32 warps). The same without a division, by a loop, took 44 / 40 /
    // 44 / 40, 47 / 45 / 46 / 45, 56 / 57 / 55 / 57; by a shift, 44 / 40 /
    // 46 / 40, 47 / 45 / 46 / 45, 55 / 57 / 56 / 57. BENCHMARKS.md, "A
    // timed schedule". The same evening the passed slots are looked at
    // (their room taken, only their claims and creations passed; jumped
    // over, a trim's kept slabs were passed and the class grew a slab
    // more, `a_trim_keeps_each_classes_keep_for_the_next_launch`):
    // `malloc_only` 43 / 40 / 44 / 40 → 44 / 40 / 46 / 40,
    // `malloc_free_once` 46 / 45 / 45 / 45 → 47 / 45 / 46 / 45,
    // `alloc_free` 55 / 58 / 55 / 58 → 55 / 57 / 56 / 57: within their
    // targets, and no column leaves its warp register allocation (a
    // thread's registers go by eights: 41 to 48, 49 to 56, 57 to 64).
    // Later that evening, a small group's walk in a slab of few words
    // starts at the block its stream freed, with no look (`Slab::allocate`;
    // the mixed launch's path 8 → 7 round trips per pair): the sm_90
    // columns' `alloc_free` 57 → 56, a warp register allocation less
    // (56 take 1 792 a warp); the rest unchanged.
    // On 2026-12-07, a `bar.warp.sync` where lanes relied on another
    // lane's acquire or release across a shuffle or a ballot only (a free
    // before its release, the walk's start, a slab's zeroing; PTX ISA: only
    // `bar.warp.sync` orders memory among a warp's lanes) and the walk's
    // warp slot read by the group's leader alone: sm_75 `free_only` 25 →
    // 24; the rest unchanged. Then a free of a pointer into a block's
    // middle frees nothing unless the pointer is aligned above 4 KiB
    // (`Slab::freeable_index_of`: `free(p + 16)` had freed half the 48-byte
    // blocks it was given): `free_only` 24 / 26 / 26 / 28 → 25 / 27 / 26 /
    // 28, within the warp's register allocation (a thread's registers go
    // by eights) and without a spill at its target of 24. Its other forms
    // took 26 / 26 / 26 / 28 (a bound of `| 1`, which was also wrong at
    // the bound), 24 / 28 / 26 / 30 (a branch on `into`), 25 / 28 / 26 / 30
    // (bitwise tests).
    const BUDGETS: &[(&str, [u32; 4])] = &[
        ("malloc_only", [44, 40, 46, 40]),
        ("free_only", [25, 27, 26, 28]),
        ("malloc_free_once", [47, 45, 46, 45]),
        ("alloc_free", [55, 56, 56, 56]),
    ];
    let mut failures = String::new();
    // `zip` stops at the shorter: a kernel in one list alone would go
    // unchecked.
    assert_eq!(
        BUDGETS.len(),
        TARGETS.len(),
        "BUDGETS and TARGETS list the same kernels"
    );
    for (&(kernel, budgets), &(target_kernel, targets)) in BUDGETS.iter().zip(TARGETS) {
        assert_eq!(
            kernel, target_kernel,
            "BUDGETS and TARGETS list the same kernels"
        );
        for (column, (budget, target)) in budgets.iter().zip(targets.iter()).enumerate() {
            if budget > target && *budget > FREE_UP_TO[column] {
                failures.push_str(&format!(
                    "{kernel}: budget {budget} above the target {target} (column {column})\n"
                ));
            }
        }
    }
    // Where the default count is above the target (allowed only where it
    // costs no occupancy), the kernel must fit the target.
    for (column, (arch, report)) in reports().into_iter().enumerate() {
        for &(kernel, targets) in TARGETS {
            let target = targets[column];
            let over = report
                .get(kernel)
                .and_then(|f| f.registers)
                .is_some_and(|r| r > target);
            if !over {
                continue;
            }
            let capped = assemble_capped(column, target);
            let Some(f) = capped.get(kernel) else {
                failures.push_str(&format!("{arch} capped: no kernel {kernel}\n"));
                continue;
            };
            let stack = f.stack_frame.max(f.cumulative_stack.unwrap_or(0));
            println!(
                "{arch} {kernel} held to its target {target}: {} registers, {stack} B stack, {} B spilled",
                f.registers.unwrap_or(u32::MAX),
                f.spill_stores + f.spill_loads
            );
            if stack != 0 || f.spills() || f.registers.is_none_or(|r| r > target) {
                failures.push_str(&format!(
                    "{arch} {kernel}: does not fit its target {target} registers: {f}\n"
                ));
            }
        }
    }
    for (column, (arch, report)) in reports().into_iter().enumerate() {
        for &(kernel, budgets) in BUDGETS {
            let budget = budgets[column];
            let Some(f) = report.get(kernel) else {
                failures.push_str(&format!("{arch}: no kernel {kernel}\n"));
                continue;
            };
            let registers = f.registers.unwrap_or(u32::MAX);
            println!(
                "{arch} {kernel}: {registers} registers (budget {budget}), {} B stack, {} B spilled",
                f.stack_frame,
                f.spill_stores + f.spill_loads
            );
            if registers > budget {
                failures.push_str(&format!(
                    "{arch} {kernel}: {registers} registers, budget {budget}\n"
                ));
            }
            let stack = f.stack_frame.max(f.cumulative_stack.unwrap_or(0));
            if stack != 0 || f.spill_stores + f.spill_loads != 0 {
                failures.push_str(&format!(
                    "{arch} {kernel}: {stack} B stack, {} B spill stores, {} B spill loads (budget 0)\n",
                    f.spill_stores, f.spill_loads
                ));
            }
        }
    }
    assert!(failures.is_empty(), "over budget:\n{failures}");
}

/// The device crate as a kernel written in or linking C uses it: built to
/// PTX with `c-abi`, it exports `malloc`, `free`, `calloc`, `realloc` and
/// `aligned_alloc` as visible functions of C's signatures, with no warning,
/// and a kernel that calls `malloc` and `free` by those names (as one
/// linked from C would) assembles with them.
#[test]
fn the_c_abi_exports_build_and_a_kernel_calling_them_assembles() {
    // The build script's nested target directory (its `core` is built
    // there already): `WARPALLOC_PTX_TARGET_DIR` where set, as the builder
    // takes it, else `<target>/warpalloc-ptx`.
    let target = std::env::var_os(warpalloc_builder::TARGET_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("CARGO_TARGET_TMPDIR has a parent")
                .join("warpalloc-ptx")
        });
    let out = warpalloc_builder::PtxBuilder::new(concat!(env!("CARGO_MANIFEST_DIR"), "/device"))
        .arch(Arch::Sm75)
        .feature("c-abi")
        .target_dir(target)
        .out_file(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_abi.ptx"))
        .cargo_directives(false)
        .build()
        .unwrap_or_else(|e| panic!("building the device crate with c-abi: {e}"));
    assert!(out.warnings.is_empty(), "{}", out.warnings.join("\n"));
    let mut exported = out.functions.clone();
    exported.sort();
    assert_eq!(
        exported,
        ["aligned_alloc", "calloc", "free", "malloc", "realloc"],
        "{:?}",
        out.functions
    );
    let mut globals = out.globals.clone();
    globals.sort();
    assert_eq!(globals, ["WARPALLOC_HEAP", "WARPALLOC_HEAP_LAYOUT"]);
    let text = std::fs::read_to_string(&out.path).expect("the PTX");
    // C's signatures: a pointer-sized argument and result.
    for (name, declared) in [
        (
            "malloc",
            ".visible .func  (.param .b64 func_retval0) malloc(\n\t.param .b64 ",
        ),
        ("free", ".visible .func free(\n\t.param .b64 "),
    ] {
        assert!(text.contains(declared), "{name}'s declaration:\n{text}");
    }
    // A kernel of another module, linked in, calls them by name: here
    // appended to the module, as the linker would put it.
    let caller = format!(
        "{text}\n{}",
        r#"
.visible .entry c_abi_caller(
	.param .u64 c_abi_caller_param_0
)
{
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [c_abi_caller_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	{
	.param .b64 param0;
	st.param.b64 	[param0], 48;
	.param .b64 retval0;
	call.uni (retval0), malloc, (param0);
	ld.param.b64 	%rd3, [retval0];
	}
	st.global.u64 	[%rd2], %rd3;
	{
	.param .b64 param0;
	st.param.b64 	[param0], %rd3;
	call.uni free, (param0);
	}
	ret;
}
"#
    );
    let file = ptx_file("c_abi_caller", &caller);
    let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    for arch in [Arch::Sm75, Arch::Sm90] {
        let report = ptxas
            .assemble(&file, arch)
            .unwrap_or_else(|e| panic!("ptxas rejected the c-abi caller for {arch}: {e}"));
        let kernel = report
            .get("c_abi_caller")
            .unwrap_or_else(|| panic!("no c_abi_caller for {arch}:\n{}", report.log));
        assert!(kernel.entry, "{}", report.log);
        assert_eq!(
            (kernel.spill_stores, kernel.spill_loads),
            (0, 0),
            "{arch}: {}",
            report.log
        );
        assert!(report.warnings.is_empty(), "{arch}: {:?}", report.warnings);
    }
}

/// `info --link-check`'s module (`ptx::link_only`): the embedded PTX's
/// header and the heap link's two globals, nothing else, and a module
/// ptxas (and so the driver) accepts.
#[test]
fn the_link_only_module_holds_the_heap_globals_and_assembles() {
    for (name, full) in [
        ("sm75", ptx::KERNELS_TESTS),
        ("sm80", ptx::KERNELS_TESTS_SM80),
    ] {
        let text = ptx::link_only(full);
        let found = symbols(&text);
        let mut globals = found.globals.clone();
        globals.sort();
        assert_eq!(
            globals,
            ["WARPALLOC_HEAP", "WARPALLOC_HEAP_LAYOUT"],
            "{text}"
        );
        assert!(
            found.kernels.is_empty() && found.functions.is_empty(),
            "{text}"
        );
        assert_eq!(
            symbols(full)
                .globals
                .iter()
                .filter(|g| g.starts_with("WARPALLOC_HEAP"))
                .count(),
            2
        );
        let file = ptx_file(&format!("link_only_{name}"), &text);
        let ptxas = Ptxas::find().unwrap_or_else(|e| panic!("{e}"));
        ptxas.assemble(&file, Arch::Sm90).unwrap_or_else(|e| {
            panic!("ptxas rejected the link-only module ({name}): {e}\n{text}")
        });
    }
}
