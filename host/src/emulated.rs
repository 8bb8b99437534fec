//! The emulated device in cudarc's shape: a context, modules, functions,
//! streams, device slices and a launch builder with cudarc's names and
//! calls, whose kernels run in the CPU warp simulator. A program written
//! against `cudarc::driver` runs here by changing where the names come from:
//!
//! ```ignore
//! #[cfg(feature = "gpu")]
//! use cudarc::{driver::{CudaContext, LaunchConfig, PushKernelArg}, nvrtc::Ptx};
//! #[cfg(not(feature = "gpu"))]
//! use warpalloc::emulated::{CudaContext, LaunchConfig, Ptx, PushKernelArg};
//! ```
//!
//! and creating the context with the kernels compiled into the program
//! (`CudaContext::new(my_kernels::KERNELS)` instead of `CudaContext::new(0)`).
//!
//! ```text
//!   CudaContext ── an Emulated device + the program's kernels (kernel::Entry)
//!     ├─ load_module(Ptx) ─► CudaModule: the PTX's globals as host blocks
//!     │                        └─ load_function(name) ─► CudaFunction
//!     └─ default_stream() / new_stream() ─► CudaStream: one worker thread,
//!          work runs in order; launch_builder(&f).arg(..).launch(cfg)
//!          queues a launch and returns; synchronize() waits and reports
//!          the first error since the last one
//!   CudaSlice<T>: device memory (host memory here); alloc_zeros,
//!                 memset_zeros, memcpy_stod / clone_htod, memcpy_dtov /
//!                 clone_dtoh; its address through DevicePtr::device_ptr
//! ```
//!
//! A struct parameter of the program's own goes through
//! [`KernelParam`](crate::KernelParam) on both devices (cudarc's
//! `DeviceRepr` there, the kernel crate's `Param` here), and
//! [`CudaStream::simulator_stats`] gives the last launch's simulator counts.
//!
//! Copies to the host wait for the stream's work first, as a synchronous
//! cudarc copy does. A slice the program drops while work is queued stays
//! allocated until the device's work queued by then ends, whether a launch
//! has it by `arg(&slice)` or as an address from `device_ptr` (cudarc
//! frees it on its stream, after the work queued before the drop). Every
//! launch's lanes are bound to the heap that the module's `WARPALLOC_HEAP`
//! links when the launch starts, as a GPU kernel reads that global.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;

use warpalloc_device::kernel::{Entry, Param};
use warpalloc_sim::Convergence;

pub use cudarc::driver::LaunchConfig;

use crate::HostError;
use crate::device::emulated::{Activity, EmulatedModule};
use crate::device::{Allocation, AsDevice, AsModule, Device, Emulated, Module, emulated};
use crate::server;

/// PTX text, as cudarc's `nvrtc::Ptx`.
#[derive(Clone, Debug)]
pub struct Ptx(String);

impl Ptx {
    /// PTX from its text.
    pub fn from_src(src: impl Into<String>) -> Ptx {
        Ptx(src.into())
    }
}

/// The emulated device as a context (cudarc's `CudaContext`).
pub struct CudaContext {
    device: Arc<Emulated>,
    kernels: &'static [Entry],
    sim: Mutex<warpalloc_sim::LaunchConfig>,
    /// The default stream, while the program holds it (weak: a stream
    /// holds its context, so a strong link here would keep both alive).
    default_stream: Mutex<Weak<CudaStream>>,
}

impl std::fmt::Debug for CudaContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaContext")
            .field("kernels", &self.kernels.len())
            .finish_non_exhaustive()
    }
}

impl CudaContext {
    /// A context whose launches run `kernels` (the program's own, compiled
    /// for the host: `kernels![...]` in the kernel crate) in the simulator,
    /// with the emulated device's default memory.
    pub fn new(kernels: &'static [Entry]) -> Result<Arc<CudaContext>, HostError> {
        CudaContext::with_memory(kernels, emulated::DEFAULT_MEMORY)
    }

    /// As [`CudaContext::new`], with `memory` bytes of device memory.
    pub fn with_memory(
        kernels: &'static [Entry],
        memory: u64,
    ) -> Result<Arc<CudaContext>, HostError> {
        Ok(Arc::new(CudaContext {
            device: Arc::new(Emulated::new(memory)),
            kernels,
            sim: Mutex::new(
                warpalloc_sim::LaunchConfig::linear(1, 1)
                    .workers(std::thread::available_parallelism().map_or(1, |n| n.get()))
                    .convergence(Convergence::Converged),
            ),
            default_stream: Mutex::new(Weak::new()),
        }))
    }

