//! `HostEmulated`: the GPU's virtual memory API emulated with the host's, so
//! that simulator runs drive the very same region code paths.
//!
//! * reservation: `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`,
//!   over-reserved and trimmed so that the base is 2 MiB aligned;
//! * physical granule: 2 MiB of one `memfd` per backing, the store
//!   (`cuMemCreate`): the file grows a granule at a time, and a granule
//!   released (`cuMemRelease`) is a hole punched in it
//!   (`fallocate(FALLOC_FL_PUNCH_HOLE)`: its memory goes back to the
//!   system), reused before the file grows again. One descriptor in all:
//!   a memfd per granule, until 2026-12-07, ran into the usual limit of
//!   1 024 open files at about 2 GiB mapped (a review);
//! * map: `mmap(addr, 2 MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
//!   store, offset)` (`cuMemMap` + `cuMemSetAccess`);
//! * unmap: the range becomes `PROT_NONE` anonymous memory again
//!   (`cuMemUnmap`), and its granule of the store a spare that may be
//!   mapped elsewhere;
//! * remap: the memfd mapped at a second address as well (`cuMemMap` of the
//!   same handle), the first left as an alias until it is unmapped;
//! * map_host (spill): a granule as for `map`, but counted as host memory: it
//!   does not take from the emulated device's memory, and goes back to a
//!   spare list of its own.
//!
//! Under Miri, which has no `mmap` of files, the reservation is one block of
//! the allocator and a physical granule is only a count: mapping zeroes the
//! granule's range, unmapping poisons it (`os` below). The bookkeeping above
//! the operating system — what is mapped, spares, driver-call counts — is the
//! same code either way.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Backing, BackingError, DriverCalls, GRANULE};

/// Host memory behaving like a GPU's virtual memory.
pub struct HostEmulated {
    device_memory: u64,
    /// Bytes of the emulated device's memory in use, by every backing and
    /// buffer of one device (`HostEmulated::sharing`): as `cuMemGetInfo`
    /// counts the whole GPU's. This backing's share: its device granules,
    /// mapped or spare (a spare still holds its memory until released).
    in_use: Arc<AtomicU64>,
    reservation: Option<(u64, u64)>,
    /// The physical granules' memory.
    store: os::Store,
    mapped: HashMap<u64, os::Physical>,
    /// Addresses a physical granule moved away from (`remap`): still mapped
    /// to it, until `unmap`.
    aliases: HashSet<u64>,
    spares: Vec<os::Physical>,
    /// Addresses whose physical granule is host memory (`map_host`).
    host: HashSet<u64>,
    /// Unmapped host granules.
    host_spares: Vec<os::Physical>,
    calls: DriverCalls,
    /// Unmaps left to fail as if the operating system refused them
    /// (`unmap`'s tests), after `pass_unmaps` more that succeed.
    #[cfg(test)]
    fail_unmaps: u32,
    #[cfg(test)]
    pass_unmaps: u32,
}

impl HostEmulated {
    /// An emulated device with `device_memory` bytes of memory, this
    /// backing its only user.
    pub fn new(device_memory: u64) -> Result<HostEmulated, BackingError> {
        HostEmulated::sharing(device_memory, Arc::default())
    }

    /// A backing of an emulated device with `device_memory` bytes of
    /// memory, of which `in_use` bytes are in use (by its other backings and
    /// buffers, which count there too): two heaps of one device see each
    /// other's memory, as on a GPU. Until 2026-12-07 each backing saw the
    /// whole device (a review).
    pub fn sharing(
        device_memory: u64,
        in_use: Arc<AtomicU64>,
    ) -> Result<HostEmulated, BackingError> {
        Ok(HostEmulated {
            device_memory,
            in_use,
            reservation: None,
            store: os::Store::new(),
            mapped: HashMap::new(),
            aliases: HashSet::new(),
            spares: Vec::new(),
            host: HashSet::new(),
            host_spares: Vec::new(),
            calls: DriverCalls::default(),
            #[cfg(test)]
            fail_unmaps: 0,
            #[cfg(test)]
            pass_unmaps: 0,
        })
    }

