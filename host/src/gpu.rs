//! The GPU: probing the driver, loading PTX, launching kernels.
//!
//! cudarc's `driver::result` calls are the thin `unsafe` layer; this module
//! adds the safe layer the project needs: a probe that turns "no libcuda" and
//! "no GPU" into typed errors instead of cudarc's panic, a [`Module`] that
//! unloads itself (recording, not panicking on, a failure), and kernel
//! launches from [`Kernel`] parameter lists.

use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUdevice_attribute};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result};
use warpalloc_device::kernel::Kernel;

use crate::HostError;

/// What the probe learnt about a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Device memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// Resident threads per multiprocessor.
    pub max_threads_per_multiprocessor: i32,
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// Whether the device supports the virtual memory management API.
    pub vmm_supported: bool,
}

impl GpuInfo {
    /// Warps that can be resident on the whole GPU at once.
    pub fn resident_warps(&self) -> u64 {
        let per_sm = u64::try_from(self.max_threads_per_multiprocessor).unwrap_or(0) / 32;
        per_sm * u64::try_from(self.multiprocessors).unwrap_or(0)
    }
}

/// Runs a driver call, turning a cudarc panic (it panics when a library or
/// symbol is missing) into an error.
fn guarded<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, HostError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(HostError::driver(call)),
        Err(payload) => Err(HostError::DriverPanic {
            call,
            message: payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        }),
    }
}

/// Whether libcuda can be loaded at all.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library under its usual names; it
    // runs no code of it beyond the loader's.
    unsafe { sys::is_culib_present() }
}

/// A GPU with a context and a stream for launches.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: GpuInfo,
}

impl Gpu {
    /// Opens GPU `ordinal`: `NoDriver` without libcuda, `NoDevice` without a
    /// GPU.
    pub fn open(ordinal: usize) -> Result<Gpu, HostError> {
        if !driver_present() {
            return Err(HostError::NoDriver);
        }
        match guarded("cuInit", result::init) {
            Err(HostError::Driver { source, .. })
                if source.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE =>
            {
                return Err(HostError::NoDevice("cuInit: no CUDA-capable device".into()));
            }
            other => other?,
        }
        let count = guarded("cuDeviceGetCount", result::device::get_count)?;
        if count <= 0 || ordinal >= count as usize {
            return Err(HostError::NoDevice(format!(
                "{count} device(s), asked for ordinal {ordinal}"
            )));
        }
        let ctx = guarded("cuCtxCreate (primary context)", || {
            CudaContext::new(ordinal)
        })?;
        // Streams are created before anything is launched: creating one may
        // synchronise the context.
        let stream = guarded("cuStreamCreate", || ctx.new_stream())?;
        let attr = |a: CUdevice_attribute| guarded("cuDeviceGetAttribute", || ctx.attribute(a));
        let mut driver_version = 0;
        // SAFETY: `cuDriverGetVersion` writes one int through a valid pointer.
        let version = guarded("cuDriverGetVersion", || unsafe {
            sys::cuDriverGetVersion(&mut driver_version).result()
        });
        version?;
        let info = GpuInfo {
            ordinal,
            name: guarded("cuDeviceGetName", || ctx.name())?,
            compute_capability: guarded("cuDeviceComputeCapability", || ctx.compute_capability())?,
            total_memory: guarded("cuDeviceTotalMem", || ctx.total_mem())?,
            multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_threads_per_multiprocessor: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )?,
            driver_version,
            vmm_supported: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            )? != 0,
        };
        Ok(Gpu { ctx, stream, info })
    }

    /// What the probe learnt.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream kernels are launched on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Loads PTX text (the driver JIT-compiles it for this GPU).
    pub fn load(&self, ptx: &str) -> Result<Module, HostError> {
        let text = CString::new(ptx)
            .map_err(|_| HostError::InvalidPtx("the text contains a NUL byte".into()))?;
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: `text` is a NUL-terminated PTX image that outlives the call.
        let raw = guarded("cuModuleLoadData", || unsafe {
            result::module::load_data(text.as_ptr().cast())
        })?;
        Ok(Module {
            raw,
            ctx: Arc::clone(&self.ctx),
        })
    }

    /// Launches `args`' kernel from `module` on `grid` × `block` and waits for
    /// it. Returns the wall time from launch to completion.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: `args` must be valid for the kernel (its
    /// pointers device addresses of buffers sized as it needs) until it ends.
    pub unsafe fn launch<K: Kernel>(
        &self,
        module: &Module,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        mut args: K,
    ) -> Result<Duration, HostError> {
        let function = module.function(K::NAME)?;
        let mut params: Vec<*mut c_void> = Vec::new();
        args.for_each_param(&mut |p| params.push(p));
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        let start = Instant::now();
        // SAFETY: `function` comes from a live module of this context;
        // `params` holds one pointer per kernel parameter, each to a value of
        // the declared type in `args`, which outlives the call; the caller
        // vouches for what the parameters point to.
        guarded("cuLaunchKernel", || unsafe {
            result::launch_kernel(
                function,
                grid,
                block,
                0,
                self.stream.cu_stream(),
                &mut params,
            )
        })?;
        guarded("cuStreamSynchronize", || self.stream.synchronize())?;
        Ok(start.elapsed())
    }
}

