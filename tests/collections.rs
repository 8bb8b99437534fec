//! `Vec`, `Box` and `String` in kernels through the global allocator, the way
//! a host program runs them: this test binary declares `WarpAlloc` as its
//! global allocator (as `WarpAlloc`'s docs say to) and launches the
//! `collections` kernel through `Heap` on the emulated device. The lanes
//! allocate from the module's heap, everything else from the system
//! allocator, and every pointer is freed by the heap that made it — never
//! by the system allocator (which would abort the process).

mod support;

use support::{buffer, read, run, stats};
use warpalloc::HeapConfig;
use warpalloc_device::WarpAlloc;
use warpalloc_device::sim::{LaunchConfig, seeds};
use warpalloc_kernels_tests::collections::{
    collections, panic_when_full, shrink_large_when_full, shrink_when_full,
};
use warpalloc_kernels_tests::stress::STATS_WORDS;

#[global_allocator]
static GLOBAL: WarpAlloc = WarpAlloc;

#[test]
fn warpalloc_knows_it_is_the_global_allocator() {
    assert!(warpalloc::is_global_allocator());
}

/// The process's resident memory (`VmRSS`), in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib << 10
}

/// The host program's own zeroed allocations come from the system
/// allocator's `alloc_zeroed`, as they would without `WarpAlloc`: a 2 GiB
/// `vec![0u8; _]` is the OS's zeroed pages, untouched (with the default,
/// allocate then write zeros, it touched all 2 GiB; a review,
/// 2026-12-07). A host `Vec` grows and shrinks by the system's `realloc`
/// with its contents kept.
#[test]
fn the_host_programs_zeroed_vec_touches_no_page_and_grows_in_place() {
    const BYTES: usize = 2 << 30;
    let before = resident_bytes();
    let zeros = vec![0u8; BYTES];
    let after = resident_bytes();
    assert_eq!((zeros[0], zeros[BYTES - 1]), (0, 0));
    assert!(
        after.saturating_sub(before) < 1 << 30,
        "a zeroed 2 GiB vec took {} MiB resident",
        after.saturating_sub(before) >> 20
    );
    drop(zeros);
    let mut words: Vec<u64> = Vec::with_capacity(1);
    for i in 0..100_000u64 {
        words.push(i);
    }
    words.truncate(1_000);
    words.shrink_to_fit();
    assert!(words.iter().copied().eq(0..1_000));
}

#[test]
fn collections_grow_through_the_global_allocator() {
    for seed in seeds(0xb0c5u64, 3) {
        let mut heap = support::heap_with(HeapConfig {
            reserve: Some(256 << 20),
            slots: 1024,
            ..HeapConfig::default()
        });
        let stats_buf = buffer::<u64>(&heap, STATS_WORDS);
        run(
            &mut heap,
            &LaunchConfig::linear(4, 48).seed(seed),
            collections::Args {
                stats: stats_buf.kernel_ptr(),
                n: 300,
            },
        );
        let s = stats(&heap, &stats_buf);
        assert_eq!(s.broken, 0, "seed {seed:#x}: {s:?}");
        assert_eq!(
            s.allocs,
            4 * 48,
            "seed {seed:#x}: not every thread finished: {s:?}"
        );
        let h = heap.stats().expect("stats");
        assert!(
            h.traffic.slabs_from_provider > 0 && h.rpc.allocs > 0,
            "the lanes did not allocate from the heap: {h:?}"
        );
        assert_eq!(
            h.device.double_frees + h.device.invalid_frees,
            0,
            "{:?}",
            h.device
        );
        assert_eq!(heap.check().expect("check"), Ok(()));
        assert_eq!(
            (h.live.live_slabs, h.live.live_allocations()),
            (0, 0),
            "a collection leaked: {:?}",
            h.live
        );
    }
}