    /// The next `pass` unmaps succeed, the `fail` after them are refused
    /// as if by the operating system (the region's tests).
    #[cfg(test)]
    pub(crate) fn inject_unmap_failures(&mut self, pass: u32, fail: u32) {
        self.pass_unmaps = pass;
        self.fail_unmaps = fail;
    }

    /// An injected refusal of an unmap, while `fail_unmaps` lasts.
    #[cfg(test)]
    fn injected_unmap_failure(&mut self) -> Result<(), BackingError> {
        if self.pass_unmaps != 0 {
            self.pass_unmaps -= 1;
            return Ok(());
        }
        if self.fail_unmaps == 0 {
            return Ok(());
        }
        self.fail_unmaps -= 1;
        Err(BackingError::Os {
            call: "munmap",
            source: std::io::Error::other("injected"),
        })
    }

    fn new_granule(&mut self, host: bool) -> Result<os::Physical, BackingError> {
        let spares = if host {
            &mut self.host_spares
        } else {
            &mut self.spares
        };
        if let Some(physical) = spares.pop() {
            return Ok(physical);
        }
        let physical = self.store.create()?;
        self.calls.creates += 1;
        if !host {
            self.in_use.fetch_add(GRANULE, Ordering::Relaxed);
        }
        Ok(physical)
    }

    /// Maps a new (or spare) physical granule at `addr`: host memory with
    /// `host`.
    fn map_new(&mut self, addr: u64, host: bool) -> Result<(), BackingError> {
        // An alias (`remap`'s old address) is mapped too, to its owner's
        // granule.
        if !self.inside(addr) || self.mapped.contains_key(&addr) || self.aliases.contains(&addr) {
            return Err(BackingError::BadRequest(format!("map {addr:#x}")));
        }
        let physical = self.new_granule(host)?;
        // SAFETY: `addr` is a granule of our reservation that is not mapped.
        if let Err(e) = unsafe { self.store.map(addr, physical) } {
            if host {
                self.host_spares.push(physical);
            } else {
                self.spares.push(physical);
            }
            return Err(e);
        }
        self.mapped.insert(addr, physical);
        if host {
            self.host.insert(addr);
            self.calls.host_maps += 1;
        }
        self.calls.maps += 1;
        Ok(())
    }

    fn inside(&self, addr: u64) -> bool {
        self.reservation.is_some_and(|(base, len)| {
            addr >= base && addr - base < len && addr.is_multiple_of(GRANULE)
        })
    }
}

impl Backing for HostEmulated {
    fn reserve(&mut self, bytes: u64) -> Result<u64, BackingError> {
        if self.reservation.is_some() {
            return Err(BackingError::BadRequest("reserved twice".into()));
        }
        let bytes = bytes
            .div_ceil(GRANULE)
            .checked_mul(GRANULE)
            .filter(|&b| b > 0)
            .ok_or_else(|| BackingError::BadRequest(format!("reserve {bytes} bytes")))?;
        let base = os::reserve(bytes)?;
        self.reservation = Some((base, bytes));
        Ok(base)
    }

    fn map(&mut self, addr: u64) -> Result<(), BackingError> {
        self.map_new(addr, false)
    }

    fn map_host(&mut self, addr: u64) -> Result<(), BackingError> {
        self.map_new(addr, true)
    }

    fn probe_host(&mut self) -> Result<(), BackingError> {
        Ok(())
    }

