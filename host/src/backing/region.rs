//! `Region`: one reserved address range carved into granules, over a
//! [`Backing`].
//!
//! ```text
//!   base                                                      base + len
//!   │ Used Used │ Free │ Unmapped … │ Used (run of 3)    │ Free │ Unmapped │
//!   └── a run ──┘  mapped, reusable    a large block       ...
//!                  without the driver
//! ```
//!
//! Invariants (checked by the tests' model):
//! `mapped_bytes = GRANULE · |Used ∪ Free|`, `in_use_bytes = GRANULE · |Used|`,
//! every `Used` granule belongs to exactly one run in `runs`, runs never overlap,
//! and every `Free` granule is in `free_granules`.

use std::collections::{BTreeSet, HashMap};

use super::{Backing, BackingError, DriverCalls, GRANULE};
use warpalloc_device::rpc::wire::Status;

/// Sizes and limits of a region.
#[derive(Clone, Copy, Debug, Default)]
pub struct RegionConfig {
    /// Address space to reserve (default: the smaller of 64 GiB and twice the
    /// device memory).
    pub reserve: Option<u64>,
    /// The most bytes mapped at once (default: no limit but the device).
    pub limit: Option<u64>,
    /// Device memory to leave free, checked before mapping.
    pub headroom: u64,
}

/// Why a request was refused (each maps to a wire status code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The region's limit would be exceeded.
    Limit,
    /// The device would keep less free memory than the headroom.
    Headroom,
    /// No free run of the reservation is large enough.
    NoAddressSpace,
    /// The driver (or OS) failed to create or map memory.
    Driver,
    /// A fault injected on purpose.
    InjectedFault,
    /// A malformed request, or a free of something not handed out.
    BadRequest,
}

impl Refusal {
    /// The RPC status for this refusal.
    pub fn status(self) -> Status {
        match self {
            Refusal::Limit => Status::Limit,
            Refusal::Headroom => Status::Headroom,
            Refusal::NoAddressSpace => Status::NoAddressSpace,
            Refusal::Driver => Status::Driver,
            Refusal::InjectedFault => Status::InjectedFault,
            Refusal::BadRequest => Status::BadRequest,
        }
    }

    /// Whether the refusal may pass without memory coming back to the
    /// region: the headroom check and a driver error depend on what else
    /// holds device memory (another process may free some), an injected
    /// fault on the schedule. The heap forgets such a refusal before its
    /// next launch (`Heap::forget_refusal`).
    pub fn may_pass(self) -> bool {
        match self {
            Refusal::Headroom | Refusal::Driver | Refusal::InjectedFault => true,
            Refusal::Limit | Refusal::NoAddressSpace | Refusal::BadRequest => false,
        }
    }

    /// Every refusal, in status-code order.
    pub const ALL: [Refusal; 6] = [
        Refusal::Limit,
        Refusal::Headroom,
        Refusal::NoAddressSpace,
        Refusal::Driver,
        Refusal::InjectedFault,
        Refusal::BadRequest,
    ];

    fn index(self) -> usize {
        self.status() as usize - 1
    }
}

/// What a region has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionStats {
    /// Bytes mapped now (in use or free).
    pub mapped_bytes: u64,
    /// The most ever mapped.
    pub peak_mapped_bytes: u64,
    /// Bytes handed out now.
    pub in_use_bytes: u64,
    /// The most ever handed out.
    pub peak_in_use_bytes: u64,
    /// Granules mapped now.
    pub granules_mapped: u64,
    /// Mapped granules free for reuse now.
    pub free_mapped_granules: u64,
    /// Runs handed out now (slabs and large blocks).
    pub live_runs: u64,
    /// Successful allocations.
    pub allocations: u64,
    /// Successful frees.
    pub frees: u64,
    /// Refusals, indexed like [`Refusal::ALL`].
    pub refusals: [u64; 6],
    /// Driver calls made.
    pub calls: DriverCalls,
}

