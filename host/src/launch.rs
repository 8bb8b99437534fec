//! `Launcher`: one PTX module on one device — a GPU when there is one, the
//! emulated device (the CPU warp simulator) otherwise — with buffers to move
//! the kernels' data. Everything here goes through the device interface
//! (`device`), the same calls on both.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use warpalloc_sim::{Convergence, LaunchConfig};

use crate::HostError;
use crate::device::{
    Allocation, Cuda, Device, DeviceInfo, Emulated, Launch, LaunchReport, Module, emulated,
};

/// Where to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefer {
    /// The GPU when one is usable, else the emulated device.
    Auto,
    /// The GPU, or an error saying why not.
    Gpu,
    /// The emulated device, even when a GPU is present.
    Simulator,
}

/// Launches kernels of one PTX module on one device.
pub struct Launcher {
    // Field order is drop order: the module before its device.
    module: Arc<dyn Module>,
    device: Arc<dyn Device>,
    /// Why not a GPU, when `Auto` fell back to the emulated device.
    why_not_gpu: Option<String>,
    /// The module's `.target` (its architecture), as its PTX names it.
    target: String,
    sim: LaunchConfig,
}

impl Launcher {
    /// A launcher for `ptx` (the kernels as PTX; the emulated device sizes
    /// the module's globals from it and runs the same kernels as compiled
    /// into this program) on the device `prefer` names.
    pub fn new(ptx: &str, prefer: Prefer) -> Result<Launcher, HostError> {
        Self::new_with(prefer, |_| ptx)
    }

    /// [`Launcher::new`] with the module chosen for the device once it is
    /// open: `ptx_for` gets its description (compute capability
    /// included) and returns the PTX to load, such as a build for that
    /// architecture.
    pub fn new_with<'p>(
        prefer: Prefer,
        ptx_for: impl FnOnce(&DeviceInfo) -> &'p str,
    ) -> Result<Launcher, HostError> {
        let (device, why_not_gpu): (Arc<dyn Device>, _) = match prefer {
            Prefer::Simulator => (Arc::new(Emulated::default()), None),
            Prefer::Gpu => (
                Arc::new(Cuda::open(0).map_err(|e| HostError::GpuRequired(Box::new(e)))?),
                None,
            ),
            Prefer::Auto => match Cuda::open(0) {
                Ok(gpu) => (Arc::new(gpu), None),
                Err(why) => (
                    Arc::new(Emulated::new(emulated::DEFAULT_MEMORY)),
                    // Short, for a report's header: the install hint is for
                    // `--gpu`'s error.
                    Some(match why {
                        HostError::NoDriver => "no CUDA driver".to_string(),
                        other => other.to_string(),
                    }),
                ),
            },
        };
        let ptx = ptx_for(device.info());
        Self::on(device, ptx).map(|mut l| {
            l.why_not_gpu = why_not_gpu;
            l
        })
    }

    /// A launcher for `ptx` on `device`.
    pub fn on(device: Arc<dyn Device>, ptx: &str) -> Result<Launcher, HostError> {
        let module = device.load_module(ptx)?;
        let target = ptx
            .lines()
            .find_map(|l| l.trim().strip_prefix(".target "))
            .and_then(|t| t.split([',', ' ']).next())
            .unwrap_or("unknown")
            .to_owned();
        Ok(Launcher {
            module,
            device,
            why_not_gpu: None,
            target,
            sim: LaunchConfig::linear(1, 1)
                .workers(default_workers())
                .convergence(Convergence::Converged),
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The module.
    pub fn module(&self) -> &Arc<dyn Module> {
        &self.module
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        self.device.info()
    }

    /// The architecture the loaded PTX targets (its `.target`, e.g.
    /// `sm_90`).
    pub fn ptx_target(&self) -> &str {
        &self.target
    }

    /// Whether kernels run on a GPU (not the emulated device).
    pub fn on_gpu(&self) -> bool {
        !self.device.info().emulated
    }

    /// The simulator's launch settings (seed, workers, convergence...);
    /// the grid, block and binding of each launch replace those in it.
    /// Defaults: seed 0, one worker per core, converged warps. No effect on
    /// a GPU.
    pub fn simulator_config(&mut self) -> &mut LaunchConfig {
        &mut self.sim
    }

    /// A zeroed buffer of `len` elements where kernels can reach it.
    pub fn alloc_zeroed<T: bytemuck::Pod>(&self, len: usize) -> Result<Buffer<T>, HostError> {
        let bytes = HostError::buffer_bytes::<T>(len)?;
        Ok(Buffer {
            memory: self.device.alloc_zeroed(bytes)?,
            device: Arc::clone(&self.device),
            len,
            _element: PhantomData,
        })
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Result<Buffer<T>, HostError> {
        let buffer = self.alloc_zeroed::<T>(data.len())?;
        // SAFETY: the buffer is ours, as large as `data`, and no kernel runs
        // on it yet.
        unsafe {
            self.device
                .write(buffer.memory.addr(), bytemuck::cast_slice(data))
        }?;
        Ok(buffer)
    }

    /// Copies a buffer back to the host. A buffer of another launcher's
    /// device is an error (`WrongDevice`): its address means nothing here.
    pub fn read<T: bytemuck::Pod>(&self, buffer: &Buffer<T>) -> Result<Vec<T>, HostError> {
        if !Arc::ptr_eq(&buffer.device, &self.device) {
            return Err(HostError::WrongDevice(
                "a buffer is read by a launcher of the device that made it",
            ));
        }
        let mut out = vec![T::zeroed(); buffer.len];
        // SAFETY: the buffer is device memory of this launcher's device (just
        // checked) of at least `len` elements; launches are synchronous, so
        // no kernel writes it now.
        unsafe {
            self.device
                .read(buffer.memory.addr(), bytemuck::cast_slice_mut(&mut out))
        }?;
        Ok(out)
    }

    /// Launches `args`' kernel on `grid` × `block` threads and waits for it.
    ///
    /// # Safety
    /// As for `Kernel::run`: the parameters must be valid for the kernel
    /// (pointers from [`Buffer::kernel_ptr`] of buffers of this launcher
    /// that are large enough and outlive the launch), and no other thread
    /// reads a buffer the kernel writes ([`Launcher::read`]) while it runs.
    pub unsafe fn launch<K: Launch>(
        &self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        mut args: K,
    ) -> Result<LaunchReport, HostError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.module.launch(&mut args, grid, block, &self.sim) }
    }
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, PTX for {}", self.device.info(), self.target)?;
        if self.device.info().emulated {
            let (major, minor) = self.sim.capability;
            write!(f, ", lanes as on sm_{major}{minor}")?;
        }
        if let Some(why) = &self.why_not_gpu {
            write!(f, " (no GPU: {why})")?;
        }
        Ok(())
    }
}

/// `len` elements of `T` in device memory (host memory on the emulated
/// device); freed on drop.
pub struct Buffer<T> {
    memory: Box<dyn Allocation>,
    /// The device that made it: only that device's copies may reach it.
    device: Arc<dyn Device>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T> Buffer<T> {
    /// The address kernels use for this buffer.
    pub fn kernel_ptr(&self) -> *mut T {
        std::ptr::with_exposed_provenance_mut(self.memory.addr() as usize)
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