    fn unmap(&mut self, addr: u64) -> Result<(), BackingError> {
        if self.aliases.contains(&addr) {
            // SAFETY: an alias of ours that nothing uses (the region's trim
            // contract); its physical granule stays mapped where it moved.
            unsafe { os::unmap(addr) }?;
            self.aliases.remove(&addr);
            self.calls.unmaps += 1;
            return Ok(());
        }
        if !self.mapped.contains_key(&addr) {
            return Err(BackingError::BadRequest(format!("unmap {addr:#x}")));
        }
        // A failure leaves the granule mapped and known, for a later unmap
        // (the region's trim tries again): its physical granule is no spare
        // while still mapped, or a map elsewhere would share it.
        #[cfg(test)]
        self.injected_unmap_failure()?;
        // SAFETY: `addr` is a granule of our reservation that we mapped.
        unsafe { os::unmap(addr) }?;
        if let Some(physical) = self.mapped.remove(&addr) {
            if self.host.remove(&addr) {
                self.host_spares.push(physical);
            } else {
                self.spares.push(physical);
            }
        }
        self.calls.unmaps += 1;
        Ok(())
    }

    fn remap(&mut self, from: u64, to: u64) -> Result<(), BackingError> {
        if !self.inside(to) || self.mapped.contains_key(&to) || self.aliases.contains(&to) {
            return Err(BackingError::BadRequest(format!("remap to {to:#x}")));
        }
        let Some(physical) = self.mapped.remove(&from) else {
            return Err(BackingError::BadRequest(format!("remap {from:#x}")));
        };
        // SAFETY: `to` is a granule of our reservation that is not mapped.
        if let Err(e) = unsafe { self.store.map(to, physical) } {
            self.mapped.insert(from, physical);
            return Err(e);
        }
        self.mapped.insert(to, physical);
        if self.host.remove(&from) {
            self.host.insert(to);
        }
        self.aliases.insert(from);
        self.calls.remaps += 1;
        Ok(())
    }

    fn adopt(&mut self, alias: u64, owner: u64) -> Result<(), BackingError> {
        if !self.aliases.contains(&alias) {
            return Err(BackingError::BadRequest(format!("adopt {alias:#x}")));
        }
        let Some(physical) = self.mapped.remove(&owner) else {
            return Err(BackingError::BadRequest(format!("adopt from {owner:#x}")));
        };
        self.mapped.insert(alias, physical);
        if self.host.remove(&owner) {
            self.host.insert(alias);
        }
        self.aliases.remove(&alias);
        self.aliases.insert(owner);
        Ok(())
    }