    /// The simulator's settings for later launches (seed, workers,
    /// convergence; each launch's grid, block and binding replace those in
    /// it). Defaults: seed 0, one worker per core, converged warps.
    pub fn set_simulator(&self, cfg: warpalloc_sim::LaunchConfig) {
        *self.sim.lock().unwrap_or_else(PoisonError::into_inner) = cfg;
    }

    /// The device underneath.
    pub fn device(&self) -> &Arc<Emulated> {
        &self.device
    }

    /// Loads a module: its globals from the PTX's declarations; its kernels
    /// are those of the context's table that the PTX declares.
    pub fn load_module(self: &Arc<Self>, ptx: Ptx) -> Result<Arc<CudaModule>, HostError> {
        Ok(Arc::new(CudaModule {
            module: self.device.load(&ptx.0)?,
            ctx: Arc::clone(self),
        }))
    }

    /// The context's default stream: the same one while the program holds
    /// it.
    pub fn default_stream(self: &Arc<Self>) -> Arc<CudaStream> {
        let mut slot = self
            .default_stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(stream) = slot.upgrade() {
            return stream;
        }
        let stream = Arc::new(CudaStream::new(self));
        *slot = Arc::downgrade(&stream);
        stream
    }

    /// A new stream: its work runs in order on a thread of its own,
    /// concurrently with other streams'.
    pub fn new_stream(self: &Arc<Self>) -> Result<Arc<CudaStream>, HostError> {
        Ok(Arc::new(CudaStream::new(self)))
    }

    /// Waits for the work of every stream of the context; the first
    /// launch that failed since the last call is its error (each stream's
    /// `synchronize` reports its own too), as `cuCtxSynchronize` reports a
    /// kernel's fault.
    pub fn synchronize(&self) -> Result<(), HostError> {
        self.device.synchronize_context()
    }
}

impl AsDevice for Arc<CudaContext> {
    fn as_device(&self) -> Result<Arc<dyn Device>, HostError> {
        Ok(Arc::clone(&self.device) as Arc<dyn Device>)
    }
}

/// A loaded module (cudarc's `CudaModule`).
pub struct CudaModule {
    module: Arc<EmulatedModule>,
    ctx: Arc<CudaContext>,
}

impl CudaModule {
    /// The kernel `name`: an entry point of the PTX that the context's
    /// kernel table has.
    pub fn load_function(self: &Arc<Self>, name: &str) -> Result<CudaFunction, HostError> {
        if !self.module.has_kernel(name) {
            return Err(HostError::MissingSymbol {
                what: "kernel",
                name: name.to_string(),
            });
        }
        let entry = self
            .ctx
            .kernels
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| HostError::Launch {
                kernel: name.to_string(),
                why: "the PTX has it, but it is not in the context's kernel table: add it to \
                      the kernel crate's `kernels![...]`"
                    .into(),
            })?;
        Ok(CudaFunction {
            module: Arc::clone(self),
            entry: *entry,
        })
    }
}

impl AsModule for Arc<CudaModule> {
    fn as_module(&self, device: &dyn Device) -> Result<Arc<dyn Module>, HostError> {
        let same = device
            .as_any()
            .downcast_ref::<Emulated>()
            .is_some_and(|d| std::ptr::eq(d, &*self.ctx.device));
        if !same {
            return Err(HostError::WrongDevice(
                "an emulated module links only to a heap attached to its own context",
            ));
        }
        Ok(Arc::clone(&self.module) as Arc<dyn Module>)
    }
}

/// A kernel of a module (cudarc's `CudaFunction`).
#[derive(Clone)]
pub struct CudaFunction {
    module: Arc<CudaModule>,
    entry: Entry,
}

type Job = Box<dyn FnOnce() -> Result<(), HostError> + Send>;

/// What a stream's worker and its callers share.
#[derive(Default)]
struct Queue {
    /// Jobs queued and not yet ended.
    pending: usize,
    /// The first error since the last `synchronize`.
    error: Option<HostError>,
    /// The simulator's counts of the last launch that ended.
    stats: Option<warpalloc_sim::LaunchStats>,
}

/// A stream (cudarc's `CudaStream`): work queued on it runs in order on its
/// own thread.
pub struct CudaStream {
    ctx: Arc<CudaContext>,
    queue: Arc<(Mutex<Queue>, Condvar)>,
    worker: Mutex<Option<(Sender<Job>, JoinHandle<()>)>>,
}

