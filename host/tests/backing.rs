//! The region over `HostEmulated`: reuse without driver calls, aligned and
//! contiguous runs, a physical granule remapped elsewhere, limit / headroom /
//! fault-injection refusals, bad frees, trim, free granules moved to where a
//! run needs them when memory is short, a steady churn at the edge of
//! memory, spill to host memory (and its refusal when the host is short),
//! and a model-checked random sequence (proptest) with exact accounting and
//! every live granule's bytes kept, spilling or not.

use proptest::prelude::*;
use warpalloc_host::backing::{
    Backing, BackingError, DriverCalls, GRANULE, HostEmulated, HostMemory, Refusal, Region,
    RegionConfig, spill_floor,
};

fn region(
    reserve_granules: u64,
    device_granules: u64,
    limit: Option<u64>,
    headroom: u64,
) -> Region<HostEmulated> {
    spilling_region(reserve_granules, device_granules, limit, headroom, false)
}

fn spilling_region(
    reserve_granules: u64,
    device_granules: u64,
    limit: Option<u64>,
    headroom: u64,
    spill: bool,
) -> Region<HostEmulated> {
    let backing = HostEmulated::new(device_granules * GRANULE).expect("emulated device");
    Region::new(
        backing,
        RegionConfig {
            reserve: Some(reserve_granules * GRANULE),
            limit,
            headroom,
            spill,
        },
    )
    .expect("reserve")
}

fn write_read(addr: u64, bytes: u64, seed: u8) {
    let p = addr as *mut u8;
    for off in (0..bytes).step_by(4096) {
        // SAFETY: the region mapped `bytes` at `addr` for us.
        unsafe { p.add(off as usize).write(seed ^ (off >> 12) as u8) };
    }
    for off in (0..bytes).step_by(4096) {
        // SAFETY: as above.
        let got = unsafe { p.add(off as usize).read() };
        assert_eq!(got, seed ^ (off >> 12) as u8);
    }
}

#[test]
fn freed_granules_are_reused_without_driver_calls() {
    let mut r = region(16, 64, None, 0);
    let a = r.allocate(GRANULE, GRANULE).unwrap();
    let b = r.allocate(GRANULE, GRANULE).unwrap();
    write_read(a, GRANULE, 1);
    write_read(b, GRANULE, 2);
    assert_eq!(r.stats().calls.maps, 2);
    r.free(a, GRANULE).unwrap();
    r.free(b, GRANULE).unwrap();
    for _ in 0..10 {
        let c = r.allocate(GRANULE, GRANULE).unwrap();
        assert!(c == a || c == b);
        r.free(c, GRANULE).unwrap();
    }
    let s = r.stats();
    assert_eq!(
        (s.calls.maps, s.calls.creates, s.calls.unmaps),
        (2, 2, 0),
        "{s:?}"
    );
    assert_eq!(
        (s.mapped_bytes, s.in_use_bytes, s.free_mapped_granules),
        (2 * GRANULE, 0, 2)
    );
}

/// A heap that grows a slab at a time maps the lowest unmapped granule
/// each time, and one that a trim unmapped is the lowest again: the
/// region's search for a lone granule starts past the granules it mapped
/// (not at the region's start, passing every one of them), and a trim
/// moves that start back down.
#[test]
fn a_trimmed_granule_is_the_first_mapped_again() {
    let mut r = region(8, 8, None, 0);
    let addrs: Vec<u64> = (0..4)
        .map(|_| r.allocate(GRANULE, GRANULE).unwrap())
        .collect();
    for pair in addrs.windows(2) {
        assert_eq!(pair[1], pair[0] + GRANULE, "{addrs:x?}");
    }
    for &a in &addrs[..2] {
        r.free(a, GRANULE).unwrap();
    }
    assert_eq!(r.trim().unwrap(), 2 * GRANULE);
    assert_eq!(r.allocate(GRANULE, GRANULE), Ok(addrs[0]));
    assert_eq!(r.allocate(GRANULE, GRANULE), Ok(addrs[1]));
    assert_eq!(r.allocate(GRANULE, GRANULE), Ok(addrs[3] + GRANULE));
}