    /// Each spare's memory back to the system (a hole punched in the
    /// store); one the system refuses stays a spare, and the first refusal
    /// is returned once every spare was tried.
    fn release_spares(&mut self) -> Result<u64, BackingError> {
        let mut released = 0;
        let mut first = Ok(());
        for host in [false, true] {
            let spares = std::mem::take(if host {
                &mut self.host_spares
            } else {
                &mut self.spares
            });
            for physical in spares {
                match self.store.release(physical) {
                    Ok(()) => {
                        released += 1;
                        if !host {
                            self.in_use.fetch_sub(GRANULE, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        first = first.and(Err(e));
                        if host {
                            self.host_spares.push(physical);
                        } else {
                            self.spares.push(physical);
                        }
                    }
                }
            }
        }
        self.calls.releases += released;
        first.map(|()| released)
    }

    fn free_reservation(&mut self) -> Result<(), BackingError> {
        let aliases: Vec<u64> = self.aliases.iter().copied().collect();
        let addrs: Vec<u64> = aliases
            .into_iter()
            .chain(self.mapped.keys().copied())
            .collect();
        // Every granule tried, the first failure reported: one that stays
        // mapped does not keep the others mapped too.
        let mut first = Ok(());
        for addr in addrs {
            if let Err(e) = self.unmap(addr) {
                first = first.and(Err(e));
            }
        }
        first?;
        self.release_spares()?;
        if let Some((base, len)) = self.reservation.take() {
            // SAFETY: the whole reservation, which nothing uses any more.
            unsafe { os::release(base, len) }?;
        }
        Ok(())
    }

    fn free_device_memory(&self) -> Option<u64> {
        Some(
            self.device_memory
                .saturating_sub(self.in_use.load(Ordering::Relaxed)),
        )
    }

    fn device_memory(&self) -> u64 {
        self.device_memory
    }

    fn calls(&self) -> DriverCalls {
        self.calls
    }
}

impl Drop for HostEmulated {
    fn drop(&mut self) {
        // Errors here have nowhere to go but are harmless: the process's
        // mappings go with it.
        let _ = self.free_reservation();
    }
}

/// The operating system's half: `mmap` and `memfd`.
#[cfg(not(miri))]
mod os {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::{BackingError, GRANULE};

    /// A physical granule: its offset in the [`Store`].
    pub type Physical = u64;

    /// The physical memory of one backing: one memfd, created at the first
    /// granule, that grows a granule at a time. A released granule is a
    /// hole punched in it (its pages go back to the system; it reads zero
    /// again), and is handed out again before the file grows.
    ///
    /// Invariants: `len` is a multiple of [`GRANULE`]; every offset in
    /// `holes` is below `len`, a multiple of [`GRANULE`], and neither
    /// mapped nor a spare of the backing.
    pub struct Store {
        fd: Option<OwnedFd>,
        len: u64,
        holes: Vec<u64>,
    }

    impl Store {
        /// An empty store (no file yet).
        pub const fn new() -> Store {
            Store {
                fd: None,
                len: 0,
                holes: Vec::new(),
            }
        }

        /// A granule of memory (zeroed): a hole, else the file grown.
        pub fn create(&mut self) -> Result<Physical, BackingError> {
            if let Some(at) = self.holes.pop() {
                return Ok(at);
            }
            let fd = match &self.fd {
                Some(fd) => fd,
                None => {
                    // SAFETY: a static NUL-terminated name; flags are valid.
                    let raw = unsafe {
                        libc::memfd_create(c"warpalloc-granules".as_ptr(), libc::MFD_CLOEXEC)
                    };
                    if raw < 0 {
                        return Err(os_error("memfd_create"));
                    }
                    // SAFETY: `raw` is a fresh descriptor we own.
                    self.fd.insert(unsafe { OwnedFd::from_raw_fd(raw) })
                }
            };
            let len = self.len + GRANULE;
            let size = libc::off_t::try_from(len)
                .map_err(|_| BackingError::BadRequest("the store is full".into()))?;
            // SAFETY: a valid descriptor and length.
            if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
                return Err(os_error("ftruncate"));
            }
            let at = self.len;
            self.len = len;
            Ok(at)
        }

        /// Gives granule `at`'s memory back to the system (a hole punched
        /// in the file), for [`Store::create`] to hand out again.
        pub fn release(&mut self, at: Physical) -> Result<(), BackingError> {
            let Some(fd) = &self.fd else {
                return Err(BackingError::BadRequest(format!("release {at:#x}")));
            };
            // Offsets below `len` ≤ `off_t::MAX` (`create`).
            let (offset, bytes) = (at as libc::off_t, GRANULE as libc::off_t);
            // SAFETY: a valid descriptor; the range lies in the file.
            let done = unsafe {
                libc::fallocate(
                    fd.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    bytes,
                )
            };
            if done != 0 {
                return Err(os_error("fallocate (punch hole)"));
            }
            self.holes.push(at);
            Ok(())
        }

        /// Maps granule `at` of the store at `addr`.
        ///
        /// # Safety
        /// `addr` is an unmapped granule of a reservation of ours; `at` a
        /// granule [`Store::create`] made, not released since.
        pub unsafe fn map(&self, addr: u64, at: Physical) -> Result<(), BackingError> {
            let Some(fd) = &self.fd else {
                return Err(BackingError::BadRequest(format!("map {at:#x}")));
            };
            // SAFETY: the caller's contract; MAP_FIXED replaces exactly that
            // granule of the PROT_NONE reservation.
            let raw = unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    GRANULE as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd.as_raw_fd(),
                    at as libc::off_t,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(os_error("mmap (map)"));
            }
            Ok(())
        }
    }