impl CudaStream {
    fn new(ctx: &Arc<CudaContext>) -> CudaStream {
        CudaStream {
            ctx: Arc::clone(ctx),
            queue: Arc::default(),
            worker: Mutex::new(None),
        }
    }

    /// The stream's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn enqueue(&self, job: Job) -> Result<(), HostError> {
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        if worker.is_none() {
            let (send, receive) = mpsc::channel::<Job>();
            let queue = Arc::clone(&self.queue);
            let activity = Arc::clone(self.ctx.device.activity());
            let handle = std::thread::Builder::new()
                .name("warpalloc-stream".into())
                .spawn(move || {
                    for job in receive {
                        // A panic in a job is its error: the counts below
                        // must go down whatever happens, or every
                        // synchronize would wait for ever.
                        let result = catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|_| {
                            Err(HostError::Launch {
                                kernel: "(stream work)".into(),
                                why: "it panicked".into(),
                            })
                        });
                        if let Err(e) = &result {
                            // The context's record: its `synchronize`
                            // reports it, and a heap repairs itself.
                            activity.fail(match e {
                                HostError::Launch { kernel, why } => HostError::Launch {
                                    kernel: kernel.clone(),
                                    why: why.clone(),
                                },
                                other => HostError::Launch {
                                    kernel: "(a stream's work)".into(),
                                    why: other.to_string(),
                                },
                            });
                        }
                        let (lock, done) = &*queue;
                        let mut q = lock.lock().unwrap_or_else(PoisonError::into_inner);
                        if let Err(e) = result {
                            q.error.get_or_insert(e);
                        }
                        q.pending = q.pending.saturating_sub(1);
                        done.notify_all();
                        drop(q);
                        activity.end();
                    }
                })
                .map_err(HostError::Stream)?;
            *worker = Some((send, handle));
        }
        let Some((send, _)) = worker.as_ref() else {
            unreachable!("the worker was started above");
        };
        self.queue
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending += 1;
        self.ctx.device.activity().begin();
        if send.send(job).is_err() {
            // The worker ended (it never does while we hold its sender).
            self.queue
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pending -= 1;
            self.ctx.device.activity().end();
            return Err(HostError::Stream(std::io::Error::other(
                "the stream's worker thread ended",
            )));
        }
        Ok(())
    }

    /// Waits for the work queued on this stream; the first error any of it
    /// had since the last call.
    pub fn synchronize(&self) -> Result<(), HostError> {
        let (lock, done) = &*self.queue;
        let mut q = lock.lock().unwrap_or_else(PoisonError::into_inner);
        while q.pending > 0 {
            q = done.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        q.error.take().map_or(Ok(()), Err)
    }

    /// The simulator's counts of the last launch on this stream that ended
    /// (steps, atomics, loads by scope, sleep...), once `synchronize` says
    /// it ended: what a GPU's profiler would say, deterministically. `None`
    /// before any.
    pub fn simulator_stats(&self) -> Option<warpalloc_sim::LaunchStats> {
        self.queue
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
    }

    /// Waits for this stream's work (its first error since the last call)
    /// and then for every other stream's: a copy waits for the work of any
    /// stream that may use its slice. cudarc orders a slice's use across
    /// streams by events (a context with several streams); a copy that
    /// waited for its own stream alone read a slice another stream's
    /// kernel was still writing (a review, 2026-12-07). Stricter than
    /// cudarc, never looser.
    fn settle(&self) -> Result<(), HostError> {
        self.synchronize()?;
        // A wait for the others: their failures are theirs to report.
        self.ctx.device.synchronize()
    }

    /// Zeroes `dst` once the work of every stream so far has ended (cudarc's
    /// `memset_zeros`, whose events order it after the slice's uses).
    pub fn memset_zeros<T: bytemuck::Pod>(&self, dst: &mut CudaSlice<T>) -> Result<(), HostError> {
        self.settle()?;
        let zeros = vec![0u8; dst.len * size_of::<T>()];
        // SAFETY: `dst` is device memory of `len` elements, and no work of
        // any stream runs (launches after `settle` are the program's
        // business, as in CUDA).
        unsafe { self.ctx.device.write(dst.memory.addr(), &zeros) }
    }

    /// `len` zeroed elements of device memory.
    pub fn alloc_zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<CudaSlice<T>, HostError> {
        let bytes = HostError::buffer_bytes::<T>(len)?;
        Ok(CudaSlice {
            memory: Arc::from(self.ctx.device.alloc_zeroed(bytes)?),
            len,
            activity: Arc::clone(self.ctx.device.activity()),
            _element: PhantomData,
        })
    }

    /// Device memory holding a copy of `src` (cudarc's `memcpy_stod`).
    pub fn memcpy_stod<T: bytemuck::Pod>(&self, src: &[T]) -> Result<CudaSlice<T>, HostError> {
        let slice = self.alloc_zeros::<T>(src.len())?;
        // SAFETY: fresh memory of `src`'s size that no kernel can reach yet.
        unsafe {
            self.ctx
                .device
                .write(slice.memory.addr(), bytemuck::cast_slice(src))
        }?;
        Ok(slice)
    }

    /// As [`CudaStream::memcpy_stod`] (cudarc's newer name).
    pub fn clone_htod<T: bytemuck::Pod>(&self, src: &[T]) -> Result<CudaSlice<T>, HostError> {
        self.memcpy_stod(src)
    }

    /// Copies `src` into `dst` once the work of every stream so far has
    /// ended (cudarc's `memcpy_htod`); `src` must not be longer than `dst`.
    pub fn memcpy_htod<T: bytemuck::Pod>(
        &self,
        src: &[T],
        dst: &mut CudaSlice<T>,
    ) -> Result<(), HostError> {
        if src.len() > dst.len {
            return Err(HostError::Launch {
                kernel: "memcpy_htod".into(),
                why: format!("{} elements into a slice of {}", src.len(), dst.len),
            });
        }
        self.settle()?;
        // SAFETY: `dst` is device memory of at least `src`'s size, and no
        // work of any stream runs (as above).
        unsafe {
            self.ctx
                .device
                .write(dst.memory.addr(), bytemuck::cast_slice(src))
        }
    }

    /// A copy of `src` on the host, once the work of every stream so far
    /// has ended (cudarc's `memcpy_dtov`).
    pub fn memcpy_dtov<T: bytemuck::Pod>(&self, src: &CudaSlice<T>) -> Result<Vec<T>, HostError> {
        self.settle()?;
        let mut out = vec![T::zeroed(); src.len];
        // SAFETY: `src` is device memory of `len` elements; no work of any
        // stream runs.
        unsafe {
            self.ctx
                .device
                .read(src.memory.addr(), bytemuck::cast_slice_mut(&mut out))
        }?;
        Ok(out)
    }

    /// As [`CudaStream::memcpy_dtov`] (cudarc's newer name).
    pub fn clone_dtoh<T: bytemuck::Pod>(&self, src: &CudaSlice<T>) -> Result<Vec<T>, HostError> {
        self.memcpy_dtov(src)
    }

    /// A launch of `func` on this stream (cudarc's `launch_builder`): push
    /// the arguments with `arg`, then `launch`.
    pub fn launch_builder<'a>(&'a self, func: &'a CudaFunction) -> LaunchArgs<'a> {
        LaunchArgs {
            stream: self,
            func,
            params: Vec::new(),
            keep: Vec::new(),
        }
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let worker = self
            .worker
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((send, handle)) = worker {
            // The worker finishes what is queued, then ends.
            drop(send);
            // It panics on nothing; a join error would repeat a printed panic.
            let _ = handle.join();
        }
    }
}