impl RegionStats {
    /// Refusals of one reason.
    pub fn refused(&self, why: Refusal) -> u64 {
        self.refusals[why.index()]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unmapped,
    Free,
    Used,
}

/// A reserved range of address space handed out in runs of granules.
pub struct Region<B: Backing> {
    backing: B,
    base: u64,
    states: Vec<State>,
    /// First granule of each run handed out → its length in granules.
    runs: HashMap<usize, usize>,
    free_granules: BTreeSet<usize>,
    limit: u64,
    headroom: u64,
    fail_every: u64,
    map_attempts: u64,
    stats: RegionStats,
    last_driver_error: Option<String>,
}

impl<B: Backing> Region<B> {
    /// Reserves the region's address space.
    pub fn new(mut backing: B, config: RegionConfig) -> Result<Region<B>, BackingError> {
        let reserve = config
            .reserve
            .unwrap_or_else(|| (64 << 30).min(2 * backing.device_memory()))
            .min(warpalloc_device::heap::MAX_REGION);
        let granules = (reserve / GRANULE).max(1);
        let base = backing.reserve(granules * GRANULE)?;
        Ok(Region {
            backing,
            base,
            states: vec![State::Unmapped; granules as usize],
            runs: HashMap::new(),
            free_granules: BTreeSet::new(),
            limit: config.limit.unwrap_or(u64::MAX),
            headroom: config.headroom,
            fail_every: 0,
            map_attempts: 0,
            stats: RegionStats::default(),
            last_driver_error: None,
        })
    }

    /// The first byte of the region.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of the region.
    pub fn len(&self) -> u64 {
        self.states.len() as u64 * GRANULE
    }

    /// Whether the region has no granule (never: it has at least one).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Whether `addr..addr + bytes` lies in mapped granules of the region
    /// (what the host may read through the device interface).
    pub fn is_mapped(&self, addr: u64, bytes: u64) -> bool {
        let Some(offset) = addr.checked_sub(self.base) else {
            return false;
        };
        let Some(end) = offset.checked_add(bytes.max(1)) else {
            return false;
        };
        if end > self.len() {
            return false;
        }
        let (first, last) = (offset / GRANULE, (end - 1) / GRANULE);
        (first..=last).all(|g| self.states[g as usize] != State::Unmapped)
    }

    /// The backing.
    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// Makes every `n`-th mapping attempt fail (0: none), for fault
    /// injection.
    pub fn fail_every(&mut self, n: u64) {
        self.fail_every = n;
    }

    /// The driver's last error message, if a mapping failed.
    pub fn last_driver_error(&self) -> Option<&str> {
        self.last_driver_error.as_deref()
    }

    /// What the region has done so far.
    pub fn stats(&self) -> RegionStats {
        RegionStats {
            calls: self.backing.calls(),
            ..self.stats
        }
    }

    fn refuse(&mut self, why: Refusal) -> Refusal {
        self.stats.refusals[why.index()] += 1;
        why
    }

    fn addr(&self, granule: usize) -> u64 {
        self.base + granule as u64 * GRANULE
    }

    /// Where a run of `n` granules aligned to `step` granules could go: the start
    /// with the fewest granules still to map (a fully mapped run needs no
    /// driver call), or `None`.
    fn find_run(&self, n: usize, align: u64) -> Option<usize> {
        if n == 1 && align == GRANULE {
            if let Some(&i) = self.free_granules.first() {
                return Some(i);
            }
            return self.states.iter().position(|&s| s == State::Unmapped);
        }
        let step = (align / GRANULE).max(1) as usize;
        let misalign = ((self.base % align) / GRANULE) as usize;
        let first = (step - misalign % step) % step;
        let mut best: Option<(usize, usize)> = None;
        let mut start = first;
        while start + n <= self.states.len() {
            let run = &self.states[start..start + n];
            if let Some(used) = run.iter().rposition(|&s| s == State::Used) {
                // Skip past the used granule, to the next aligned start.
                let after = start + used + 1;
                start = first + (after.saturating_sub(first)).div_ceil(step) * step;
                continue;
            }
            let to_map = run.iter().filter(|&&s| s == State::Unmapped).count();
            if best.is_none_or(|(_, cost)| to_map < cost) {
                best = Some((start, to_map));
                if to_map == 0 {
                    break;
                }
            }
            start += step;
        }
        best.map(|(start, _)| start)
    }

