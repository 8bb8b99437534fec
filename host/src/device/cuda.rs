//! The CUDA driver as a [`Device`]: the only code here that a CPU machine
//! cannot run, so it is kept to the raw driver calls.
//!
//! Layers, as in cudarc: cudarc's `driver::result` / `driver::sys` calls are
//! the thin `unsafe` layer returning `Result`; `guarded` turns cudarc's
//! panic on a missing library or symbol into an error; the safe types here
//! ([`CudaModule`], [`CudaMemory`], [`PinnedHost`]) free what they own on
//! drop and record a failure in the context (`CudaContext::record_err`)
//! instead of panicking or inventing an error.

use std::any::Any;
use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUdevice_attribute};
use cudarc::driver::{CudaContext, CudaStream, DevicePtr as _, DriverError, result};
use warpalloc_sim::LaunchConfig;

use super::{
    Allocation, AsDevice, AsModule, Device, DeviceInfo, DevicePtr, Global, HostMapping, Launch,
    LaunchReport, Module,
};
use crate::HostError;
use crate::backing::{Backing, CudaVmm};

/// Runs a driver call, turning a cudarc panic (it panics when a library or
/// symbol is missing) into an error.
pub(crate) fn guarded<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, HostError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(HostError::driver(call)),
        Err(payload) => Err(HostError::DriverPanic {
            call,
            message: warpalloc_sim::panic_message(payload.as_ref()),
        }),
    }
}

/// Makes `ctx` current on this thread. Not cudarc's `bind_to_thread`,
/// which first hands back (and clears) an error that a drop recorded in the
/// context earlier, and then does not bind: an unrelated call would fail
/// once, and a drop would free nothing. Here the recorded error is not
/// touched (it stays for the program's next cudarc call to report): taking
/// it and putting it back, as this did before, raced with another thread
/// binding the same context (the RPC server's, while the launching thread
/// waits): that thread's `bind_to_thread` could take the error in between,
/// fail a map, and lose the error.
pub(crate) fn bind(ctx: &CudaContext) -> Result<(), DriverError> {
    if result::ctx::get_current()? != Some(ctx.cu_ctx()) {
        // SAFETY: the context of a live `CudaContext` (the caller's
        // reference keeps it), which cudarc created or retained.
        unsafe { result::ctx::set_current(ctx.cu_ctx()) }?;
    }
    Ok(())
}

/// A device attribute of `ctx`'s device. Not cudarc's
/// `CudaContext::attribute`, which first hands back (and clears) an error
/// that a drop recorded in the context ([`bind`]).
pub(crate) fn attribute(ctx: &CudaContext, a: CUdevice_attribute) -> Result<i32, DriverError> {
    // SAFETY: the device of a live context; the call writes one int.
    unsafe { result::device::get_attribute(ctx.cu_device(), a) }
}

/// The memory of `ctx`'s device, in bytes, as [`attribute`] (not cudarc's
/// `total_mem`, for the same reason).
pub(crate) fn total_mem(ctx: &CudaContext) -> Result<usize, DriverError> {
    // SAFETY: the device of a live context; the call writes one size.
    unsafe { result::device::total_mem(ctx.cu_device()) }
}

/// Waits for the work queued on `stream`, with the stream's context
/// current ([`bind`]). Not cudarc's `CudaStream::synchronize`, which, like
/// `bind_to_thread`, first hands back an error that a drop recorded in the
/// context and then returns without waiting: a copy still in flight would
/// outlive the host buffer it reads or writes, and a kernel still running
/// the memory the caller frees next. An error recorded so stays recorded.
fn wait_for(stream: &CudaStream) -> Result<(), HostError> {
    make_current(stream.context())?;
    // SAFETY: a live stream of a live context (the `Arc`s the caller holds
    // keep both), current on this thread.
    guarded("cuStreamSynchronize", || unsafe {
        result::stream::synchronize(stream.cu_stream())
    })
}

/// [`bind`], a failure as the `cuCtxSetCurrent` error it is.
fn make_current(ctx: &CudaContext) -> Result<(), HostError> {
    guarded("cuCtxSetCurrent", || bind(ctx))
}

/// Bytes of the JIT's error log kept when the driver rejects a module.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// Whether libcuda can be loaded at all.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library under its usual names; it
    // runs no code of it beyond the loader's.
    unsafe { sys::is_culib_present() }
}