#[test]
fn large_runs_are_contiguous_and_aligned() {
    let mut r = region(64, 128, None, 0);
    let small = r.allocate(GRANULE, GRANULE).unwrap();
    let big = r.allocate(5 * GRANULE, 8 * GRANULE).unwrap();
    assert_eq!(big % (8 * GRANULE), 0);
    assert!(big >= r.base() && big + 5 * GRANULE <= r.base() + r.len());
    assert!(small + GRANULE <= big || big + 5 * GRANULE <= small);
    write_read(big, 5 * GRANULE, 9);
    assert_eq!(r.stats().in_use_bytes, 6 * GRANULE);
    r.free(big, 5 * GRANULE).unwrap();
    // The freed run is mapped: the same request maps nothing new.
    let maps = r.stats().calls.maps;
    let again = r.allocate(5 * GRANULE, 8 * GRANULE).unwrap();
    assert_eq!(again, big);
    assert_eq!(r.stats().calls.maps, maps);
}

#[test]
fn a_physical_granule_keeps_its_bytes_when_remapped_elsewhere() {
    let mut e = HostEmulated::new(64 * GRANULE).unwrap();
    let base = e.reserve(8 * GRANULE).unwrap();
    e.map(base).unwrap();
    // SAFETY: mapped above.
    unsafe { (base as *mut u64).write(0xfeed_beef) };
    e.unmap(base).unwrap();
    let elsewhere = base + 5 * GRANULE;
    e.map(elsewhere).unwrap();
    // SAFETY: mapped above, with the spare (same memfd) granule.
    assert_eq!(unsafe { (elsewhere as *const u64).read() }, 0xfeed_beef);
    assert_eq!(e.calls().creates, 1, "the spare was not reused");
}

#[test]
fn limit_and_headroom_refuse_before_the_driver() {
    let mut r = region(32, 8, Some(3 * GRANULE), 0);
    for _ in 0..3 {
        r.allocate(GRANULE, GRANULE).unwrap();
    }
    assert_eq!(r.allocate(GRANULE, GRANULE), Err(Refusal::Limit));
    assert_eq!(r.stats().refused(Refusal::Limit), 1);
    assert_eq!(r.stats().calls.maps, 3);

    // 8 granules of device, 3 granules of headroom: the 6th map would leave 2.
    let mut r = region(32, 8, None, 3 * GRANULE);
    for _ in 0..5 {
        r.allocate(GRANULE, GRANULE).unwrap();
    }
    assert_eq!(r.allocate(GRANULE, GRANULE), Err(Refusal::Headroom));
    assert_eq!(r.stats().calls.maps, 5);
}

#[test]
fn address_space_runs_out_cleanly() {
    let mut r = region(4, 64, None, 0);
    assert_eq!(
        r.allocate(8 * GRANULE, GRANULE),
        Err(Refusal::NoAddressSpace)
    );
    let a = r.allocate(2 * GRANULE, GRANULE).unwrap();
    r.allocate(2 * GRANULE, GRANULE).unwrap();
    assert_eq!(r.allocate(GRANULE, GRANULE), Err(Refusal::NoAddressSpace));
    r.free(a, 2 * GRANULE).unwrap();
    assert!(r.allocate(GRANULE, GRANULE).is_ok());
}

#[test]
fn injected_faults_refuse_and_leak_nothing() {
    let mut r = region(64, 128, None, 0);
    r.fail_every(3);
    let mut live = Vec::new();
    let mut refused = 0;
    for i in 0..30u64 {
        let bytes = (1 + i % 3) * GRANULE;
        match r.allocate(bytes, GRANULE) {
            Ok(a) => live.push((a, bytes)),
            Err(Refusal::InjectedFault) => refused += 1,
            Err(other) => panic!("unexpected refusal {other:?}"),
        }
    }
    assert!(refused > 0);
    let s = r.stats();
    assert_eq!(s.refused(Refusal::InjectedFault), refused);
    let in_use: u64 = live.iter().map(|&(_, b)| b).sum();
    assert_eq!(s.in_use_bytes, in_use);
    assert_eq!(s.mapped_bytes, s.granules_mapped * GRANULE);
    assert_eq!(
        s.mapped_bytes,
        in_use + s.free_mapped_granules * GRANULE,
        "{s:?}"
    );
    for (a, b) in live {
        r.free(a, b).unwrap();
    }
    r.trim().unwrap();
    let s = r.stats();
    assert_eq!(
        (s.mapped_bytes, s.in_use_bytes, s.granules_mapped),
        (0, 0, 0),
        "{s:?}"
    );
    assert_eq!(
        s.calls.creates, s.calls.releases,
        "a physical granule leaked: {s:?}"
    );
}