    fn os_error(call: &'static str) -> BackingError {
        BackingError::Os {
            call,
            source: std::io::Error::last_os_error(),
        }
    }

    /// A `PROT_NONE` range of `bytes` (a multiple of [`GRANULE`]) aligned to
    /// [`GRANULE`].
    pub fn reserve(bytes: u64) -> Result<u64, BackingError> {
        let over = bytes
            .checked_add(GRANULE)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| BackingError::BadRequest("reservation too large".into()))?;
        // SAFETY: an anonymous reservation chosen by the kernel; nothing is
        // touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(os_error("mmap (reserve)"));
        }
        let start = raw as u64;
        let base = start.next_multiple_of(GRANULE);
        let head = base - start;
        let tail = over as u64 - head - bytes;
        // SAFETY: both pieces lie in the mapping just made and are not used.
        unsafe {
            if head != 0 {
                libc::munmap(raw, head as usize);
            }
            if tail != 0 {
                libc::munmap((base + bytes) as *mut libc::c_void, tail as usize);
            }
        }
        Ok(base)
    }

    /// Unmaps the granule at `addr` (it becomes `PROT_NONE` again).
    ///
    /// # Safety
    /// `addr` is a mapped granule of a reservation of ours that nothing uses.
    pub unsafe fn unmap(addr: u64) -> Result<(), BackingError> {
        // SAFETY: the caller's contract; replacing the granule with
        // PROT_NONE anonymous memory restores the reservation there.
        let raw = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                GRANULE as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(os_error("mmap (unmap)"));
        }
        Ok(())
    }

    /// Gives the reservation back.
    ///
    /// # Safety
    /// `base`, `len` is a whole reservation of ours that nothing uses.
    pub unsafe fn release(base: u64, len: u64) -> Result<(), BackingError> {
        // SAFETY: the caller's contract.
        if unsafe { libc::munmap(base as *mut libc::c_void, len as usize) } != 0 {
            return Err(os_error("munmap (reservation)"));
        }
        Ok(())
    }
}

/// Miri's stand-in: the reservation is one allocation; mapping zeroes a
/// granule, unmapping poisons it.
#[cfg(miri)]
mod os {
    use std::alloc::{Layout, alloc_zeroed, dealloc};

    use super::{BackingError, GRANULE};

    /// A physical granule (nothing to hold: its bytes live in the
    /// reservation while mapped).
    pub type Physical = ();

    /// What an unmapped granule holds, so that a stale use reads garbage.
    const POISON: u8 = 0xa5;

    /// The store: nothing to hold either.
    pub struct Store;

    impl Store {
        pub const fn new() -> Store {
            Store
        }

        pub fn create(&mut self) -> Result<Physical, BackingError> {
            Ok(())
        }

        pub fn release(&mut self, _: Physical) -> Result<(), BackingError> {
            Ok(())
        }

        /// # Safety
        /// `addr` is an unmapped granule of a reservation of ours.
        pub unsafe fn map(&self, addr: u64, _: Physical) -> Result<(), BackingError> {
            // SAFETY: a granule inside our allocation (the caller's contract).
            unsafe {
                std::ptr::write_bytes(
                    std::ptr::with_exposed_provenance_mut::<u8>(addr as usize),
                    0,
                    GRANULE as usize,
                )
            };
            Ok(())
        }
    }

    fn layout(bytes: u64) -> Result<Layout, BackingError> {
        usize::try_from(bytes)
            .ok()
            .and_then(|b| Layout::from_size_align(b.max(1), GRANULE as usize).ok())
            .ok_or_else(|| BackingError::BadRequest("reservation too large".into()))
    }

    pub fn reserve(bytes: u64) -> Result<u64, BackingError> {
        // SAFETY: a non-zero size.
        let base = unsafe { alloc_zeroed(layout(bytes)?) };
        if base.is_null() {
            return Err(BackingError::Os {
                call: "alloc (reserve)",
                source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            });
        }
        Ok(base.expose_provenance() as u64)
    }