/// A driver result with `CUDA_ERROR_NOT_FOUND` turned into the named
/// symbol's `MissingSymbol`.
fn found<T>(result: Result<T, HostError>, what: &'static str, name: &str) -> Result<T, HostError> {
    match result {
        Err(HostError::Driver { source, .. })
            if source.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND =>
        {
            Err(HostError::MissingSymbol {
                what,
                name: name.to_string(),
            })
        }
        other => other,
    }
}

/// A CUDA event with timing, created in the current context; destroyed on
/// drop (a failure is recorded in the context).
struct TimingEvent<'a> {
    raw: sys::CUevent,
    ctx: &'a CudaContext,
}

impl<'a> TimingEvent<'a> {
    /// An event of `ctx`, which the caller made current ([`bind`]).
    fn new(ctx: &'a CudaContext) -> Result<TimingEvent<'a>, HostError> {
        let raw = guarded("cuEventCreate", || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
        })?;
        Ok(TimingEvent { raw, ctx })
    }

    /// Records the event in `stream`, a stream of the event's context.
    fn record(&self, stream: &CudaStream) -> Result<(), HostError> {
        // SAFETY: a live event (destroyed only on drop) and a live stream of
        // its context.
        guarded("cuEventRecord", || unsafe {
            result::event::record(self.raw, stream.cu_stream())
        })
    }

    /// The time from this event to `end`, both recorded in one stream and
    /// both complete (the stream was waited for).
    fn until(&self, end: &TimingEvent<'_>) -> Result<Duration, HostError> {
        // SAFETY: two live events of one context, created with timing.
        let ms = guarded("cuEventElapsedTime", || unsafe {
            result::event::elapsed(self.raw, end.raw)
        })?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }
}

impl Drop for TimingEvent<'_> {
    fn drop(&mut self) {
        self.ctx.record_err(bind(self.ctx));
        // SAFETY: created by `cuEventCreate`, destroyed once, here.
        self.ctx
            .record_err(unsafe { result::event::destroy(self.raw) });
    }
}

/// Launches `function` with `kernel`'s parameters on `stream` and waits.
/// The report's `kernel_time` is the time between two CUDA events recorded
/// on the stream just before and after the launch: the kernel's own time,
/// as the peers' drivers (Gallatin's, `baseline.cu`) time theirs; `elapsed`
/// is the host's clock around the launch and the wait.
///
/// # Safety
/// `function` belongs to a live module of the stream's context, bound to
/// this thread; the caller vouches for what the parameters point to (as for
/// `Kernel::run`).
unsafe fn launch_and_wait(
    stream: &CudaStream,
    function: sys::CUfunction,
    kernel: &mut dyn Launch,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
) -> Result<LaunchReport, HostError> {
    let mut params = kernel.params();
    let ctx = stream.context();
    make_current(ctx)?;
    // The timing is best-effort: an event the driver does not make or
    // record leaves the report with the host's clock alone (`kernel_time`
    // `None`), never a launch that ran reported as failed, and never a
    // return before the kernel is done.
    let before = TimingEvent::new(ctx)
        .ok()
        .filter(|event| event.record(stream).is_ok());
    let after = before.as_ref().and_then(|_| TimingEvent::new(ctx).ok());
    let start = Instant::now();
    // SAFETY: `function` is live (the caller's contract); `params` holds one
    // pointer per kernel parameter, each to a value of the declared type in
    // `kernel`, which outlives the call.
    guarded("cuLaunchKernel", || unsafe {
        result::launch_kernel(function, grid, block, 0, stream.cu_stream(), &mut params)
    })?;
    let after = after.filter(|event| event.record(stream).is_ok());
    // Waited for whatever the events did: the kernel may be running.
    wait_for(stream)?;
    let elapsed = start.elapsed();
    let kernel_time = match (&before, &after) {
        (Some(before), Some(after)) => before.until(after).ok(),
        _ => None,
    };
    Ok(LaunchReport {
        elapsed,
        kernel_time,
        simulator: None,
    })
}

/// A GPU through the CUDA driver: a context and the stream launches use.
pub struct Cuda {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
}