#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let mut r = region(16, 64, None, 0);
    let a = r.allocate(2 * GRANULE, GRANULE).unwrap();
    let before = r.stats();
    assert_eq!(r.free(a, GRANULE), Err(Refusal::BadRequest), "wrong size");
    assert_eq!(
        r.free(a + GRANULE, GRANULE),
        Err(Refusal::BadRequest),
        "inside a run"
    );
    assert_eq!(
        r.free(a + 7, 2 * GRANULE),
        Err(Refusal::BadRequest),
        "unaligned"
    );
    assert_eq!(
        r.free(1 << 20, GRANULE),
        Err(Refusal::BadRequest),
        "outside"
    );
    assert_eq!(
        r.allocate(3, GRANULE),
        Err(Refusal::BadRequest),
        "not whole granules"
    );
    let after = r.stats();
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
    assert_eq!(after.refused(Refusal::BadRequest), 5);
    r.free(a, 2 * GRANULE).unwrap();
    assert_eq!(
        r.free(a, 2 * GRANULE),
        Err(Refusal::BadRequest),
        "double free"
    );
}

#[test]
fn trim_gives_every_mapped_byte_back() {
    let mut r = region(32, 64, None, 0);
    let blocks: Vec<u64> = (0..6)
        .map(|_| r.allocate(2 * GRANULE, GRANULE).unwrap())
        .collect();
    for &b in &blocks[..4] {
        r.free(b, 2 * GRANULE).unwrap();
    }
    assert_eq!(r.trim().unwrap(), 8 * GRANULE);
    assert_eq!(r.stats().mapped_bytes, 4 * GRANULE);
    write_read(blocks[4], 2 * GRANULE, 3);
    for &b in &blocks[4..] {
        r.free(b, 2 * GRANULE).unwrap();
    }
    r.trim().unwrap();
    assert_eq!(r.stats().mapped_bytes, 0);
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { granules: u64, align_shift: u32 },
    Free(usize),
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..4, 0u32..3).prop_map(|(granules, align_shift)| Op::Alloc { granules, align_shift }),
        3 => (0usize..64).prop_map(Op::Free),
        1 => Just(Op::Trim),
    ]
}