    /// # Safety
    /// `addr` is a mapped granule of a reservation of ours that nothing uses.
    pub unsafe fn unmap(addr: u64) -> Result<(), BackingError> {
        // SAFETY: a granule inside our allocation (the caller's contract).
        unsafe {
            std::ptr::write_bytes(
                std::ptr::with_exposed_provenance_mut::<u8>(addr as usize),
                POISON,
                GRANULE as usize,
            )
        };
        Ok(())
    }

    /// # Safety
    /// `base`, `len` is a whole reservation of ours that nothing uses.
    pub unsafe fn release(base: u64, len: u64) -> Result<(), BackingError> {
        // SAFETY: allocated by `reserve` with this layout.
        unsafe {
            dealloc(
                std::ptr::with_exposed_provenance_mut(base as usize),
                layout(len)?,
            )
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unmap the operating system refuses leaves the granule mapped and
    /// known — not a spare that a map elsewhere would share while it is
    /// still mapped here — and a later unmap gives it back.
    #[test]
    fn a_refused_unmap_leaves_the_granule_mapped_and_known() {
        let mut b = HostEmulated::new(8 * GRANULE).expect("emulated device");
        let base = b.reserve(4 * GRANULE).expect("reserve");
        b.map(base).expect("map");
        b.fail_unmaps = 1;
        assert!(b.unmap(base).is_err(), "the injected refusal");
        assert!(b.mapped.contains_key(&base), "still mapped, and known");
        assert!(b.spares.is_empty(), "no spare while mapped");
        assert_eq!(b.calls().unmaps, 0);
        // A map elsewhere gets a granule of its own.
        b.map(base + GRANULE).expect("map another");
        assert_eq!(b.calls().creates, 2, "not the still-mapped granule");
        b.unmap(base).expect("the retry");
        assert_eq!((b.spares.len(), b.calls().unmaps), (1, 1));
        assert!(!b.mapped.contains_key(&base));
    }

    /// A reservation whose size overflows (or is 0) is refused, not wrapped
    /// to a reservation of 0 bytes reported as made; an alias's address is
    /// no place for a new granule (a review, 2026-12-07).
    #[test]
    fn bad_reservations_and_a_map_over_an_alias_are_refused() {
        for bytes in [0, u64::MAX, u64::MAX - GRANULE + 1] {
            let mut b = HostEmulated::new(8 * GRANULE).expect("emulated device");
            assert!(
                matches!(b.reserve(bytes), Err(BackingError::BadRequest(_))),
                "{bytes}"
            );
        }
        let mut b = HostEmulated::new(8 * GRANULE).expect("emulated device");
        let base = b.reserve(4 * GRANULE).expect("reserve");
        b.map(base).expect("map");
        b.remap(base, base + GRANULE).expect("remap");
        assert!(matches!(b.map(base), Err(BackingError::BadRequest(_))));
        b.unmap(base).expect("the alias unmapped");
        b.unmap(base + GRANULE).expect("the owner unmapped");
        b.free_reservation().expect("free");
    }

    /// Freeing the reservation tries every granule: one that stays mapped
    /// does not keep the others mapped, and the failure is reported.
    #[test]
    fn freeing_the_reservation_tries_every_granule() {
        let mut b = HostEmulated::new(8 * GRANULE).expect("emulated device");
        let base = b.reserve(4 * GRANULE).expect("reserve");
        for i in 0..3 {
            b.map(base + i * GRANULE).expect("map");
        }
        b.fail_unmaps = 1;
        assert!(b.free_reservation().is_err(), "the injected refusal");
        assert_eq!(b.mapped.len(), 1, "only the refused granule left");
        assert_eq!(b.calls().unmaps, 2);
        b.free_reservation().expect("the retry");
        assert!(b.mapped.is_empty() && b.reservation.is_none());
    }
}