/// GPU `ordinal`'s (primary) context, as cudarc's `CudaContext::new` makes
/// it — but an error, not a panic, when there is none: `NoDriver` when
/// libcuda cannot be loaded (cudarc's own call panics then, listing every
/// library name it tried), `NoDevice` when the driver sees no GPU or fewer
/// than `ordinal + 1`. What a program that may run where no GPU is should
/// call instead of `CudaContext::new(0)`.
pub fn open_gpu(ordinal: usize) -> Result<Arc<CudaContext>, HostError> {
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
    guarded("cuDevicePrimaryCtxRetain", || CudaContext::new(ordinal))
}

impl Cuda {
    /// Opens GPU `ordinal` ([`open_gpu`]): `NoDriver` without libcuda,
    /// `NoDevice` without that GPU.
    pub fn open(ordinal: usize) -> Result<Cuda, HostError> {
        Cuda::from_context(open_gpu(ordinal)?)
    }

    /// The GPU of a context the program already has (the user's own
    /// `CudaContext`): heaps on it serve kernels launched on any of its
    /// streams.
    pub fn from_context(ctx: Arc<CudaContext>) -> Result<Cuda, HostError> {
        let ordinal = ctx.ordinal();
        // Streams are created before anything is launched: creating one may
        // synchronise the context.
        // cudarc's `new_stream` hands back an error a drop recorded in the
        // context first (and clears it): there is no raw way to make a
        // `CudaStream`. The queries below are raw calls, which leave such
        // an error recorded.
        let stream = guarded("cuStreamCreate", || ctx.new_stream())?;
        let attr = |a: CUdevice_attribute| guarded("cuDeviceGetAttribute", || attribute(&ctx, a));
        let mut driver_version = 0;
        // SAFETY: `cuDriverGetVersion` writes one int through a valid pointer.
        guarded("cuDriverGetVersion", || unsafe {
            sys::cuDriverGetVersion(&mut driver_version).result()
        })?;
        let info = DeviceInfo {
            ordinal,
            name: guarded("cuDeviceGetName", || {
                result::device::get_name(ctx.cu_device())
            })?,
            compute_capability: (
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            total_memory: guarded("cuDeviceTotalMem", || total_mem(&ctx))? as u64,
            multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
                .max(0) as u32,
            max_threads_per_multiprocessor: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )?
            .max(0) as u32,
            driver_version,
            vmm_supported: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            )? != 0,
            emulated: false,
        };
        Ok(Cuda { ctx, stream, info })
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream kernels are launched on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn bind(&self) -> Result<(), HostError> {
        make_current(&self.ctx)
    }

    /// Waits for what was queued on the stream (a copy, a memset): the
    /// device sees it before any later launch on any stream, and the host
    /// may reuse or read its buffer.
    fn wait(&self) -> Result<(), HostError> {
        wait_for(&self.stream)
    }
}