/// A `Vec` a kernel allocated, freed by host code after the launch: the
/// registry sends it back to the heap whose region holds it.
#[test]
fn a_heap_pointer_freed_on_the_host_goes_back_to_its_heap() {
    use warpalloc_kernels_tests::collections::leak_one;
    let mut heap = support::heap(64 << 20, 64);
    let out = buffer::<u64>(&heap, 2);
    run(
        &mut heap,
        &LaunchConfig::linear(1, 1),
        leak_one::Args {
            out: out.kernel_ptr(),
        },
    );
    let words = support::read(&heap, &out);
    let (ptr, len) = (words[0] as usize, words[1] as usize);
    let (base, region) = heap.region();
    assert!(
        (ptr as u64) >= base && (ptr as u64) < base + region,
        "the kernel's Vec is not in the heap"
    );
    assert_eq!(heap.stats().expect("stats").live.live_allocations(), 1);
    // SAFETY: the kernel leaked a `Vec<u32>` of `len` elements (capacity
    // `len`) at `ptr`; nothing else owns it. Host code frees it, as a
    // program that got a Vec out of a simulated kernel would.
    let v =
        unsafe { Vec::from_raw_parts(std::ptr::with_exposed_provenance_mut::<u32>(ptr), len, len) };
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32 * 3));
    drop(v);
    let h = heap.stats().expect("stats");
    assert_eq!(h.live.live_allocations(), 0, "{:?}", h.live);
    assert_eq!(h.device.invalid_frees + h.device.double_frees, 0);
}

/// A kernel whose `Vec` asks the global allocator while no heap serves its
/// module ends the program — as a GPU's trap would — after saying which
/// lane and what to do; before, `Vec` quietly took system memory and the
/// program printed "ok". Run in a child process: this test binary, asked
/// for this test with an environment variable set.
#[test]
fn a_vec_in_a_kernel_of_an_unlinked_module_ends_the_program_naming_the_fix() {
    const CHILD: &str = "WARPALLOC_UNLINKED_CHILD";
    const NAME: &str = "a_vec_in_a_kernel_of_an_unlinked_module_ends_the_program_naming_the_fix";
    if support::is_child(CHILD) {
        let launcher =
            warpalloc_host::Launcher::new(support::PTX, warpalloc_host::Prefer::Simulator)
                .expect("launcher");
        let stats_buf = launcher.alloc_zeroed::<u64>(STATS_WORDS).expect("buffer");
        // SAFETY: the stats buffer is sized for the kernel and outlives the
        // launch.
        let _ = unsafe {
            launcher.launch(
                (1, 1, 1),
                (32, 1, 1),
                collections::Args {
                    stats: stats_buf.kernel_ptr(),
                    n: 10,
                },
            )
        };
        println!("the child's launch returned");
        return;
    }
    let (stdout, stderr) = support::run_ending_child(NAME, CHILD);
    assert!(!stdout.contains("the child's launch returned"), "{stdout}");
    assert!(
        stderr.contains("asked the global allocator")
            && stderr.contains("heap.link(&module)")
            && stderr.contains("kernel `collections`, block (0, 0, 0) thread ("),
        "{stderr}"
    );
}

/// A lane that panics while its heap is exhausted has its panic reported by
/// the launch: the message and payload go to the system allocator. Until
/// 2026-12-07 they asked the exhausted heap, got null, and the process
/// aborted with the message lost (a review). In a child process, since
/// the bug was an abort.
#[test]
fn a_lane_that_panics_in_an_exhausted_heap_fails_its_launch_with_the_message() {
    const CHILD: &str = "WARPALLOC_PANIC_FULL_CHILD";
    const NAME: &str = "a_lane_that_panics_in_an_exhausted_heap_fails_its_launch_with_the_message";
    if support::is_child(CHILD) {
        let mut heap = support::heap_with(HeapConfig {
            limit: Some(4 << 20),
            slots: 64,
            ..HeapConfig::default()
        });
        let out = buffer::<u64>(&heap, 1);
        *heap.launcher_mut().expect("a launcher").simulator_config() = LaunchConfig::linear(1, 1);
        // SAFETY: `out` holds the kernel's one word and outlives the launch.
        let launched = unsafe {
            heap.launch(
                (1, 1, 1),
                (1, 1, 1),
                panic_when_full::Args {
                    out: out.kernel_ptr(),
                },
            )
        };
        let text = launched.err().map(|e| e.to_string()).unwrap_or_default();
        println!("the child's launch returned: {text}");
        return;
    }
    let out = support::run_child(NAME, CHILD);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child ended: {stdout}\n{stderr}");
    assert!(
        stdout.contains("the child's launch returned")
            && stdout.contains("the heap was full after 2 blocks of 1 MiB"),
        "{stdout}\n{stderr}"
    );
}

