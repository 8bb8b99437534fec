//! `CudaVmm`: the CUDA driver's virtual memory management API (through
//! cudarc's `driver::sys`): one `cuMemAddressReserve`d range, physical granules
//! from `cuMemCreate`, mapped with `cuMemMap` and made accessible with
//! `cuMemSetAccess`. Every call binds the heap's context to the calling
//! thread first (the RPC server's thread is not the one that created it).
//! A spill (`map_host`) creates its physical granule at a host location
//! (pinned system memory: `CU_MEM_LOCATION_TYPE_HOST`, or where a driver
//! takes only NUMA locations — CUDA 12 — `CU_MEM_LOCATION_TYPE_HOST_NUMA`
//! node 0; `probe_host` finds which) and maps it, with access for the
//! device, as any other.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, DriverError};

use super::{Backing, BackingError, DriverCalls, GRANULE};
use crate::device::cuda::{attribute, bind, total_mem};

/// GPU memory through the driver's virtual memory API.
pub struct CudaVmm {
    ctx: Arc<CudaContext>,
    device: i32,
    device_memory: u64,
    granularity: u64,
    reservation: Option<(u64, u64)>,
    mapped: HashMap<u64, sys::CUmemGenericAllocationHandle>,
    /// Addresses a physical granule moved away from (`remap`): still mapped
    /// to it, until `unmap`.
    aliases: HashSet<u64>,
    spares: Vec<sys::CUmemGenericAllocationHandle>,
    /// Addresses whose physical granule is host memory (`map_host`).
    host: HashSet<u64>,
    /// Unmapped host granules.
    host_spares: Vec<sys::CUmemGenericAllocationHandle>,
    /// The host location the driver takes (`probe_host`).
    host_location: sys::CUmemLocationType,
    /// Addresses left mapped where the region has no granule: a map whose
    /// undo failed too (`map_handle`), with its handle where it was no
    /// other address's (to release once unmapped). Unmapped with the
    /// reservation.
    stranded: HashMap<u64, Option<sys::CUmemGenericAllocationHandle>>,
    calls: DriverCalls,
}

// SAFETY: the handles are plain driver handles, usable from any thread that
// binds the context (every method does).
unsafe impl Send for CudaVmm {}

/// Runs a raw driver call, turning a failure or a cudarc panic into an error.
fn driver(call: &'static str, f: impl FnOnce() -> CUresult) -> Result<(), BackingError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => Err(BackingError::Driver {
            call,
            message: format!("{code:?}"),
            code: Some(code),
        }),
        Err(_) => Err(BackingError::Driver {
            call,
            message: "the CUDA driver library could not be used (missing symbol?)".into(),
            code: None,
        }),
    }
}

/// A cudarc call's error as a backing error.
fn driver_error(call: &'static str) -> impl Fn(DriverError) -> BackingError {
    move |e| BackingError::Driver {
        call,
        message: e.to_string(),
        code: Some(e.0),
    }
}

