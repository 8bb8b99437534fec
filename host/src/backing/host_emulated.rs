//! `HostEmulated`: the GPU's virtual memory API emulated with the host's, so
//! that simulator runs drive the very same region code paths.
//!
//! * reservation: `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`,
//!   over-reserved and trimmed so that the base is 2 MiB aligned;
//! * physical chunk: a `memfd` of 2 MiB (`cuMemCreate`);
//! * map: `mmap(addr, 2 MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
//!   fd)` (`cuMemMap` + `cuMemSetAccess`);
//! * unmap: the range becomes `PROT_NONE` anonymous memory again
//!   (`cuMemUnmap`), and the memfd a spare that may be mapped elsewhere.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{Backing, BackingError, CHUNK, DriverCalls};

/// Host memory behaving like a GPU's virtual memory.
pub struct HostEmulated {
    device_memory: u64,
    reservation: Option<(u64, u64)>,
    mapped: HashMap<u64, OwnedFd>,
    spares: Vec<OwnedFd>,
    calls: DriverCalls,
}

fn os_error(call: &'static str) -> BackingError {
    BackingError::Os {
        call,
        source: std::io::Error::last_os_error(),
    }
}

impl HostEmulated {
    /// An emulated device with `device_memory` bytes of memory.
    pub fn new(device_memory: u64) -> Result<HostEmulated, BackingError> {
        Ok(HostEmulated {
            device_memory,
            reservation: None,
            mapped: HashMap::new(),
            spares: Vec::new(),
            calls: DriverCalls::default(),
        })
    }

    fn physical_in_use(&self) -> u64 {
        (self.mapped.len() + self.spares.len()) as u64 * CHUNK
    }

    fn new_chunk(&mut self) -> Result<OwnedFd, BackingError> {
        if let Some(fd) = self.spares.pop() {
            return Ok(fd);
        }
        // SAFETY: a static NUL-terminated name; flags are valid.
        let raw = unsafe { libc::memfd_create(c"warpalloc-chunk".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(os_error("memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a valid descriptor and length.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), CHUNK as libc::off_t) } != 0 {
            return Err(os_error("ftruncate"));
        }
        self.calls.creates += 1;
        Ok(fd)
    }

    fn inside(&self, addr: u64) -> bool {
        self.reservation.is_some_and(|(base, len)| {
            addr >= base && addr - base < len && addr.is_multiple_of(CHUNK)
        })
    }
}

impl Backing for HostEmulated {
    fn reserve(&mut self, bytes: u64) -> Result<u64, BackingError> {
        if self.reservation.is_some() {
            return Err(BackingError::BadRequest("reserved twice".into()));
        }
        let bytes = bytes.div_ceil(CHUNK) * CHUNK;
        let over = usize::try_from(bytes + CHUNK)
            .map_err(|_| BackingError::BadRequest("reservation too large".into()))?;
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
        let base = start.next_multiple_of(CHUNK);
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
        self.reservation = Some((base, bytes));
        Ok(base)
    }

    fn map(&mut self, addr: u64) -> Result<(), BackingError> {
        if !self.inside(addr) || self.mapped.contains_key(&addr) {
            return Err(BackingError::BadRequest(format!("map {addr:#x}")));
        }
        let fd = self.new_chunk()?;
        // SAFETY: `addr` is a chunk of our PROT_NONE reservation that is not
        // mapped; MAP_FIXED replaces exactly that chunk.
        let raw = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                CHUNK as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            let e = os_error("mmap (map)");
            self.spares.push(fd);
            return Err(e);
        }
        self.mapped.insert(addr, fd);
        self.calls.maps += 1;
        Ok(())
    }

    fn unmap(&mut self, addr: u64) -> Result<(), BackingError> {
        let Some(fd) = self.mapped.remove(&addr) else {
            return Err(BackingError::BadRequest(format!("unmap {addr:#x}")));
        };
        // SAFETY: `addr` is a chunk of our reservation that we mapped;
        // replacing it with PROT_NONE anonymous memory restores the
        // reservation there.
        let raw = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                CHUNK as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        self.spares.push(fd);
        if raw == libc::MAP_FAILED {
            return Err(os_error("mmap (unmap)"));
        }
        self.calls.unmaps += 1;
        Ok(())
    }

    fn release_spares(&mut self) -> Result<u64, BackingError> {
        let n = self.spares.len() as u64;
        self.spares.clear();
        self.calls.releases += n;
        Ok(n)
    }

    fn free_reservation(&mut self) -> Result<(), BackingError> {
        let addrs: Vec<u64> = self.mapped.keys().copied().collect();
        for addr in addrs {
            self.unmap(addr)?;
        }
        self.release_spares()?;
        if let Some((base, len)) = self.reservation.take() {
            // SAFETY: the whole reservation, which nothing uses any more.
            if unsafe { libc::munmap(base as *mut libc::c_void, len as usize) } != 0 {
                return Err(os_error("munmap (reservation)"));
            }
        }
        Ok(())
    }

    fn free_device_memory(&self) -> Option<u64> {
        Some(self.device_memory.saturating_sub(self.physical_in_use()))
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
