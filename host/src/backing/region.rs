//! `Region`: one reserved address range carved into granules, over a
//! [`Backing`].
//!
//! ```text
//!   base                                                             base + len
//!   │ Used Used │ Free │ Unmapped … │ Used (run of 3)    │ Retired │ Unmapped │
//!   └── a run ──┘  mapped, reusable    a large block       its memory moved
//!                  without the driver                      to another address
//! ```
//!
//! Where a run goes (`find_run`): the smallest stretch of `Free` granules
//! that holds it (best fit: no driver call, and longer stretches stay whole
//! for longer runs); else the first place with the fewest granules still to
//! map. Those are backed by new physical memory — or, when the limit or the
//! device's free memory would refuse that, by `Free` granules elsewhere
//! moved there (`Backing::remap`: the physical granule is mapped at the new
//! address too, and its old one is `Retired` until `trim` unmaps it). So
//! memory freed in scattered granules serves a run of them, and a region
//! refuses for want of memory only when it has none left: large blocks
//! freed and taken again in other sizes do not strand it. A `Retired`
//! granule costs address space only (the reservation is twice the
//! device's memory by default), until the next `trim`.
//!
//! With `spill` (see the backing's docs), a granule that device memory has
//! no room for is mapped with host memory instead, and marked `spilled`
//! (the mark moves with its physical memory, as `Retired` addresses do).
//!
//! Invariants (checked by the tests' model):
//! `mapped_bytes = GRANULE · |(Used ∪ Free) ∖ spilled|` (device memory: a
//! `Retired` granule's is counted where it moved),
//! `spilled_bytes = GRANULE · |(Used ∪ Free) ∩ spilled|`,
//! `in_use_bytes = GRANULE · |Used|`,
//! every `Used` granule belongs to exactly one run in `runs`, runs never overlap,
//! every `Free` granule is in `free_granules`, and
//! `retired_granules = |Retired|`.

use std::collections::{BTreeSet, HashMap};

use super::free_set::{FreeSet, aligned_from};
use super::{Backing, BackingError, DriverCalls, GRANULE};
use warpalloc_device::rpc::wire::Status;

/// Sizes and limits of a region.
#[derive(Clone, Copy, Debug, Default)]
pub struct RegionConfig {
    /// Address space to reserve (default: twice the device memory, at most
    /// `MAX_REGION`, 512 GiB; relocated granules' old addresses stay
    /// reserved until `trim`).
    pub reserve: Option<u64>,
    /// The most bytes mapped at once (default: no limit but the device).
    pub limit: Option<u64>,
    /// Device memory to leave free, checked before mapping.
    pub headroom: u64,
    /// Map host memory where the device's is refused (see the backing's
    /// docs).
    pub spill: bool,
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

    /// What the refusal is, in words (for reports).
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Limit => "the heap's limit",
            Refusal::Headroom => "the device's headroom",
            Refusal::NoAddressSpace => "no address space",
            Refusal::Driver => "a driver error",
            Refusal::InjectedFault => "an injected fault",
            Refusal::BadRequest => "a bad request",
        }
    }
}

/// What a region has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionStats {
    /// Bytes of device memory mapped now (in use or free).
    pub mapped_bytes: u64,
    /// The most ever mapped.
    pub peak_mapped_bytes: u64,
    /// Bytes of host memory mapped now in place of device memory (spill).
    pub spilled_bytes: u64,
    /// The most ever spilled.
    pub peak_spilled_bytes: u64,
    /// The most device and host memory ever mapped at once (mapped and
    /// spilled together: the two peaks apart need not be one moment's).
    pub peak_backed_bytes: u64,
    /// Spills refused because the host would have kept less free memory
    /// than `spill_floor` (the request then got the device's refusal).
    pub spills_refused: u64,
    /// Bytes handed out now.
    pub in_use_bytes: u64,
    /// The most ever handed out.
    pub peak_in_use_bytes: u64,
    /// Granules mapped now (device and host memory).
    pub granules_mapped: u64,
    /// Mapped granules free for reuse now.
    pub free_mapped_granules: u64,
    /// Addresses left mapped to a physical granule that moved to another
    /// address, until `trim` (address space, not memory).
    pub retired_granules: u64,
    /// Free physical granules moved to where a run needed them, because
    /// new memory would have been refused.
    pub relocations: u64,
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
    /// Still mapped, to a physical granule that serves another address now
    /// (`Backing::remap`); unusable until `trim` unmaps it.
    Retired,
}

/// What a granule is to a run that would hold it (`Region::kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// To be mapped.
    Unmapped,
    /// Mapped and free: taken as it is.
    Free,
    /// `Used`, or `Retired` whose physical memory serves another address
    /// in use: no run may hold it.
    Taken,
    /// `Retired` whose physical memory is free: adopted, unless its owner
    /// or another of its aliases is in the run too (`last_taken`).
    Adoptable,
}