/// A kernel's `Vec` that outgrows a heap's limit ends the program — as a
/// GPU's trap would — after naming the kernel, the lane, the fix and the
/// heap's counters (in a child process, whose stderr the test reads).
#[test]
fn a_vec_past_the_heap_s_limit_ends_the_program_naming_kernel_lane_and_fix() {
    const CHILD: &str = "WARPALLOC_OOM_CHILD";
    const NAME: &str = "a_vec_past_the_heap_s_limit_ends_the_program_naming_kernel_lane_and_fix";
    if support::is_child(CHILD) {
        let mut heap = support::heap_with(HeapConfig {
            limit: Some(4 << 20),
            slots: 64,
            ..HeapConfig::default()
        });
        let stats_buf = buffer::<u64>(&heap, STATS_WORDS);
        run(
            &mut heap,
            &LaunchConfig::linear(4, 64).seed(1),
            collections::Args {
                stats: stats_buf.kernel_ptr(),
                n: 100_000,
            },
        );
        println!("the child's launch returned");
        return;
    }
    let (_, stderr) = support::run_ending_child(NAME, CHILD);
    assert!(
        stderr.contains("warpalloc: kernel `collections`, block (")
            && stderr.contains("the heap has no memory for it")
            && stderr.contains("HeapConfig::limit")
            && stderr.contains("out_of_memory"),
        "{stderr}"
    );
}

/// A `Vec` shrunk by more than half on an exhausted heap keeps its block:
/// its allocator's `realloc` got null for the smaller block, and the `Vec`
/// ended the program (a review, 2026-12-07). The null is forgiven: the
/// heap counts only the 1 MiB malloc that found the heap full.
#[test]
fn a_vec_shrunk_on_an_exhausted_heap_keeps_its_block() {
    let mut heap = support::heap_with(HeapConfig {
        limit: Some(4 << 20),
        slots: 64,
        ..HeapConfig::default()
    });
    let out = buffer::<u64>(&heap, 2);
    run(
        &mut heap,
        &LaunchConfig::linear(1, 1),
        shrink_when_full::Args {
            out: out.kernel_ptr(),
        },
    );
    let got = read(&heap, &out);
    assert_eq!(got[0], 1, "the Vec moved or lost its bytes: {got:?}");
    assert!(got[1] >= 1, "{got:?}");
    let st = heap.stats().expect("stats");
    assert_eq!(st.device.out_of_memory, 1, "{:?}", st.device);
    assert_eq!(
        (st.device.double_frees, st.device.invalid_frees),
        (0, 0),
        "{:?}",
        st.device
    );
    assert_eq!(st.live.live_allocations(), 0, "{:?}", st.live);
}

/// C's `realloc` shrinking a large block on a heap at its limit keeps the
/// block where it is and gives no emptied slab back: the classes' kept
/// slabs serve the next small blocks with no host request.
#[test]
fn a_large_block_shrunk_at_the_limit_stays_and_keeps_the_classes_slabs() {
    let mut heap = support::heap_with(HeapConfig {
        limit: Some(10 << 20),
        slots: 64,
        ..HeapConfig::default()
    });
    let out = buffer::<u64>(&heap, 3);
    run(
        &mut heap,
        &LaunchConfig::linear(1, 1),
        shrink_large_when_full::Args {
            out: out.kernel_ptr(),
        },
    );
    let got = read(&heap, &out);
    let st = heap.stats().expect("stats");
    assert_eq!(
        got[0], 1,
        "no 6 MiB block under the limit: {got:?} {:?}",
        st.traffic
    );
    assert_eq!(
        got[1], 1,
        "the block moved or lost its bytes: {got:?} {:?}",
        st.traffic
    );
    assert_eq!(got[2], 64, "{got:?}");
    assert_eq!(st.traffic.slabs_given_back, 0, "{:?}", st.traffic);
    assert_eq!(st.device.out_of_memory, 0, "{:?}", st.device);
    assert_eq!(st.live.live_allocations(), 0, "{:?}", st.live);
}