// SAFETY: its allocations, mappings and modules are the driver's, of this
// context (`CudaMemory`, `PinnedHost`, `CudaModule`), and its backing maps
// device memory of the context's device (`CudaVmm`).
unsafe impl Device for Cuda {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn load_module(&self, ptx: &str) -> Result<Arc<dyn Module>, HostError> {
        let text = CString::new(ptx)
            .map_err(|_| HostError::InvalidPtx("the text contains a NUL byte".into()))?;
        self.bind()?;
        // The JIT writes why it rejects a module into this buffer, and the
        // log's length into the size's slot.
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [
            log.as_mut_ptr().cast(),
            std::ptr::without_provenance_mut(JIT_LOG_BYTES),
        ];
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `text` is a NUL-terminated PTX image, `log` a writable
        // buffer of the size given, and the option arrays match in length;
        // all outlive the call.
        let loaded = guarded("cuModuleLoadDataEx", || unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                text.as_ptr().cast(),
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
            .result()
        });
        match loaded {
            Ok(()) => {}
            Err(HostError::Driver { source, .. }) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                return Err(HostError::ModuleRejected {
                    source,
                    log: String::from_utf8_lossy(&log[..end]).trim().to_string(),
                });
            }
            Err(other) => return Err(other),
        }
        Ok(Arc::new(CudaModule {
            raw,
            ctx: Arc::clone(&self.ctx),
            stream: Arc::clone(&self.stream),
        }))
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<Box<dyn Allocation>, HostError> {
        self.bind()?;
        let bytes = bytes.max(1);
        // SAFETY: a plain allocation of `bytes`.
        let addr = guarded("cuMemAlloc", || unsafe { result::malloc_sync(bytes) })?;
        let memory = CudaMemory {
            addr,
            bytes,
            ctx: Arc::clone(&self.ctx),
        };
        // On the launch stream, and waited for: the legacy stream's memset
        // is not ordered before a launch on a non-blocking stream.
        // SAFETY: `addr` is `bytes` of fresh device memory we own.
        guarded("cuMemsetD8Async", || unsafe {
            result::memset_d8_async(addr, 0, bytes, self.stream.cu_stream())
        })?;
        self.wait()?;
        Ok(Box::new(memory))
    }

    unsafe fn write(&self, dst: DevicePtr, bytes: &[u8]) -> Result<(), HostError> {
        self.bind()?;
        // On the launch stream, and waited for: a copy from pageable memory
        // on the legacy stream returns before its DMA ends, and is not
        // ordered before a launch on a non-blocking stream.
        // SAFETY: `bytes` is a live slice, kept until the wait below; `dst`
        // a device range of that size (the caller's contract).
        guarded("cuMemcpyHtoDAsync", || unsafe {
            result::memcpy_htod_async(dst, bytes, self.stream.cu_stream())
        })?;
        self.wait()
    }

    unsafe fn read(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), HostError> {
        self.bind()?;
        // SAFETY: `out` is a live, writable slice, kept until the wait
        // below; `src` a device range of that size (the caller's contract).
        guarded("cuMemcpyDtoHAsync", || unsafe {
            result::memcpy_dtoh_async(out, src, self.stream.cu_stream())
        })?;
        self.wait()
    }

    fn mapped_host(&self, bytes: usize) -> Result<Box<dyn HostMapping>, HostError> {
        self.bind()?;
        let bytes = bytes.max(1);
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a valid out-pointer; the size is the caller's.
        guarded("cuMemHostAlloc", || unsafe {
            sys::cuMemHostAlloc(&mut host, bytes, flags).result()
        })?;
        // SAFETY: `host` is `bytes` of fresh host memory we own.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut pinned = PinnedHost {
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
        Ok(Box::new(pinned))
    }

    fn backing(&self) -> Result<Box<dyn Backing>, HostError> {
        Ok(Box::new(CudaVmm::new(Arc::clone(&self.ctx))?))
    }

    fn synchronize(&self) -> Result<(), HostError> {
        self.bind()?;
        // Not cudarc's `CudaContext::synchronize`, which returns an error a
        // drop recorded earlier without waiting (`wait_for`): `Heap`'s drop
        // quiesces with this before it frees what kernels use.
        guarded("cuCtxSynchronize", result::ctx::synchronize)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A heap attaches to the program's own context.
impl AsDevice for Arc<CudaContext> {
    fn as_device(&self) -> Result<Arc<dyn Device>, HostError> {
        Ok(Arc::new(Cuda::from_context(Arc::clone(self))?))
    }
}

/// A module the program loaded itself (`ctx.load_module(ptx)`), linked to a
/// heap on the same context. The program launches its kernels with cudarc.
struct LinkedModule {
    module: Arc<cudarc::driver::CudaModule>,
    stream: Arc<CudaStream>,
}

impl AsModule for Arc<cudarc::driver::CudaModule> {
    fn as_module(&self, device: &dyn Device) -> Result<Arc<dyn Module>, HostError> {
        let cuda = device
            .as_any()
            .downcast_ref::<Cuda>()
            .ok_or(HostError::WrongDevice(
                "a cudarc module links only to a heap attached to a CUDA context",
            ))?;
        let linked = LinkedModule {
            module: Arc::clone(self),
            stream: Arc::clone(&cuda.stream),
        };
        // cudarc does not say which context loaded the program's module,
        // but the driver says which owns its heap link: a module of
        // another context (another device's, say) is refused here, before
        // the heap writes its own memory's address where that module's
        // kernels would read it; so is one the driver will not look up
        // from the heap's context (`CUDA_ERROR_INVALID_CONTEXT`). Where the
        // driver does not say (no such global, or the attribute refused),
        // the link goes on and finds the global itself (`check_layout`).
        const OTHER: &str =
            "a cudarc module links only to a heap attached to the context that loaded it";
        match linked.global(warpalloc_device::abi::HEAP_SYMBOL) {
            Ok(global)
                if owning_context(global.addr).is_some_and(|owner| owner != cuda.ctx.cu_ctx()) =>
            {
                return Err(HostError::WrongDevice(OTHER));
            }
            // The driver would not look the module up from the heap's
            // context: not a module of it.
            Err(HostError::Driver { source, .. })
                if source.0 == sys::cudaError_enum::CUDA_ERROR_INVALID_CONTEXT =>
            {
                return Err(HostError::WrongDevice(OTHER));
            }
            _ => {}
        }
        Ok(Arc::new(linked))
    }
}

/// The context that owns the device memory at `addr`
/// (`cuPointerGetAttribute`, `CU_POINTER_ATTRIBUTE_CONTEXT`), or `None`
/// where the driver does not say.
fn owning_context(addr: sys::CUdeviceptr) -> Option<sys::CUcontext> {
    let mut owner: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `owner` is a valid out-pointer of the attribute's type (a
    // `CUcontext`); the driver reads nothing else of ours.
    let queried = guarded("cuPointerGetAttribute", || unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut owner).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_CONTEXT,
            addr,
        )
        .result()
    });
    (queried.is_ok() && !owner.is_null()).then_some(owner)
}