impl Gpu {
    /// Copies `bytes` to device address `dst` and waits (only between
    /// launches: a synchronous copy waits for running work).
    pub fn write(&self, dst: sys::CUdeviceptr, bytes: &[u8]) -> Result<(), HostError> {
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: `bytes` is a live slice; `dst` a device range of that size
        // (the caller's: module globals and heap regions).
        guarded("cuMemcpyHtoD", || unsafe {
            sys::cuMemcpyHtoD_v2(dst, bytes.as_ptr().cast(), bytes.len()).result()
        })
    }

    /// Copies `out.len()` bytes from device address `src` and waits (only
    /// between launches).
    pub fn read(&self, src: sys::CUdeviceptr, out: &mut [u8]) -> Result<(), HostError> {
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: `out` is a live, writable slice; `src` a device range of
        // that size.
        guarded("cuMemcpyDtoH", || unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, out.len()).result()
        })
    }

    /// `bytes` of zeroed pinned host memory the device addresses directly
    /// (`cuMemHostAlloc` with DEVICEMAP | PORTABLE: not write-combined, so
    /// the host can poll it).
    pub fn pinned(&self, bytes: usize) -> Result<Pinned, HostError> {
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a valid out-pointer; the size is the caller's.
        guarded("cuMemHostAlloc", || unsafe {
            sys::cuMemHostAlloc(&mut host, bytes, flags).result()
        })?;
        // SAFETY: `host` is `bytes` of fresh host memory we own.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut pinned = Pinned {
            host: host.cast(),
            device: 0,
            bytes,
            ctx: Arc::clone(&self.ctx),
        };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP; valid out-pointer.
        guarded("cuMemHostGetDevicePointer", || unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0).result()
        })?;
        pinned.device = device;
        Ok(pinned)
    }
}

/// Pinned, device-mapped host memory; freed on drop (a failure is recorded
/// in the context).
pub struct Pinned {
    host: *mut u8,
    device: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: plain memory owned by this value; the pointers are usable from any
// thread.
unsafe impl Send for Pinned {}
// SAFETY: as for Send; access goes through the raw pointers' users.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// The host's address.
    pub fn host(&self) -> *mut u8 {
        self.host
    }

    /// The device's address.
    pub fn device(&self) -> u64 {
        self.device
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: allocated by `cuMemHostAlloc`, freed once, here.
        self.ctx
            .record_err(unsafe { sys::cuMemFreeHost(self.host.cast()).result() });
    }
}

/// A loaded PTX module; unloaded on drop (a failure is recorded in the
/// context, see `CudaContext::check_err`).
pub struct Module {
    raw: sys::CUmodule,
    ctx: Arc<CudaContext>,
}

// SAFETY: a CUmodule handle may be used from any thread of the process once
// its context is bound there, which every method does first.
unsafe impl Send for Module {}
// SAFETY: as for Send; the methods only read the handle.
unsafe impl Sync for Module {}

impl Module {
    /// The entry point `name`.
    pub fn function(&self, name: &str) -> Result<sys::CUfunction, HostError> {
        let missing = || HostError::MissingSymbol {
            what: "kernel",
            name: name.to_string(),
        };
        let c_name = CString::new(name).map_err(|_| missing())?;
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: `raw` is a live module of `ctx`, bound above.
        match guarded("cuModuleGetFunction", || unsafe {
            result::module::get_function(self.raw, c_name)
        }) {
            Err(HostError::Driver { source, .. })
                if source.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND =>
            {
                Err(missing())
            }
            other => other,
        }
    }

    /// The device address and size of the global `name`.
    pub fn global(&self, name: &str) -> Result<(sys::CUdeviceptr, usize), HostError> {
        let missing = || HostError::MissingSymbol {
            what: "global",
            name: name.to_string(),
        };
        let c_name = CString::new(name).map_err(|_| missing())?;
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())?;
        // SAFETY: `raw` is a live module of `ctx`, bound above.
        match guarded("cuModuleGetGlobal", || unsafe {
            result::module::get_global(self.raw, c_name)
        }) {
            Err(HostError::Driver { source, .. })
                if source.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND =>
            {
                Err(missing())
            }
            other => other,
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: `raw` was loaded by `Gpu::load` and is unloaded only here.
        self.ctx
            .record_err(unsafe { result::module::unload(self.raw) });
    }
}