/// Runs `ops` on a region of 24 granules over a device of 64, its limit
/// `limits.0` granules when spilling, else `limits.1`, checking after each
/// the accounting, that no two live runs overlap, and that no live run's
/// bytes changed. (Debug builds check each run search against counting
/// every start's run: `Region::cheapest_run_by_every_start`.)
fn check_sequence(ops: Vec<Op>, spill: bool, limits: (u64, u64)) -> Result<(), TestCaseError> {
    // Spilling, the limit is lower: runs go to host memory past it.
    let limit = if spill { limits.0 } else { limits.1 } * GRANULE;
    let mut r = spilling_region(24, 64, Some(limit), 0, spill);
    // Each live run and the tag byte written at the start of each of its
    // granules: a granule whose memory moved under a live run shows (the
    // tag is the run's, kept here, not read back from the run: a run whose
    // granules all changed, or a run of one granule, would agree with
    // itself).
    let mut live: Vec<(u64, u64, u8)> = Vec::new();
    let mut tag = 0u8;
    for op in ops {
        match op {
            Op::Alloc {
                granules,
                align_shift,
            } => {
                let bytes = granules * GRANULE;
                let align = GRANULE << align_shift;
                if let Ok(a) = r.allocate(bytes, align) {
                    prop_assert_eq!(a % align, 0);
                    prop_assert!(a >= r.base() && a + bytes <= r.base() + r.len());
                    for &(b, n, _) in &live {
                        prop_assert!(a + bytes <= b || b + n <= a, "overlap");
                    }
                    tag = tag.wrapping_add(1);
                    for g in (a..a + bytes).step_by(GRANULE as usize) {
                        // SAFETY: a granule of the run just handed out.
                        unsafe { (g as *mut u8).write(tag) };
                    }
                    live.push((a, bytes, tag));
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let (a, b, _) = live.swap_remove(i % live.len());
                prop_assert!(r.free(a, b).is_ok());
            }
            Op::Free(_) => {}
            Op::Trim => {
                r.trim().unwrap();
                prop_assert_eq!(r.stats().retired_granules, 0);
                // No spares after a trim: the device memory the
                // backing holds is what the region counts as device
                // memory (a spilled granule counted as the device's,
                // or the reverse, shows).
                prop_assert_eq!(
                    r.backing().free_device_memory(),
                    Some(64 * GRANULE - r.stats().mapped_bytes)
                );
            }
        }
        for &(a, bytes, tag) in &live {
            for g in (a..a + bytes).step_by(GRANULE as usize) {
                // SAFETY: a granule of a live run.
                let byte = unsafe { (g as *const u8).read() };
                prop_assert_eq!(byte, tag, "a live run's bytes changed");
            }
        }
        let s = r.stats();
        let in_use: u64 = live.iter().map(|&(_, b, _)| b).sum();
        prop_assert_eq!(s.in_use_bytes, in_use);
        prop_assert_eq!(s.live_runs, live.len() as u64);
        prop_assert_eq!(
            s.mapped_bytes + s.spilled_bytes,
            in_use + s.free_mapped_granules * GRANULE
        );
        prop_assert_eq!(
            s.granules_mapped * GRANULE,
            s.mapped_bytes + s.spilled_bytes
        );
        prop_assert!(s.mapped_bytes <= limit);
        prop_assert!(spill || s.spilled_bytes == 0);
        // Spilled granules in use are live runs' granules.
        let spilled_in_use = r.spilled_in_use().count() as u64 * GRANULE;
        prop_assert!(spilled_in_use <= s.spilled_bytes && spilled_in_use <= in_use);
    }
    Ok(())
}

/// A tighter limit and larger runs than `op`: more of the runs are made of
/// free granules moved from elsewhere, so the region holds `Retired`
/// granules whose memory serves another address — two of them on one
/// physical granule, or one beside the granule that holds its memory —
/// that a run search must tell apart.
fn tight_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..7, 0u32..2).prop_map(|(granules, align_shift)| Op::Alloc { granules, align_shift }),
        4 => (0usize..64).prop_map(Op::Free),
        1 => Just(Op::Trim),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_sequences_keep_exact_accounting(
        ops in proptest::collection::vec(op(), 1..60),
        spill in any::<bool>(),
    ) {
        // Spilling, the limit is lower: runs go to host memory past it.
        check_sequence(ops, spill, (6, 20))?;
    }

    #[test]
    fn random_sequences_at_a_tight_limit_keep_exact_accounting(
        ops in proptest::collection::vec(tight_op(), 1..160),
        spill in any::<bool>(),
    ) {
        check_sequence(ops, spill, (4, 10))?;
    }
}

/// Tags each granule of `addr..addr + bytes` with `seed` (its first byte).
fn tag(addr: u64, bytes: u64, seed: u8) {
    for g in (addr..addr + bytes).step_by(GRANULE as usize) {
        // SAFETY: a granule of a run the region handed out to the test.
        unsafe { (g as *mut u8).write(seed) };
    }
}

/// Whether every granule of `addr..addr + bytes` still has tag `seed`.
fn tagged(addr: u64, bytes: u64, seed: u8) -> bool {
    // SAFETY: as in `tag`.
    (addr..addr + bytes)
        .step_by(GRANULE as usize)
        .all(|g| unsafe { (g as *const u8).read() } == seed)
}