impl CudaVmm {
    /// The VMM backing of `ctx`'s device. Fails if the device lacks VMM
    /// support or its allocation granularity does not divide 2 MiB.
    pub fn new(ctx: Arc<CudaContext>) -> Result<CudaVmm, BackingError> {
        let device = ctx.ordinal() as i32;
        bind(&ctx).map_err(driver_error("cuCtxSetCurrent"))?;
        let supported = attribute(
            &ctx,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        )
        .map_err(driver_error("cuDeviceGetAttribute"))?;
        if supported == 0 {
            return Err(BackingError::Unsupported(
                "the device does not support CUDA virtual memory management (cuMemCreate/cuMemMap); \
                 use the pool mode's pre-mapped memory or the simulator"
                    .into(),
            ));
        }
        let device_memory = total_mem(&ctx).map_err(driver_error("cuDeviceTotalMem"))? as u64;
        let mut vmm = CudaVmm {
            ctx,
            device,
            device_memory,
            granularity: 0,
            reservation: None,
            mapped: HashMap::new(),
            aliases: HashSet::new(),
            spares: Vec::new(),
            host: HashSet::new(),
            host_spares: Vec::new(),
            host_location: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            stranded: HashMap::new(),
            calls: DriverCalls::default(),
        };
        let prop = vmm.prop();
        let mut granularity = 0usize;
        // SAFETY: valid out-pointer and property struct.
        driver("cuMemGetAllocationGranularity", || unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut granularity,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        })?;
        if granularity == 0 || !GRANULE.is_multiple_of(granularity as u64) {
            return Err(BackingError::Unsupported(format!(
                "allocation granularity {granularity} does not divide the 2 MiB granule"
            )));
        }
        vmm.granularity = granularity as u64;
        Ok(vmm)
    }

    /// The device's minimum allocation granularity (bytes).
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// The properties of a physical granule in the device's memory (and
    /// the location whose access `map_handle` sets).
    fn prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct for which all-zero is the documented
        // "no options" value of every field.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.device;
        prop
    }

    /// A new physical granule: pinned host memory with `host`, else the
    /// device's.
    fn create(&mut self, host: bool) -> Result<sys::CUmemGenericAllocationHandle, BackingError> {
        let mut prop = self.prop();
        if host {
            // HOST's id is ignored; HOST_NUMA's is the node: 0.
            prop.location.type_ = self.host_location;
            prop.location.id = 0;
        }
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and property struct.
        driver("cuMemCreate", || unsafe {
            sys::cuMemCreate(&mut handle, GRANULE as usize, &prop, 0)
        })?;
        self.calls.creates += 1;
        Ok(handle)
    }

    /// Unmaps `addr` if a failed map left it stranded (mapped, where the
    /// region has no granule), and releases the handle it held alone: the
    /// region places granules from the lowest unmapped address, so it
    /// comes back to a stranded one, whose map then failed on every try —
    /// new slabs refused for the rest of the run (a review, 2026-12-07).
    /// The caller bound the context.
    fn unstrand(&mut self, addr: u64) -> Result<(), BackingError> {
        let Some(&handle) = self.stranded.get(&addr) else {
            return Ok(());
        };
        // SAFETY: an address we mapped (a failed map's undo left it); the
        // region never handed it out, so no kernel uses it.
        driver("cuMemUnmap", || unsafe {
            sys::cuMemUnmap(addr, GRANULE as usize)
        })?;
        self.stranded.remove(&addr);
        if let Some(handle) = handle {
            // SAFETY: a physical allocation we created, mapped nowhere now.
            driver("cuMemRelease", || unsafe { sys::cuMemRelease(handle) })?;
            self.calls.releases += 1;
        }
        Ok(())
    }

    /// Maps a spare or new physical granule at `addr`: host memory with
    /// `host`.
    fn map_new(&mut self, addr: u64, host: bool) -> Result<(), BackingError> {
        self.bind()?;
        self.unstrand(addr)?;
        let spare = if host {
            self.host_spares.pop()
        } else {
            self.spares.pop()
        };
        let handle = match spare {
            Some(h) => h,
            None => self.create(host)?,
        };
        if let Err((e, still_mapped)) = self.map_handle(addr, handle) {
            if still_mapped {
                // Its undo failed too: mapped, with no access, where the
                // region has no granule. Not a spare (a map elsewhere would
                // share it); unmapped and released with the reservation.
                self.stranded.insert(addr, Some(handle));
            } else if host {
                self.host_spares.push(handle);
            } else {
                self.spares.push(handle);
            }
            return Err(e);
        }
        self.mapped.insert(addr, handle);
        if host {
            self.host.insert(addr);
            self.calls.host_maps += 1;
        }
        self.calls.maps += 1;
        Ok(())
    }

    fn bind(&self) -> Result<(), BackingError> {
        bind(&self.ctx).map_err(driver_error("cuCtxSetCurrent"))
    }

    /// Maps `handle` at `addr` (an unmapped granule of our reservation) and
    /// makes it readable and writable by the device; undone on failure. The
    /// error says whether `handle` is still mapped at `addr` (the undo
    /// failed too). The caller bound the context.
    fn map_handle(
        &self,
        addr: u64,
        handle: sys::CUmemGenericAllocationHandle,
    ) -> Result<(), (BackingError, bool)> {
        // SAFETY: `addr` is an unmapped granule of our reservation; `handle` a
        // physical allocation of exactly that size.
        driver("cuMemMap", || unsafe {
            sys::cuMemMap(addr, GRANULE as usize, 0, handle, 0)
        })
        .map_err(|e| (e, false))?;
        let desc = sys::CUmemAccessDesc {
            location: self.prop().location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range was just mapped; one descriptor.
        if let Err(e) = driver("cuMemSetAccess", || unsafe {
            sys::cuMemSetAccess(addr, GRANULE as usize, &desc, 1)
        }) {
            // SAFETY: undo the mapping just made.
            let undone = driver("cuMemUnmap", || unsafe {
                sys::cuMemUnmap(addr, GRANULE as usize)
            });
            return Err((e, undone.is_err()));
        }
        Ok(())
    }
}

impl Backing for CudaVmm {
    fn reserve(&mut self, bytes: u64) -> Result<u64, BackingError> {
        self.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer; a fresh range chosen by the driver.
        driver("cuMemAddressReserve", || unsafe {
            sys::cuMemAddressReserve(&mut ptr, bytes as usize, GRANULE as usize, 0, 0)
        })?;
        self.reservation = Some((ptr, bytes));
        Ok(ptr)
    }

    fn map(&mut self, addr: u64) -> Result<(), BackingError> {
        self.map_new(addr, false)
    }

    fn map_host(&mut self, addr: u64) -> Result<(), BackingError> {
        self.map_new(addr, true)
    }