/// The granules of one run (`start..start + len`) by kind, moved along the
/// region by `move_to`, and what makes its `Adoptable` granules taken: two
/// of them with one owner (one physical granule cannot serve two
/// addresses of a run), or one whose owner is in the run (its memory is
/// that address's already). The run is clear when it holds no `Taken`
/// granule and neither of those: `last_taken`'s rule, kept up as the
/// window slides instead of walked for each start.
///
/// Invariants: `count[k]` = granules of the run of kind `k`;
/// `owners[o]` = `Adoptable` granules of the run whose owner is `o` (no
/// zero entry); `shared` = Σ (`owners[o]` − 1); `inside` = `Adoptable`
/// granules of the run whose owner is in the run.
#[derive(Default)]
struct Window {
    start: usize,
    len: usize,
    count: [usize; 4],
    owners: HashMap<usize, usize>,
    shared: usize,
    inside: usize,
}

impl Window {
    /// The window at `start..start + n` (`start + n` within the region):
    /// slid there granule by granule when that is shorter than counting
    /// it afresh.
    fn move_to<B: Backing>(&mut self, region: &Region<B>, start: usize, n: usize) {
        if self.len != n || start < self.start || start - self.start >= n {
            *self = Window {
                start,
                len: 0,
                ..Window::default()
            };
            for g in start..start + n {
                self.enter(region, g);
            }
            return;
        }
        while self.start < start {
            let g = self.start;
            self.leave(region, g);
            self.enter(region, g + n);
        }
    }

    /// `Unmapped` granules of the run, or `None` if it holds a granule no
    /// run can take.
    fn to_map(&self) -> Option<usize> {
        let clear = self.count[Kind::Taken as usize] == 0 && self.shared == 0 && self.inside == 0;
        clear.then_some(self.count[Kind::Unmapped as usize])
    }

    fn holds(&self, g: usize) -> bool {
        (self.start..self.start + self.len).contains(&g)
    }

    /// Granule `g`, just past the run's end, joins it.
    fn enter<B: Backing>(&mut self, region: &Region<B>, g: usize) {
        self.len += 1;
        let kind = region.kind(g);
        self.count[kind as usize] += 1;
        if self.owners.is_empty() && kind != Kind::Adoptable {
            return;
        }
        // The run's `Adoptable` granules whose owner `g` is are in now.
        self.inside += self.owners.get(&g).copied().unwrap_or(0);
        if kind == Kind::Adoptable {
            let owner = region.owner_of[&g];
            let same = self.owners.entry(owner).or_insert(0);
            *same += 1;
            if *same > 1 {
                self.shared += 1;
            }
            if self.holds(owner) {
                self.inside += 1;
            }
        }
    }

    /// Granule `g`, the run's first, leaves it.
    fn leave<B: Backing>(&mut self, region: &Region<B>, g: usize) {
        let kind = region.kind(g);
        self.count[kind as usize] -= 1;
        if !self.owners.is_empty() {
            if kind == Kind::Adoptable {
                let owner = region.owner_of[&g];
                // (An owner is never `Retired`: `owner != g`.)
                if self.holds(owner) {
                    self.inside -= 1;
                }
                let same = self.owners.get_mut(&owner).expect("counted at its entry");
                *same -= 1;
                if *same > 0 {
                    self.shared -= 1;
                } else {
                    self.owners.remove(&owner);
                }
            }
            // The run's `Adoptable` granules whose owner `g` is are out.
            self.inside -= self.owners.get(&g).copied().unwrap_or(0);
        }
        self.start += 1;
        self.len -= 1;
    }
}

/// The largest region whose every run search debug builds check against
/// counting each start's run (`Region::cheapest_run_by_every_start`): the
/// tests' regions, not a GPU's.
#[cfg(debug_assertions)]
const CHECKED_GRANULES: usize = 4096;

/// A reserved range of address space handed out in runs of granules.
pub struct Region<B: Backing> {
    backing: B,
    base: u64,
    states: Vec<State>,
    /// First granule of each run handed out → its length in granules.
    runs: HashMap<usize, usize>,
    free_granules: FreeSet,
    /// A `Retired` granule → the granule its physical memory is at now (never
    /// `Retired` itself).
    owner_of: HashMap<usize, usize>,
    /// A granule → the `Retired` granules mapped to its physical memory.
    aliases: HashMap<usize, Vec<usize>>,
    /// Granules whose physical memory is host memory (spilled).
    spilled: BTreeSet<usize>,
    /// No granule below is `Unmapped`: where a lone granule's search for
    /// one starts (moved up past the granules mapped since, down by a
    /// `trim`), so that a heap that grows a slab at a time does not pass
    /// every granule it holds on each slab's request.
    unmapped_from: usize,
    limit: u64,
    headroom: u64,
    spill: bool,
    fail_every: u64,
    map_attempts: u64,
    stats: RegionStats,
    last_driver_error: Option<String>,
    /// The last `allocate`'s refusal as counted, for `forgive` to take back.
    last_refusal: Option<Counted>,
}