/// `len` elements of `T` in device memory (cudarc's `CudaSlice`); freed when
/// dropped and when no queued launch uses it any more.
pub struct CudaSlice<T> {
    memory: Arc<dyn Allocation>,
    len: usize,
    /// The device's work, after which a dropped slice is freed.
    activity: Arc<Activity>,
    _element: PhantomData<T>,
}

impl<T> Drop for CudaSlice<T> {
    fn drop(&mut self) {
        // Freed once the work queued before the drop has ended: this
        // reference is held till then, the field's goes now.
        self.activity.release(Arc::clone(&self.memory));
    }
}

impl<T> CudaSlice<T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its device address.
    pub fn device_addr(&self) -> u64 {
        self.memory.addr()
    }
}

/// What cudarc's `device_ptr` hands back beside the address: there, a
/// record that orders the stream after the access; here, nothing to do
/// (the emulated stream runs its work in order and copies wait for it).
/// It borrows the slice as cudarc's does, so that a program that keeps it
/// while it borrows the slice again is refused here too.
#[derive(Debug)]
pub struct SyncOnDrop<'a>(PhantomData<&'a ()>);

/// A slice's device address for a read on `stream` (cudarc's `DevicePtr`):
/// `let (ptr, _record) = slice.device_ptr(&stream);` reads the same on
/// both devices.
pub trait DevicePtr<T> {
    /// The address, and what to keep until the access is scheduled.
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>);
}

