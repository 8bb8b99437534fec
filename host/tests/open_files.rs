//! The emulated backing's physical memory is one file, not one per granule:
//! a heap in the simulator maps far more granules than a process may open
//! files (the usual soft limit is 1 024; one memfd per granule stopped an
//! emulated heap at about 2 GiB under it — a review, 2026-12-07).
//!
//! Alone in its test binary: it lowers the process's limit of open files.

use warpalloc_host::backing::{Backing, GRANULE, HostEmulated};

#[test]
fn mapping_many_granules_holds_one_file_open() {
    const LIMIT: u64 = 64;
    const GRANULES: u64 = 4 * LIMIT;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a `rlimit`.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0);
    let lowered = libc::rlimit {
        rlim_cur: LIMIT.min(limit.rlim_max),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: a valid pointer to a `rlimit`; the soft limit within the hard.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) };
    assert_eq!(set, 0);
    let mut backing = HostEmulated::new(GRANULES * GRANULE).expect("emulated device");
    let base = backing.reserve(GRANULES * GRANULE).expect("reservation");
    for i in 0..GRANULES {
        let addr = base + i * GRANULE;
        backing
            .map(addr)
            .unwrap_or_else(|e| panic!("granule {i} of {GRANULES} (open files {LIMIT}): {e}"));
        // SAFETY: `addr` was just mapped, readable and writable.
        unsafe { std::ptr::with_exposed_provenance_mut::<u64>(addr as usize).write(i + 1) };
    }
    // Every granule its own memory, all mapped at once.
    for i in 0..GRANULES {
        // SAFETY: mapped above, still mapped.
        let seen = unsafe {
            std::ptr::with_exposed_provenance::<u64>((base + i * GRANULE) as usize).read()
        };
        assert_eq!(seen, i + 1, "granule {i}");
    }
    // Unmapped, released (holes punched) and mapped again: zeroed memory,
    // the store's holes reused, not the file grown.
    for i in 0..GRANULES {
        backing.unmap(base + i * GRANULE).expect("unmap");
    }
    assert_eq!(backing.release_spares().expect("release"), GRANULES);
    for i in 0..GRANULES {
        backing.map(base + i * GRANULE).expect("map again");
        // SAFETY: mapped just now.
        let seen = unsafe {
            std::ptr::with_exposed_provenance::<u64>((base + i * GRANULE) as usize).read()
        };
        assert_eq!(seen, 0, "granule {i} after a release");
    }
    backing.free_reservation().expect("free");
}