#[test]
fn scattered_free_granules_serve_a_run_when_memory_is_short() {
    // A device of 8 granules, all mapped as single granules; every other
    // one freed: 4 free granules, none next to another, and no memory left.
    let mut r = region(32, 8, None, 0);
    let singles: Vec<u64> = (0..8)
        .map(|_| r.allocate(GRANULE, GRANULE).unwrap())
        .collect();
    for (i, &a) in singles.iter().enumerate() {
        tag(a, GRANULE, i as u8);
    }
    for &a in singles.iter().skip(1).step_by(2) {
        r.free(a, GRANULE).unwrap();
    }
    // Before free granules could move, this was refused (Headroom) with
    // 8 MiB free.
    let run = r
        .allocate(3 * GRANULE, GRANULE)
        .expect("a run from free granules");
    write_read(run, 3 * GRANULE, 9);
    let s = r.stats();
    assert_eq!(s.mapped_bytes, 8 * GRANULE, "no new memory: {s:?}");
    // The run's window holds one of the free granules; the other two move.
    assert_eq!(
        (s.relocations, s.retired_granules, s.calls.remaps),
        (2, 2, 2),
        "{s:?}"
    );
    assert_eq!((s.calls.creates, s.calls.maps), (8, 8), "{s:?}");
    for (i, &a) in singles.iter().enumerate().step_by(2) {
        assert!(tagged(a, GRANULE, i as u8), "a live granule changed");
    }
    // One free granule is left: a run of 2 is refused for memory, not for
    // address space.
    assert_eq!(r.allocate(2 * GRANULE, GRANULE), Err(Refusal::Headroom));
    // Freed, the run's granules are found again, its old addresses are
    // taken back by `trim`, and everything is given back.
    r.free(run, 3 * GRANULE).unwrap();
    let again = r.allocate(2 * GRANULE, GRANULE).unwrap();
    r.free(again, 2 * GRANULE).unwrap();
    for &a in singles.iter().step_by(2) {
        r.free(a, GRANULE).unwrap();
    }
    assert_eq!(r.trim().unwrap(), 8 * GRANULE);
    let s = r.stats();
    assert_eq!((s.mapped_bytes, s.retired_granules), (0, 0), "{s:?}");
    assert_eq!(
        s.calls.unmaps,
        8 + 2,
        "every granule and every alias: {s:?}"
    );
}

#[test]
fn a_steady_churn_at_the_edge_of_memory_is_served() {
    // The churn the GPU's stress kernel makes of large blocks (1 to 5 MiB:
    // 1 to 3 granules) at up to 97 % of a device of 256 granules, with
    // slabs (single granules) taken along the way, in the default
    // reservation (twice the device). Before free granules could move, 225
    // requests were refused (the first with 24 granules free and none
    // three in a row).
    let backing = HostEmulated::new(256 * GRANULE).expect("emulated device");
    let mut r = Region::new(backing, RegionConfig::default()).expect("reserve");
    assert_eq!(r.len(), 512 * GRANULE);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut refusals = Vec::new();
    for step in 0..100_000u64 {
        if live.len() == 100 {
            let (a, b) = live.swap_remove(next(100) as usize);
            r.free(a, b).unwrap();
        }
        let granules = match next(4) {
            0 => 1,
            _ if next(3) == 0 => 3,
            _ => 2,
        };
        match r.allocate(granules * GRANULE, GRANULE) {
            Ok(a) => live.push((a, granules * GRANULE)),
            Err(why) => refusals.push((step, why, r.stats())),
        }
        if step % 500 == 0 && step < 10_000 {
            r.allocate(GRANULE, GRANULE).expect("a slab");
        }
    }
    let s = r.stats();
    assert!(
        refusals.is_empty(),
        "{} refused, the first: {:?}",
        refusals.len(),
        refusals[0]
    );
    assert!(
        s.relocations > 0,
        "the churn never needed a granule moved: {s:?}"
    );
    assert!(s.peak_mapped_bytes <= 256 * GRANULE, "{s:?}");
    for (a, b) in live {
        r.free(a, b).unwrap();
    }
    r.trim().unwrap();
    let s = r.stats();
    assert_eq!(
        (s.retired_granules, s.in_use_bytes),
        (0, 20 * GRANULE),
        "{s:?}"
    );
}