impl<B: Backing> Region<B> {
    /// Reserves the region's address space.
    pub fn new(mut backing: B, config: RegionConfig) -> Result<Region<B>, BackingError> {
        let reserve = config
            .reserve
            .unwrap_or_else(|| backing.device_memory().saturating_mul(2))
            .min(warpalloc_device::heap::MAX_REGION);
        let granules = (reserve / GRANULE).max(1);
        let base = backing.reserve(granules * GRANULE)?;
        Ok(Region {
            backing,
            base,
            states: vec![State::Unmapped; granules as usize],
            runs: HashMap::new(),
            free_granules: FreeSet::default(),
            owner_of: HashMap::new(),
            aliases: HashMap::new(),
            spilled: BTreeSet::new(),
            unmapped_from: 0,
            limit: config.limit.unwrap_or(u64::MAX),
            headroom: config.headroom,
            spill: config.spill,
            fail_every: 0,
            map_attempts: 0,
            stats: RegionStats::default(),
            last_driver_error: None,
            last_refusal: None,
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

    /// Whether `addr` starts a run of `bytes` that the region handed out
    /// and that is live (not freed): a slab the host may write a header
    /// into. Unlike [`Region::is_mapped`], not an address a run moved
    /// away from (whose memory now serves another address), nor a free
    /// granule.
    pub fn is_run(&self, addr: u64, bytes: u64) -> bool {
        addr.checked_sub(self.base)
            .filter(|offset| offset.is_multiple_of(GRANULE))
            .and_then(|offset| usize::try_from(offset / GRANULE).ok())
            .is_some_and(|g| {
                self.runs
                    .get(&g)
                    .is_some_and(|&n| n as u64 * GRANULE == bytes)
            })
    }

    /// The backing.
    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// The backing, to change (a probe before the region is used, say).
    pub fn backing_mut(&mut self) -> &mut B {
        &mut self.backing
    }

    /// Whether the granule at `addr` (of the region) is mapped with host
    /// memory (spilled).
    pub fn is_spilled(&self, addr: u64) -> bool {
        addr.checked_sub(self.base)
            .is_some_and(|offset| self.spilled.contains(&((offset / GRANULE) as usize)))
    }

    /// The addresses of the granules in use whose memory is the host's
    /// (spilled), in address order.
    pub fn spilled_in_use(&self) -> impl Iterator<Item = u64> + '_ {
        self.spilled
            .iter()
            .filter(|&&g| self.states[g] == State::Used)
            .map(|&g| self.addr(g))
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

    /// What to say of refusal `why` in the driver's words: its last error
    /// message for a [`Refusal::Driver`], nothing for any other — a limit
    /// or headroom refusal carried the message of a map that failed in an
    /// earlier phase (a review, 2026-12-07).
    pub fn driver_error_for(&self, why: Refusal) -> Option<&str> {
        self.last_driver_error().filter(|_| why == Refusal::Driver)
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

    /// Where a run of `n` granules aligned to `align` could go, best fit:
    /// the shortest stretch of `Free` granules that holds it (no driver
    /// call); else the first start with the fewest granules still to map
    /// (`Used` and `Retired` granules excluded); or `None`.
    fn find_run(&self, n: usize, align: u64) -> Option<usize> {
        let (first, step) = self.first_aligned(align);
        #[cfg(debug_assertions)]
        if self.states.len() <= CHECKED_GRANULES {
            self.free_granules.check();
        }
        // The shortest stretch of free granules that holds the run: O(log)
        // from the stretches' index (a walk over every free granule until
        // 2026-12-07).
        if let Some(at) = self.free_granules.best_fit(n, first, step) {
            return Some(at);
        }
        if n == 1 && step == 1 {
            return self.states[self.unmapped_from..]
                .iter()
                .position(|&s| s == State::Unmapped)
                .map(|k| self.unmapped_from + k);
        }
        let found = self.cheapest_run(n, first, step);
        #[cfg(debug_assertions)]
        if self.states.len() <= CHECKED_GRANULES {
            debug_assert_eq!(
                found,
                self.cheapest_run_by_every_start(n, first, step),
                "a run of {n} from {first} by {step}"
            );
        }
        found
    }

    /// The first granule whose address is a multiple of `align` (a power
    /// of two, at least [`GRANULE`]), and the granules between two such:
    /// `(first, step)`. `first` may lie past the region (an alignment no
    /// address of it has).
    fn first_aligned(&self, align: u64) -> (usize, usize) {
        let step = usize::try_from(align / GRANULE)
            .unwrap_or(usize::MAX)
            .max(1);
        let misalign = usize::try_from((self.base % align) / GRANULE).unwrap_or(usize::MAX);
        (((step - misalign % step) % step), step)
    }

    /// The first aligned start (`first`, then every `step`) whose run of `n`
    /// granules holds no granule a run cannot take (`Used`; `Retired`
    /// where `last_taken` says so) and the fewest `Unmapped` ones; `None` if
    /// none does.
    ///
    /// Only a run that takes in a mapped granule (`Free`, or `Retired`
    /// whose memory is free) has fewer than `n` to map: those starts, the
    /// `n` before each such granule, are counted in a window that slides
    /// over them (O(1) a start as it slides, whatever the run holds: a
    /// `Retired` granule's rule is kept up by the window). If none of
    /// them is clear, the answer is the first run of `Unmapped` granules
    /// alone, found by the window from `unmapped_from` up. Counting every
    /// start's run took 63 ms for a 1 GiB block in a fresh 282 GiB region
    /// (an H200's default) and 669 ms for 8 GiB, time in which the RPC
    /// server answered no kernel (BENCHMARKS.md).
    fn cheapest_run(&self, n: usize, first: usize, step: usize) -> Option<usize> {
        let len = self.states.len();
        if first + n > len {
            return None;
        }
        let last = len - n;
        // The mapped granules a run may take in, in order.
        let mut takeable: Vec<usize> = self
            .owner_of
            .keys()
            .copied()
            .filter(|&r| self.kind(r) == Kind::Adoptable)
            .chain(self.free_granules.iter().copied())
            .collect();
        takeable.sort_unstable();
        let mut window = Window::default();
        let mut best: Option<(usize, usize)> = None;
        // Starts below this were counted.
        let mut done = first;
        for g in takeable {
            let mut start = aligned_from(first, step, g.saturating_sub(n - 1)).max(done);
            while start <= g.min(last) {
                window.move_to(self, start, n);
                if let Some(to_map) = window.to_map()
                    && best.is_none_or(|(_, cost)| to_map < cost)
                {
                    best = Some((start, to_map));
                    if to_map == 0 {
                        return Some(start);
                    }
                }
                start += step;
            }
            done = done.max(start);
        }
        if let Some((start, _)) = best {
            return Some(start);
        }
        // No run takes a mapped granule: the first run of `Unmapped`
        // granules, none below `unmapped_from`.
        let mut start = aligned_from(first, step, self.unmapped_from);
        while start <= last {
            window.move_to(self, start, n);
            if window.count[Kind::Unmapped as usize] == n {
                return Some(start);
            }
            start += step;
        }
        None
    }

    /// What granule `g` is to a run that would hold it.
    fn kind(&self, g: usize) -> Kind {
        match self.states[g] {
            State::Unmapped => Kind::Unmapped,
            State::Free => Kind::Free,
            State::Used => Kind::Taken,
            State::Retired if self.states[self.owner_of[&g]] == State::Free => Kind::Adoptable,
            State::Retired => Kind::Taken,
        }
    }

    /// `cheapest_run` by counting every aligned start's run: the check of
    /// debug builds, in regions of up to `CHECKED_GRANULES`.
    #[cfg(any(debug_assertions, test))]
    fn cheapest_run_by_every_start(&self, n: usize, first: usize, step: usize) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        let mut start = first;
        while start + n <= self.states.len() {
            if self.last_taken(start, n).is_none() {
                let to_map = self.states[start..start + n]
                    .iter()
                    .filter(|&&s| s == State::Unmapped)
                    .count();
                if best.is_none_or(|(_, cost)| to_map < cost) {
                    best = Some((start, to_map));
                }
            }
            start += step;
        }
        best.map(|(start, _)| start)
    }

    /// The last granule of `start..start + n` (as an offset) that a run
    /// there cannot have: `Used`; or `Retired` unless its physical memory
    /// is free, outside the run and no other granule of the run's (that
    /// memory can serve one address of it: `adopt`). The rule that
    /// `Window` keeps up as it slides, walked: the debug builds' check.
    #[cfg(any(debug_assertions, test))]
    fn last_taken(&self, start: usize, n: usize) -> Option<usize> {
        let mut owners: Vec<usize> = Vec::new();
        let mut taken = None;
        for (k, &state) in self.states[start..start + n].iter().enumerate() {
            let ok = match state {
                State::Used => false,
                State::Retired => {
                    let owner = self.owner_of[&(start + k)];
                    let ok = self.states[owner] == State::Free
                        && !(start..start + n).contains(&owner)
                        && !owners.contains(&owner);
                    owners.push(owner);
                    ok
                }
                State::Free | State::Unmapped => true,
            };
            if !ok {
                taken = Some(k);
            }
        }
        taken
    }

    /// Makes `retired`, an address of the free physical granule now at
    /// `owner_of[retired]`, that granule's address again (no driver call),
    /// and the old one an alias.
    fn adopt(&mut self, retired: usize) -> Result<(), BackingError> {
        let owner = self.owner_of[&retired];
        self.backing.adopt(self.addr(retired), self.addr(owner))?;
        let mut group = self.aliases.remove(&owner).unwrap_or_default();
        group.retain(|&g| g != retired);
        group.push(owner);
        for &g in &group {
            self.owner_of.insert(g, retired);
        }
        self.owner_of.remove(&retired);
        self.aliases.insert(retired, group);
        if self.spilled.remove(&owner) {
            self.spilled.insert(retired);
        }
        self.states[owner] = State::Retired;
        self.free_granules.remove(owner);
        self.states[retired] = State::Free;
        self.free_granules.insert(retired);
        Ok(())
    }

    /// Moves the free physical granule at `from` to `to` (unmapped): `from`
    /// and its aliases become aliases of `to`.
    fn relocate(&mut self, from: usize, to: usize) -> Result<(), BackingError> {
        self.backing.remap(self.addr(from), self.addr(to))?;
        let mut group = self.aliases.remove(&from).unwrap_or_default();
        group.push(from);
        for &g in &group {
            self.owner_of.insert(g, to);
        }
        self.aliases.insert(to, group);
        if self.spilled.remove(&from) {
            self.spilled.insert(to);
        }
        self.states[from] = State::Retired;
        self.free_granules.remove(from);
        self.states[to] = State::Free;
        self.free_granules.insert(to);
        self.stats.retired_granules += 1;
        self.stats.relocations += 1;
        Ok(())
    }

    /// Whether `new_bytes` of new physical memory may be mapped: `Ok`, or the
    /// refusal it would get (not counted).
    fn room_for(&self, new_bytes: u64) -> Result<(), Refusal> {
        if new_bytes == 0 {
            return Ok(());
        }
        if self.stats.mapped_bytes + new_bytes > self.limit {
            return Err(Refusal::Limit);
        }
        if let Some(free) = self.backing.free_device_memory()
            && free < new_bytes.saturating_add(self.headroom)
        {
            return Err(Refusal::Headroom);
        }
        Ok(())
    }

    /// Whether `bytes` of host memory may be spilled: the host keeps at
    /// least `spill_floor` free after it.
    fn host_room_for(&self, bytes: u64) -> bool {
        self.backing
            .host_memory()
            .is_some_and(|host| host.available >= bytes.saturating_add(super::spill_floor(host)))
    }

    /// A run of `bytes` (a positive multiple of [`GRANULE`]) aligned to `align`
    /// (a power of two; at least [`GRANULE`] is used), mapping what is not
    /// mapped yet; its address, or why not. Granules mapped before a refusal
    /// stay mapped and free. With `spill`, what device memory has no room
    /// for (its limit or headroom refused, or the driver) is mapped with
    /// host memory, if the host has room (`spill_floor`); else the device's
    /// refusal stands.
    pub fn allocate(&mut self, bytes: u64, align: u64) -> Result<u64, Refusal> {
        let spills_refused = self.stats.spills_refused;
        let result = self.allocate_counted(bytes, align);
        self.last_refusal = result.err().map(|why| Counted {
            why,
            spills_refused: self.stats.spills_refused - spills_refused,
        });
        result
    }

    /// The counts of the last `allocate`'s refusal (none after a success),
    /// taken: what [`Region::forgive`] takes back should a retry serve the
    /// request after all.
    pub(crate) fn take_last_refusal(&mut self) -> Option<Counted> {
        self.last_refusal.take()
    }

    /// Takes back a refusal's counts (from [`Region::take_last_refusal`]):
    /// the host's handler tried the region, served the frees pending on
    /// the mailbox's other ports and tried again. If that served the
    /// request, the device saw no refusal, and neither should the stats
    /// (until 2026-12-07 they counted one; a review); if it was refused
    /// too, that refusal is the one counted (until 2026-12-08 both were).
    pub(crate) fn forgive(&mut self, counted: Counted) {
        let n = &mut self.stats.refusals[counted.why.index()];
        *n = n.saturating_sub(1);
        self.stats.spills_refused = self
            .stats
            .spills_refused
            .saturating_sub(counted.spills_refused);
    }

    /// [`Region::allocate`], each refusal counted where it is made.
    fn allocate_counted(&mut self, bytes: u64, align: u64) -> Result<u64, Refusal> {
        if bytes == 0 || !bytes.is_multiple_of(GRANULE) || !align.is_power_of_two() {
            return Err(self.refuse(Refusal::BadRequest));
        }
        let align = align.max(GRANULE);
        let n = usize::try_from(bytes / GRANULE).unwrap_or(usize::MAX);
        // No aligned run of `n` granules anywhere in the region (say
        // `aligned_alloc(1 << 40, ..)`): address space, whatever memory
        // is left — a refusal that named the limit or the headroom told
        // the user to raise what could not help (a review, 2026-12-07).
        let (first, _) = self.first_aligned(align);
        if first
            .checked_add(n)
            .is_none_or(|end| end > self.states.len())
        {
            return Err(self.refuse(Refusal::NoAddressSpace));
        }
        let Some(start) = self.find_run(n, align) else {
            // Address space is what ran out only if memory did not: with
            // few free granules, it is mostly taken by runs and aliases.
            let short = n.saturating_sub(self.free_granules.len()) as u64 * GRANULE;
            let why = self.room_for(short).err();
            return Err(self.refuse(why.unwrap_or(Refusal::NoAddressSpace)));
        };
        let to_map: Vec<usize> = (start..start + n)
            .filter(|&i| self.states[i] == State::Unmapped)
            .collect();
        // Free granules outside the run, which could move into it (those
        // that back its `Retired` granules will not).
        let in_run = (start..start + n)
            .filter(|&i| self.states[i] != State::Unmapped)
            .count();
        let movable = self.free_granules.len() - in_run;
        let mut fresh = to_map.len();
        // Map host memory for the granules created (a spill).
        let mut spill = false;
        if let Err(why) = self.room_for(fresh as u64 * GRANULE) {
            fresh = to_map.len().saturating_sub(movable);
            if self.room_for(fresh as u64 * GRANULE).is_err() {
                if !self.spill {
                    return Err(self.refuse(why));
                }
                if !self.host_room_for(fresh as u64 * GRANULE) {
                    self.stats.spills_refused += 1;
                    return Err(self.refuse(why));
                }
                spill = true;
            }
        }
        let (moved, created) = to_map.split_at(to_map.len() - fresh);
        for i in start..start + n {
            if self.states[i] == State::Retired
                && let Err(e) = self.adopt(i)
            {
                self.last_driver_error = Some(e.to_string());
                return Err(self.refuse(Refusal::Driver));
            }
        }
        for &i in moved {
            // The free granule least likely to join a run: the last one
            // outside ours (runs are placed from the bottom).
            let Some(&from) = self
                .free_granules
                .range(start + n..)
                .next_back()
                .or_else(|| self.free_granules.range(..start).next_back())
            else {
                // Not the driver's: the books promised a free granule to
                // move. Its own words, not a stale message.
                self.last_driver_error = Some(
                    "no free granule to move into the run (the region's count was wrong)".into(),
                );
                return Err(self.refuse(Refusal::Driver));
            };
            if let Err(e) = self.relocate(from, i) {
                self.last_driver_error = Some(e.to_string());
                return Err(self.refuse(Refusal::Driver));
            }
        }
        for (k, &i) in created.iter().enumerate() {
            self.map_attempts += 1;
            if self.fail_every != 0 && self.map_attempts.is_multiple_of(self.fail_every) {
                return Err(self.refuse(Refusal::InjectedFault));
            }
            let addr = self.addr(i);
            let mapped = if spill {
                self.backing.map_host(addr)
            } else {
                // A driver refusing device memory is spilled too: this
                // granule and the rest of the run, if the host has room
                // for all of them.
                let left = (created.len() - k) as u64 * GRANULE;
                self.backing.map(addr).or_else(|e| {
                    if !self.spill {
                        return Err(e);
                    }
                    if !self.host_room_for(left) {
                        self.stats.spills_refused += 1;
                        return Err(e);
                    }
                    spill = true;
                    self.backing.map_host(addr)
                })
            };
            if let Err(e) = mapped {
                self.last_driver_error = Some(e.to_string());
                return Err(self.refuse(Refusal::Driver));
            }
            self.states[i] = State::Free;
            self.free_granules.insert(i);
            self.stats.granules_mapped += 1;
            self.stats.free_mapped_granules += 1;
            if spill {
                self.spilled.insert(i);
                self.stats.spilled_bytes += GRANULE;
                self.stats.peak_spilled_bytes =
                    self.stats.peak_spilled_bytes.max(self.stats.spilled_bytes);
            } else {
                self.stats.mapped_bytes += GRANULE;
                self.stats.peak_mapped_bytes =
                    self.stats.peak_mapped_bytes.max(self.stats.mapped_bytes);
            }
            self.stats.peak_backed_bytes = self
                .stats
                .peak_backed_bytes
                .max(self.stats.mapped_bytes + self.stats.spilled_bytes);
        }
        for i in start..start + n {
            self.states[i] = State::Used;
            self.free_granules.remove(i);
        }
        self.stats.free_mapped_granules -= n as u64;
        self.runs.insert(start, n);
        self.stats.in_use_bytes += bytes;
        self.stats.peak_in_use_bytes = self.stats.peak_in_use_bytes.max(self.stats.in_use_bytes);
        self.stats.live_runs += 1;
        self.stats.allocations += 1;
        // Past the granules mapped now: each is passed once until a trim.
        while self
            .states
            .get(self.unmapped_from)
            .is_some_and(|&s| s != State::Unmapped)
        {
            self.unmapped_from += 1;
        }
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

    /// Starts the peaks over: the peaks of mapped and handed-out bytes become
    /// what is mapped and handed out now (the next peaks are a phase's).
    pub fn reset_peaks(&mut self) {
        self.stats.peak_mapped_bytes = self.stats.mapped_bytes;
        self.stats.peak_spilled_bytes = self.stats.spilled_bytes;
        self.stats.peak_backed_bytes = self.stats.mapped_bytes + self.stats.spilled_bytes;
        self.stats.peak_in_use_bytes = self.stats.in_use_bytes;
    }

    /// Unmaps and releases every mapped granule that is free. Only while no
    /// kernel that uses the region runs (the caller's duty). Returns the
    /// bytes given back.
    ///
    /// A refused unmap ends the unmapping, but what was unmapped before it
    /// still goes back to the system (its spares released): until
    /// 2026-12-07 they stayed held, no longer counted as mapped but still
    /// taking device memory (a review). The first error is returned.
    pub fn trim(&mut self) -> Result<u64, BackingError> {
        let unmapped = self.unmap_free();
        let released = self.backing.release_spares();
        let bytes = unmapped?;
        released?;
        Ok(bytes)
    }

    /// `trim`'s unmapping: every alias, then every free granule; the bytes
    /// of free granules unmapped, or the first refusal.
    fn unmap_free(&mut self) -> Result<u64, BackingError> {
        // Aliases first: their physical granules are mapped elsewhere, and
        // must not be released (as spares) while an alias still maps them.
        let retired: Vec<usize> = (0..self.states.len())
            .filter(|&i| self.states[i] == State::Retired)
            .collect();
        for i in retired {
            self.backing.unmap(self.addr(i))?;
            self.states[i] = State::Unmapped;
            self.unmapped_from = self.unmapped_from.min(i);
            if let Some(owner) = self.owner_of.remove(&i)
                && let Some(group) = self.aliases.get_mut(&owner)
            {
                group.retain(|&g| g != i);
                if group.is_empty() {
                    self.aliases.remove(&owner);
                }
            }
            self.stats.retired_granules -= 1;
        }
        // Spilled granules first: host memory is the first to give back.
        let (spilled, device): (Vec<usize>, Vec<usize>) = self
            .free_granules
            .iter()
            .copied()
            .partition(|g| self.spilled.contains(g));
        let mut released = 0;
        for i in spilled.into_iter().chain(device) {
            self.backing.unmap(self.addr(i))?;
            self.states[i] = State::Unmapped;
            self.unmapped_from = self.unmapped_from.min(i);
            self.free_granules.remove(i);
            if self.spilled.remove(&i) {
                self.stats.spilled_bytes -= GRANULE;
            } else {
                self.stats.mapped_bytes -= GRANULE;
            }
            self.stats.granules_mapped -= 1;
            self.stats.free_mapped_granules -= 1;
            released += GRANULE;
        }
        Ok(released)
    }
}

/// A refusal as [`Region::allocate`] counted it: the reason, and how many
/// refused spills it counted beside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counted {
    why: Refusal,
    spills_refused: u64,
}

impl<B: Backing> Drop for Region<B> {
    fn drop(&mut self) {
        // Nothing to report to: the backing's own drop repeats this and the
        // process's mappings go with it at exit.
        let _ = self.backing.free_reservation();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::HostEmulated;

    /// A region of `reserve` granules on an emulated device of `device`
    /// granules, with `limit`.
    fn emulated(device: u64, reserve: u64, limit: Option<u64>) -> Region<HostEmulated> {
        let backing = HostEmulated::new(device * GRANULE).expect("emulated device");
        Region::new(
            backing,
            RegionConfig {
                reserve: Some(reserve * GRANULE),
                limit,
                ..RegionConfig::default()
            },
        )
        .expect("region")
    }

    /// A region of `states.len()` granules in the given states, `Retired`
    /// ones pointing at the owners `owners` names (`(retired, owner)`).
    fn crafted(states: &[State], owners: &[(usize, usize)]) -> Region<HostEmulated> {
        let granules = states.len() as u64;
        let mut r = emulated(granules, granules, None);
        r.states = states.to_vec();
        for g in (0..states.len()).filter(|&g| states[g] == State::Free) {
            r.free_granules.insert(g);
        }
        r.owner_of = owners.iter().copied().collect();
        r.unmapped_from = states
            .iter()
            .position(|&s| s == State::Unmapped)
            .unwrap_or(states.len());
        r
    }

    /// An alignment that no address of the region has is refused as
    /// address space, at the limit too (it was `Limit` there).
    #[test]
    fn an_alignment_the_region_cannot_meet_is_no_address_space() {
        let mut r = emulated(64, 8, Some(GRANULE));
        r.allocate(GRANULE, GRANULE)
            .expect("one granule, the limit");
        assert_eq!(r.allocate(GRANULE, 1 << 62), Err(Refusal::NoAddressSpace));
        assert_eq!(r.allocate(GRANULE, 1 << 63), Err(Refusal::NoAddressSpace));
        // At the limit, a granule the region could place is the limit's.
        assert_eq!(r.allocate(GRANULE, GRANULE), Err(Refusal::Limit));
    }

    /// Only a live run's start, at its length, is a run: not a freed
    /// granule (mapped still), nor a granule inside a run.
    #[test]
    fn is_run_names_live_runs_alone() {
        let mut r = emulated(8, 8, None);
        let one = r.allocate(GRANULE, GRANULE).expect("a granule");
        let two = r.allocate(2 * GRANULE, GRANULE).expect("a run of two");
        assert!(r.is_run(one, GRANULE) && r.is_run(two, 2 * GRANULE));
        assert!(!r.is_run(two, GRANULE) && !r.is_run(two + GRANULE, GRANULE));
        assert!(!r.is_run(one + 4096, GRANULE) && !r.is_run(0, GRANULE));
        r.free(one, GRANULE).expect("free");
        assert!(r.is_mapped(one, GRANULE) && !r.is_run(one, GRANULE));
    }

    /// A trim whose second unmap is refused still releases the granule it
    /// unmapped first: no spare left holding device memory.
    #[test]
    fn a_refused_trim_releases_what_it_unmapped() {
        let mut r = emulated(8, 8, None);
        let blocks: Vec<u64> = (0..3)
            .map(|_| r.allocate(GRANULE, GRANULE).expect("a granule"))
            .collect();
        for b in blocks {
            r.free(b, GRANULE).expect("free");
        }
        r.backing.inject_unmap_failures(1, 1);
        assert!(r.trim().is_err(), "the injected refusal");
        assert_eq!(
            r.backing.calls().releases,
            1,
            "the unmapped granule released"
        );
        assert_eq!(r.backing.free_device_memory(), Some(6 * GRANULE));
        // The rest at the next trim.
        assert_eq!(r.trim().expect("trim"), 2 * GRANULE);
        assert_eq!(r.backing.free_device_memory(), Some(8 * GRANULE));
    }

    /// A run may not hold two `Retired` granules whose memory is one
    /// physical granule, nor one beside the granule whose memory it is:
    /// one physical granule serves one address of a run. The search passes
    /// those runs (each would cost nothing to map) for the next cheapest.
    #[test]
    fn a_run_holds_one_address_of_each_physical_granule() {
        use State::{Free, Retired, Unmapped, Used};
        // 0 and 1 are both granule 3's memory.
        let r = crafted(
            &[Retired, Retired, Unmapped, Free, Used, Unmapped, Unmapped],
            &[(0, 3), (1, 3)],
        );
        assert_eq!(r.find_run(2, GRANULE), Some(1));
        assert_eq!(r.cheapest_run_by_every_start(2, 0, 1), Some(1));
        // 0 is granule 1's memory.
        let r = crafted(&[Retired, Free, Used, Unmapped, Free, Unmapped], &[(0, 1)]);
        assert_eq!(r.find_run(2, GRANULE), Some(3));
        assert_eq!(r.cheapest_run_by_every_start(2, 0, 1), Some(3));
        // Its owner elsewhere, 0 is adopted: a run that maps nothing.
        let r = crafted(&[Retired, Free, Used, Free], &[(0, 3)]);
        assert_eq!(r.find_run(2, GRANULE), Some(0));
    }
}