// SAFETY: its globals are the driver's, of a module the program loaded and
// keeps alive (the `Arc`).
unsafe impl Module for LinkedModule {
    fn is_on(&self, device: &dyn Device) -> bool {
        // The stream is the heap's (`as_module`); cudarc does not say which
        // context the program's module was loaded in.
        device
            .as_any()
            .downcast_ref::<Cuda>()
            .is_some_and(|c| c.ctx.cu_ctx() == self.stream.context().cu_ctx())
    }

    fn global(&self, name: &str) -> Result<Global, HostError> {
        make_current(self.stream.context())?;
        let global = guarded("cuModuleGetGlobal", || {
            self.module.get_global(name, &self.stream).map(|view| {
                let (addr, _synced) = view.device_ptr(&self.stream);
                Global {
                    addr,
                    size: view.len(),
                }
            })
        });
        found(global, "global", name)
    }

    fn has_kernel(&self, name: &str) -> bool {
        make_current(self.stream.context()).is_ok()
            && guarded("cuModuleGetFunction", || self.module.load_function(name)).is_ok()
    }

    unsafe fn launch(
        &self,
        kernel: &mut dyn Launch,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        _sim: &LaunchConfig,
    ) -> Result<LaunchReport, HostError> {
        make_current(self.stream.context())?;
        let function = found(
            guarded("cuModuleGetFunction", || {
                self.module.load_function(kernel.name())
            }),
            "kernel",
            kernel.name(),
        )?;
        // SAFETY: a function of the caller's live module, in the stream's
        // context; the parameters are the caller's contract.
        unsafe { launch_and_wait(&self.stream, function.cu_function(), kernel, grid, block) }
    }
}