/// Spilling, a region maps host memory past its device limit: the runs work
/// (their bytes kept), the device's memory stays within the limit, spilled
/// bytes are counted apart, and `trim` gives them back first.
#[test]
fn a_spilling_region_maps_host_memory_past_the_limit_and_trims_it() {
    let mut r = spilling_region(32, 64, Some(3 * GRANULE), 0, true);
    let runs: Vec<u64> = (0..5)
        .map(|_| r.allocate(GRANULE, GRANULE).expect("spilled"))
        .collect();
    let big = r
        .allocate(4 * GRANULE, GRANULE)
        .expect("a spilled large run");
    for (k, &a) in runs.iter().enumerate() {
        write_read(a, GRANULE, k as u8);
    }
    write_read(big, 4 * GRANULE, 9);
    let s = r.stats();
    assert_eq!(s.mapped_bytes, 3 * GRANULE);
    assert_eq!(s.spilled_bytes, 6 * GRANULE);
    assert_eq!(s.peak_spilled_bytes, 6 * GRANULE);
    assert_eq!(s.refused(Refusal::Limit), 0);
    assert_eq!(s.calls.host_maps, 6);
    assert_eq!(r.spilled_in_use().count(), 6);
    // The emulated device holds 3 granules; the host the rest.
    assert_eq!(
        r.backing().free_device_memory(),
        Some(61 * GRANULE),
        "host granules took device memory"
    );
    for a in runs {
        r.free(a, GRANULE).unwrap();
    }
    r.free(big, 4 * GRANULE).unwrap();
    assert_eq!(r.spilled_in_use().count(), 0);
    assert_eq!(r.trim().unwrap(), 9 * GRANULE);
    let s = r.stats();
    assert_eq!(
        (s.mapped_bytes, s.spilled_bytes, s.granules_mapped),
        (0, 0, 0)
    );
}

/// A backing whose host has `available` bytes free of `total`, and whose
/// driver maps `device_maps` granules of device memory before it fails
/// (as a full GPU's does); otherwise the emulated device.
struct ShortHost {
    inner: HostEmulated,
    host: HostMemory,
    device_maps: u64,
}

impl Backing for ShortHost {
    fn reserve(&mut self, bytes: u64) -> Result<u64, BackingError> {
        self.inner.reserve(bytes)
    }
    fn map(&mut self, addr: u64) -> Result<(), BackingError> {
        if self.device_maps == 0 {
            return Err(BackingError::Unsupported("out of device memory".into()));
        }
        self.device_maps -= 1;
        self.inner.map(addr)
    }
    fn map_host(&mut self, addr: u64) -> Result<(), BackingError> {
        self.inner.map_host(addr)
    }
    fn unmap(&mut self, addr: u64) -> Result<(), BackingError> {
        self.inner.unmap(addr)
    }
    fn remap(&mut self, from: u64, to: u64) -> Result<(), BackingError> {
        self.inner.remap(from, to)
    }
    fn adopt(&mut self, alias: u64, owner: u64) -> Result<(), BackingError> {
        self.inner.adopt(alias, owner)
    }
    fn release_spares(&mut self) -> Result<u64, BackingError> {
        self.inner.release_spares()
    }
    fn free_reservation(&mut self) -> Result<(), BackingError> {
        self.inner.free_reservation()
    }
    fn free_device_memory(&self) -> Option<u64> {
        self.inner.free_device_memory()
    }
    fn device_memory(&self) -> u64 {
        self.inner.device_memory()
    }
    fn calls(&self) -> DriverCalls {
        self.inner.calls()
    }
    fn host_memory(&self) -> Option<HostMemory> {
        Some(self.host)
    }
}