    fn probe_host(&mut self) -> Result<(), BackingError> {
        self.bind()?;
        let handle = match self.create(true) {
            Ok(handle) => handle,
            Err(first) => {
                // A driver that takes only NUMA host locations (CUDA 12).
                self.host_location = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA;
                self.create(true).map_err(|_| first)?
            }
        };
        // SAFETY: the physical allocation just created, never mapped.
        driver("cuMemRelease", || unsafe { sys::cuMemRelease(handle) })?;
        self.calls.releases += 1;
        Ok(())
    }

    fn unmap(&mut self, addr: u64) -> Result<(), BackingError> {
        if self.aliases.contains(&addr) {
            self.bind()?;
            // SAFETY: an alias we mapped; no kernel uses it (the region's
            // trim contract). Its physical granule stays mapped where it
            // moved to.
            driver("cuMemUnmap", || unsafe {
                sys::cuMemUnmap(addr, GRANULE as usize)
            })?;
            self.aliases.remove(&addr);
            self.calls.unmaps += 1;
            return Ok(());
        }
        let Some(&handle) = self.mapped.get(&addr) else {
            return Err(BackingError::BadRequest(format!("unmap {addr:#x}")));
        };
        // A failure, the bind's or the unmap's, leaves the granule mapped
        // and known, for a later unmap (the region's trim tries again): its
        // handle is no spare while still mapped here, or a map elsewhere
        // would put one physical granule under two slabs.
        self.bind()?;
        // SAFETY: a granule we mapped; no kernel uses it (the region's trim
        // contract).
        driver("cuMemUnmap", || unsafe {
            sys::cuMemUnmap(addr, GRANULE as usize)
        })?;
        self.mapped.remove(&addr);
        if self.host.remove(&addr) {
            self.host_spares.push(handle);
        } else {
            self.spares.push(handle);
        }
        self.calls.unmaps += 1;
        Ok(())
    }

    fn remap(&mut self, from: u64, to: u64) -> Result<(), BackingError> {
        let Some(&handle) = self.mapped.get(&from) else {
            return Err(BackingError::BadRequest(format!("remap {from:#x}")));
        };
        if self.mapped.contains_key(&to) || self.aliases.contains(&to) {
            return Err(BackingError::BadRequest(format!("remap to {to:#x}")));
        }
        self.bind()?;
        self.unstrand(to)?;
        self.map_handle(to, handle).map_err(|(e, still_mapped)| {
            if still_mapped {
                // The handle stays `from`'s; `to` is unmapped later.
                self.stranded.insert(to, None);
            }
            e
        })?;
        self.mapped.remove(&from);
        self.mapped.insert(to, handle);
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

    fn release_spares(&mut self) -> Result<u64, BackingError> {
        self.bind()?;
        let mut n = 0;
        for spares in [&mut self.spares, &mut self.host_spares] {
            while let Some(handle) = spares.pop() {
                // SAFETY: an unmapped physical allocation we created.
                if let Err(e) = driver("cuMemRelease", || unsafe { sys::cuMemRelease(handle) }) {
                    // Kept, for a later release.
                    spares.push(handle);
                    return Err(e);
                }
                self.calls.releases += 1;
                n += 1;
            }
        }
        Ok(n)
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
        let stranded: Vec<_> = self.stranded.iter().map(|(&a, &h)| (a, h)).collect();
        for (addr, handle) in stranded {
            let unmapped = self.bind().and_then(|()| {
                // SAFETY: an address we mapped (a failed map's undo left
                // it); the region never handed it out.
                driver("cuMemUnmap", || unsafe {
                    sys::cuMemUnmap(addr, GRANULE as usize)
                })
            });
            match unmapped {
                Ok(()) => {
                    self.stranded.remove(&addr);
                    // Released with the spares below.
                    self.spares.extend(handle);
                }
                Err(e) => first = first.and(Err(e)),
            }
        }
        // The spares are released even when an unmap failed: the granules
        // unmapped are physical memory the context would hold until it
        // is destroyed (a retained primary context: the program's life).
        let released = self.release_spares();
        first?;
        released?;
        // Forgotten only once freed: a failed free stays to be tried again
        // (by `Drop`, which records its error), not lost with its range
        // (a review, 2026-12-07).
        if let Some((base, len)) = self.reservation {
            self.bind()?;
            // SAFETY: our whole reservation, with nothing mapped in it.
            driver("cuMemAddressFree", || unsafe {
                sys::cuMemAddressFree(base, len as usize)
            })?;
            self.reservation = None;
        }
        Ok(())
    }

    fn free_device_memory(&self) -> Option<u64> {
        self.bind().ok()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        driver("cuMemGetInfo", || unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })
        .ok()?;
        Some(free as u64)
    }

    fn device_memory(&self) -> u64 {
        self.device_memory
    }

    fn calls(&self) -> DriverCalls {
        self.calls
    }
}

impl Drop for CudaVmm {
    fn drop(&mut self) {
        // A driver's failure is recorded in the context, as cudarc's own
        // RAII types do, with the driver's own code.
        if let Err(BackingError::Driver {
            code: Some(code), ..
        }) = self.free_reservation()
        {
            self.ctx.record_err::<()>(Err(DriverError(code)));
        }
    }
}