/// Device memory from `cuMemAlloc`; freed on drop (a failure is recorded in
/// the context).
pub struct CudaMemory {
    addr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: `bytes` of device memory from `cuMemAlloc`, freed only on drop.
unsafe impl Allocation for CudaMemory {
    fn addr(&self) -> DevicePtr {
        self.addr
    }
    fn len(&self) -> usize {
        self.bytes
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        self.ctx.record_err(bind(&self.ctx));
        // SAFETY: allocated by `cuMemAlloc`, freed once, here.
        self.ctx.record_err(unsafe { result::free_sync(self.addr) });
    }
}

/// Pinned, device-mapped host memory; freed on drop (a failure is recorded
/// in the context).
pub struct PinnedHost {
    host: *mut u8,
    device: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: plain memory owned by this value; the pointers are usable from any
// thread.
unsafe impl Send for PinnedHost {}
// SAFETY: as for Send; access goes through the raw pointers' users.
unsafe impl Sync for PinnedHost {}

// SAFETY: `cuMemHostAlloc`'s pinned, page-aligned host memory and its
// device address (`cuMemHostGetDevicePointer`), freed only on drop.
unsafe impl HostMapping for PinnedHost {
    fn host(&self) -> *mut u8 {
        self.host
    }
    fn device(&self) -> DevicePtr {
        self.device
    }
    fn len(&self) -> usize {
        self.bytes
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        self.ctx.record_err(bind(&self.ctx));
        // SAFETY: allocated by `cuMemHostAlloc`, freed once, here.
        self.ctx
            .record_err(unsafe { sys::cuMemFreeHost(self.host.cast()).result() });
    }
}

/// A loaded PTX module; unloaded on drop (a failure is recorded in the
/// context).
pub struct CudaModule {
    raw: sys::CUmodule,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

// SAFETY: a CUmodule handle may be used from any thread of the process once
// its context is bound there, which every method does first.
unsafe impl Send for CudaModule {}
// SAFETY: as for Send; the methods only read the handle.
unsafe impl Sync for CudaModule {}

impl CudaModule {
    fn function(&self, name: &str) -> Result<sys::CUfunction, HostError> {
        let missing = || HostError::MissingSymbol {
            what: "kernel",
            name: name.to_string(),
        };
        let c_name = CString::new(name).map_err(|_| missing())?;
        make_current(&self.ctx)?;
        // SAFETY: `raw` is a live module of `ctx`, bound above.
        let function = guarded("cuModuleGetFunction", || unsafe {
            result::module::get_function(self.raw, c_name)
        });
        found(function, "kernel", name)
    }
}

// SAFETY: its globals are the driver's, of this module, which lives until
// dropped.
unsafe impl Module for CudaModule {
    fn is_on(&self, device: &dyn Device) -> bool {
        device
            .as_any()
            .downcast_ref::<Cuda>()
            .is_some_and(|c| c.ctx.cu_ctx() == self.ctx.cu_ctx())
    }

    fn global(&self, name: &str) -> Result<Global, HostError> {
        let missing = || HostError::MissingSymbol {
            what: "global",
            name: name.to_string(),
        };
        let c_name = CString::new(name).map_err(|_| missing())?;
        make_current(&self.ctx)?;
        // SAFETY: `raw` is a live module of `ctx`, bound above.
        let global = guarded("cuModuleGetGlobal", || unsafe {
            result::module::get_global(self.raw, c_name)
        });
        found(global, "global", name).map(|(addr, size)| Global { addr, size })
    }

    fn has_kernel(&self, name: &str) -> bool {
        self.function(name).is_ok()
    }

    unsafe fn launch(
        &self,
        kernel: &mut dyn Launch,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        _sim: &LaunchConfig,
    ) -> Result<LaunchReport, HostError> {
        let function = self.function(kernel.name())?;
        // SAFETY: `function` comes from this live module, bound to this
        // thread by `function`; the parameters are the caller's contract.
        unsafe { launch_and_wait(&self.stream, function, kernel, grid, block) }
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        self.ctx.record_err(bind(&self.ctx));
        // SAFETY: `raw` was loaded by `load_module` and is unloaded only here.
        self.ctx
            .record_err(unsafe { result::module::unload(self.raw) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cudarc panics where the driver lacks a library or symbol; `guarded`
    /// makes that an error that names the call and keeps the panic's text,
    /// and passes a driver error through as one.
    #[test]
    fn a_panicking_driver_call_is_an_error_naming_the_call() {
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let formatted = guarded("cuFormatted", || -> Result<(), DriverError> {
            panic!("no symbol {}", "cuCtxCreate_v4")
        });
        let literal = guarded("cuLiteral", || -> Result<(), DriverError> {
            panic!("no libcuda")
        });
        std::panic::set_hook(quiet);
        match formatted {
            Err(HostError::DriverPanic { call, message }) => {
                assert_eq!(
                    (call, message.as_str()),
                    ("cuFormatted", "no symbol cuCtxCreate_v4")
                );
            }
            other => panic!("{other:?}"),
        }
        match literal {
            Err(HostError::DriverPanic { call, message }) => {
                assert_eq!((call, message.as_str()), ("cuLiteral", "no libcuda"));
            }
            other => panic!("{other:?}"),
        }
        let failed = guarded("cuFailed", || -> Result<(), DriverError> {
            Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_FOUND))
        });
        assert!(
            matches!(
                failed,
                Err(HostError::Driver {
                    call: "cuFailed",
                    ..
                })
            ),
            "{failed:?}"
        );
    }
}