/// A spilling region of 32 granules capped at `limit`, on an emulated
/// device whose driver maps `device_maps` granules before it fails, and a
/// host of 64 GiB with room for one granule above its spill floor.
fn short_host_region(device_maps: u64, limit: Option<u64>) -> Region<ShortHost> {
    let total = 64u64 << 30;
    let floor = spill_floor(HostMemory {
        available: 0,
        total,
    });
    let backing = ShortHost {
        inner: HostEmulated::new(64 * GRANULE).expect("emulated device"),
        host: HostMemory {
            available: floor + GRANULE,
            total,
        },
        device_maps,
    };
    Region::new(
        backing,
        RegionConfig {
            reserve: Some(32 * GRANULE),
            limit,
            headroom: 0,
            spill: true,
        },
    )
    .expect("reserve")
}

/// A spill that would leave the host less than max(4 GiB, a tenth of its
/// memory) free is refused: the request gets the device's refusal, and
/// the refused spill is counted.
#[test]
fn a_spill_that_would_starve_the_host_is_refused() {
    // 64 GiB of host memory: the floor is 6.4 GiB. 6.4 GiB + one granule
    // free: one spill fits, the second does not.
    let total = 64u64 << 30;
    let floor = spill_floor(HostMemory {
        available: 0,
        total,
    });
    assert_eq!(floor, total / 10);
    assert_eq!(
        spill_floor(HostMemory {
            available: 0,
            total: 8 << 30
        }),
        4 << 30,
        "at least 4 GiB"
    );
    let mut r = short_host_region(u64::MAX, Some(GRANULE));
    r.allocate(GRANULE, GRANULE).expect("device memory");
    // The host's figure does not move in this test: each spill is checked
    // alone. One granule fits above the floor, two do not.
    r.allocate(GRANULE, GRANULE).expect("one spilled granule");
    assert_eq!(r.allocate(2 * GRANULE, GRANULE), Err(Refusal::Limit));
    let s = r.stats();
    assert_eq!(s.spilled_bytes, GRANULE);
    assert_eq!(s.spills_refused, 1);
    assert_eq!(s.refused(Refusal::Limit), 1);
}

/// The driver refusing device memory part-way through a run spills the
/// rest of the run only if the host has room for all of it: here for one
/// granule, so a run of three whose first maps on the device is refused
/// (the driver's refusal), and a run of one is spilled.
#[test]
fn a_driver_refusal_spills_only_what_the_host_can_hold() {
    let mut r = short_host_region(1, None);
    assert_eq!(r.allocate(3 * GRANULE, GRANULE), Err(Refusal::Driver));
    let s = r.stats();
    assert_eq!((s.spilled_bytes, s.spills_refused), (0, 1), "{s:?}");
    // The granule the driver mapped stays mapped and free.
    assert_eq!(s.mapped_bytes, GRANULE);
    let a = r.allocate(GRANULE, GRANULE).expect("the free granule");
    let b = r.allocate(GRANULE, GRANULE).expect("one spilled granule");
    assert!(!r.is_spilled(a) && r.is_spilled(b));
    assert_eq!(r.stats().spilled_bytes, GRANULE);
}

/// A refusal is told in the driver's words only when the driver refused:
/// after a driver refusal, a refusal for want of address space carries no
/// message (the heap's refusal record took the region's last driver
/// message, whatever the reason; a review, 2026-12-07).
#[test]
fn only_a_driver_refusal_carries_the_drivers_message() {
    let mut r = short_host_region(0, None);
    assert_eq!(r.allocate(3 * GRANULE, GRANULE), Err(Refusal::Driver));
    let said = r.driver_error_for(Refusal::Driver).map(str::to_string);
    assert!(
        said.as_deref()
            .is_some_and(|m| m.contains("out of device memory")),
        "{said:?}"
    );
    assert_eq!(
        r.allocate(64 * GRANULE, GRANULE),
        Err(Refusal::NoAddressSpace)
    );
    assert_eq!(r.driver_error_for(Refusal::NoAddressSpace), None);
    assert!(
        r.last_driver_error().is_some(),
        "the message itself is kept"
    );
}