    /// A run of `bytes` (a positive multiple of [`GRANULE`]) aligned to `align`
    /// (a power of two; at least [`GRANULE`] is used), mapping what is not
    /// mapped yet; its address, or why not. Granules mapped before a refusal
    /// stay mapped and free.
    pub fn allocate(&mut self, bytes: u64, align: u64) -> Result<u64, Refusal> {
        if bytes == 0 || !bytes.is_multiple_of(GRANULE) || !align.is_power_of_two() {
            return Err(self.refuse(Refusal::BadRequest));
        }
        let align = align.max(GRANULE);
        let n = usize::try_from(bytes / GRANULE).unwrap_or(usize::MAX);
        if n > self.states.len() {
            return Err(self.refuse(Refusal::NoAddressSpace));
        }
        let Some(start) = self.find_run(n, align) else {
            return Err(self.refuse(Refusal::NoAddressSpace));
        };
        let to_map: Vec<usize> = (start..start + n)
            .filter(|&i| self.states[i] == State::Unmapped)
            .collect();
        let new_bytes = to_map.len() as u64 * GRANULE;
        if self.stats.mapped_bytes + new_bytes > self.limit {
            return Err(self.refuse(Refusal::Limit));
        }
        if new_bytes > 0
            && let Some(free) = self.backing.free_device_memory()
            && free < new_bytes.saturating_add(self.headroom)
        {
            return Err(self.refuse(Refusal::Headroom));
        }
        for i in to_map {
            self.map_attempts += 1;
            if self.fail_every != 0 && self.map_attempts.is_multiple_of(self.fail_every) {
                return Err(self.refuse(Refusal::InjectedFault));
            }
            if let Err(e) = self.backing.map(self.addr(i)) {
                self.last_driver_error = Some(e.to_string());
                return Err(self.refuse(Refusal::Driver));
            }
            self.states[i] = State::Free;
            self.free_granules.insert(i);
            self.stats.mapped_bytes += GRANULE;
            self.stats.granules_mapped += 1;
            self.stats.free_mapped_granules += 1;
            self.stats.peak_mapped_bytes =
                self.stats.peak_mapped_bytes.max(self.stats.mapped_bytes);
        }
        for i in start..start + n {
            self.states[i] = State::Used;
            self.free_granules.remove(&i);
        }
        self.stats.free_mapped_granules -= n as u64;
        self.runs.insert(start, n);
        self.stats.in_use_bytes += bytes;
        self.stats.peak_in_use_bytes = self.stats.peak_in_use_bytes.max(self.stats.in_use_bytes);
        self.stats.live_runs += 1;
        self.stats.allocations += 1;
        Ok(self.addr(start))
    }

    /// Takes back the run at `addr` of `bytes`; it stays mapped for reuse.
    /// A run the region did not hand out (or a wrong size) is refused and
    /// changes nothing.
    pub fn free(&mut self, addr: u64, bytes: u64) -> Result<(), Refusal> {
        let offset = addr.wrapping_sub(self.base);
        if addr < self.base || !offset.is_multiple_of(GRANULE) || offset >= self.len() {
            return Err(self.refuse(Refusal::BadRequest));
        }
        let start = (offset / GRANULE) as usize;
        let n = match self.runs.get(&start) {
            Some(&n) if n as u64 * GRANULE == bytes => n,
            _ => return Err(self.refuse(Refusal::BadRequest)),
        };
        self.runs.remove(&start);
        for i in start..start + n {
            self.states[i] = State::Free;
            self.free_granules.insert(i);
        }
        self.stats.free_mapped_granules += n as u64;
        self.stats.in_use_bytes -= bytes;
        self.stats.live_runs -= 1;
        self.stats.frees += 1;
        Ok(())
    }

    /// Unmaps and releases every mapped granule that is free. Only while no
    /// kernel that uses the region runs (the caller's duty). Returns the
    /// bytes given back.
    pub fn trim(&mut self) -> Result<u64, BackingError> {
        let free: Vec<usize> = self.free_granules.iter().copied().collect();
        let mut released = 0;
        for i in free {
            self.backing.unmap(self.addr(i))?;
            self.states[i] = State::Unmapped;
            self.free_granules.remove(&i);
            self.stats.mapped_bytes -= GRANULE;
            self.stats.granules_mapped -= 1;
            self.stats.free_mapped_granules -= 1;
            released += GRANULE;
        }
        self.backing.release_spares()?;
        Ok(released)
    }
}

impl<B: Backing> Drop for Region<B> {
    fn drop(&mut self) {
        // Nothing to report to: the backing's own drop repeats this and the
        // process's mappings go with it at exit.
        let _ = self.backing.free_reservation();
    }
}