/// A slice's device address for a write on `stream` (cudarc's
/// `DevicePtrMut`).
pub trait DevicePtrMut<T> {
    /// The address, and what to keep until the access is scheduled.
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>);
}

impl<T> DevicePtr<T> for CudaSlice<T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.memory.addr(), SyncOnDrop(PhantomData))
    }
}

impl<T> DevicePtrMut<T> for CudaSlice<T> {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.memory.addr(), SyncOnDrop(PhantomData))
    }
}

/// A launch being built (cudarc's `LaunchArgs`).
pub struct LaunchArgs<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    params: Vec<Vec<u8>>,
    /// Memory the launch uses, kept alive until it ends.
    keep: Vec<Arc<dyn Allocation>>,
}

/// Pushes one kernel argument (cudarc's `PushKernelArg`).
pub trait PushKernelArg<T> {
    /// Adds `arg` as the next parameter.
    fn arg(&mut self, arg: T) -> &mut Self;
}

/// A plain value (integer, float, raw pointer) by its bytes: the kernel's
/// `Param`, as cudarc's `DeviceRepr`.
impl<'a, 'b: 'a, T: Param> PushKernelArg<&'b T> for LaunchArgs<'a> {
    fn arg(&mut self, arg: &'b T) -> &mut Self {
        self.params.push(arg.to_bytes());
        self
    }
}

impl<'a, 'b: 'a, T> PushKernelArg<&'b CudaSlice<T>> for LaunchArgs<'a> {
    fn arg(&mut self, arg: &'b CudaSlice<T>) -> &mut Self {
        self.params.push(arg.memory.addr().to_ne_bytes().to_vec());
        self.keep.push(Arc::clone(&arg.memory));
        self
    }
}

impl<'a, 'b: 'a, T> PushKernelArg<&'b mut CudaSlice<T>> for LaunchArgs<'a> {
    fn arg(&mut self, arg: &'b mut CudaSlice<T>) -> &mut Self {
        self.arg(&*arg)
    }
}

impl LaunchArgs<'_> {
    /// Queues the launch on the stream and returns; the stream's
    /// `synchronize` reports how it went. The parameters' count and sizes
    /// are checked against the kernel's here. The builder keeps its
    /// arguments: it may launch again.
    ///
    /// # Safety
    /// As for a CUDA launch: the parameters must be valid for the kernel
    /// (pointers to memory large enough for what it does) until it ends.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), HostError> {
        // As CUDA: a function of one context runs on that context's streams
        // only. The job is counted in the stream's context, which a heap of
        // the function's context does not wait for before it frees its
        // memory (a review, 2026-12-07: a use after free).
        if !Arc::ptr_eq(&self.stream.ctx, &self.func.module.ctx) {
            return Err(HostError::WrongDevice(
                "a function of one context launched on another context's stream",
            ));
        }
        let entry = self.func.entry;
        let sizes: Vec<usize> = self.params.iter().map(Vec::len).collect();
        if let Err(e) = entry.check_params(&sizes) {
            return Err(HostError::Launch {
                kernel: entry.name.to_string(),
                why: e.to_string(),
            });
        }
        let mut sim = self
            .stream
            .ctx
            .sim
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        sim.grid_dim = cfg.grid_dim;
        sim.block_dim = cfg.block_dim;
        let module = Arc::clone(&self.func.module.module);
        let queue = Arc::clone(&self.stream.queue);
        // Copies: the builder keeps its arguments for another launch, as
        // cudarc's does.
        let params = self.params.clone();
        let keep = self.keep.clone();
        self.stream.enqueue(Box::new(move || {
            sim.binding = module.binding();
            server::wake();
            let views: Vec<&[u8]> = params.iter().map(Vec::as_slice).collect();
            // SAFETY: the caller vouched for the parameters until the kernel
            // ends; the memory of the slices it passed is kept alive (`keep`);
            // the binding is the heap linked to the module, which unlinks it
            // only after synchronising, so after this job.
            let result = unsafe { entry.launch(&views, &sim) };
            drop(keep);
            let stats = result.map_err(|e| HostError::Launch {
                kernel: entry.name.to_string(),
                why: e.to_string(),
            })?;
            queue.0.lock().unwrap_or_else(PoisonError::into_inner).stats = Some(stats);
            Ok(())
        }))
    }
}
