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
    if warpalloc_host::gpu::driver_present() {
        return; // This machine has a driver: the GPU path is tested by the GPU check.
    }
    let (ok, text) = warpalloc(&["--gpu", "demo"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("a GPU was required: no CUDA driver"),
        "{text}"
    );
    assert!(text.contains("simulator still runs"), "{text}");
}

#[test]
fn info_names_the_embedded_ptx() {
    let (ok, text) = warpalloc(&["info"]);
    assert!(ok, "{text}");
    assert!(text.contains("embedded PTX: sm_75"), "{text}");
    assert!(text.contains("warp_tickets"), "{text}");
}
