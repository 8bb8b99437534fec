//! `Launcher`: one way to launch kernels and move their data, on a GPU when
//! there is one and in the CPU warp simulator otherwise.

use std::fmt;
use std::time::Duration;

use cudarc::driver::{CudaSlice, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use warpalloc_device::kernel::Kernel;
use warpalloc_sim::{Convergence, LaunchConfig, LaunchStats};

use crate::HostError;
use crate::gpu::{Gpu, Module};

/// Where to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefer {
    /// The GPU when one is usable, else the simulator.
    Auto,
    /// The GPU, or an error saying why not.
    Gpu,
    /// The simulator, even when a GPU is present.
    Simulator,
}

/// Where a launcher runs kernels.
pub enum Target {
    /// A GPU with the module loaded.
    Gpu {
        /// The device.
        gpu: Box<Gpu>,
        /// The kernels' module.
        module: Module,
    },
    /// The CPU warp simulator.
    Simulator {
        /// Why not a GPU (`None` when the simulator was asked for).
        why: Option<String>,
    },
}

/// Launches kernels of one PTX module on a GPU, or the same kernels (compiled
/// into this program) in the simulator.
pub struct Launcher {
    target: Target,
    sim: LaunchConfig,
}

/// What one launch did.
#[derive(Debug, Clone, Copy)]
pub struct LaunchReport {
    /// Wall time from launch to completion.
    pub elapsed: Duration,
    /// The simulator's counters (`None` on a GPU).
    pub simulator: Option<LaunchStats>,
}

impl Launcher {
    /// A launcher for `ptx` (the kernels as PTX; the simulator runs the same
    /// kernels as compiled into this program).
    pub fn new(ptx: &str, prefer: Prefer) -> Result<Launcher, HostError> {
        let target = match prefer {
            Prefer::Simulator => Target::Simulator { why: None },
            Prefer::Gpu => {
                Self::gpu_target(ptx).map_err(|e| HostError::GpuRequired(Box::new(e)))?
            }
            Prefer::Auto => match Self::gpu_target(ptx) {
                Ok(target) => target,
                Err(why) => Target::Simulator {
                    why: Some(why.to_string()),
                },
            },
        };
        Ok(Launcher {
            target,
            sim: LaunchConfig::linear(1, 1)
                .workers(default_workers())
                .convergence(Convergence::Converged),
        })
    }

    fn gpu_target(ptx: &str) -> Result<Target, HostError> {
        let gpu = Gpu::open(0)?;
        let module = gpu.load(ptx)?;
        Ok(Target::Gpu {
            gpu: Box::new(gpu),
            module,
        })
    }

    /// Where kernels run.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Whether kernels run on a GPU.
    pub fn on_gpu(&self) -> bool {
        matches!(self.target, Target::Gpu { .. })
    }

    /// The simulator's launch settings (seed, workers, convergence...);
    /// the grid and block of each launch replace those in it. Defaults: seed
    /// 0, one worker per core, converged warps. No effect on a GPU.
    pub fn simulator_config(&mut self) -> &mut LaunchConfig {
        &mut self.sim
    }

    /// A zeroed buffer of `len` elements where kernels can reach it.
    pub fn alloc_zeroed<T: DeviceRepr + ValidAsZeroBits + Copy + Default>(
        &self,
        len: usize,
    ) -> Result<Buffer<T>, HostError> {
        match &self.target {
            Target::Gpu { gpu, .. } => gpu
                .stream()
                .alloc_zeros(len)
                .map(Buffer::Gpu)
                .map_err(HostError::driver("cuMemAlloc")),
            Target::Simulator { .. } => Ok(Buffer::Host(vec![T::default(); len])),
        }
    }

    /// Copies a buffer back to the host.
    pub fn read<T: DeviceRepr + Copy>(&self, buffer: &Buffer<T>) -> Result<Vec<T>, HostError> {
        match (buffer, &self.target) {
            (Buffer::Gpu(slice), Target::Gpu { gpu, .. }) => gpu
                .stream()
                .clone_dtoh(slice)
                .map_err(HostError::driver("cuMemcpyDtoH")),
            (Buffer::Host(v), _) => Ok(v.clone()),
            (Buffer::Gpu(_), Target::Simulator { .. }) => Err(HostError::InvalidPtx(
                "a GPU buffer cannot be read through a simulator launcher".into(),
            )),
        }
    }

    /// Launches `args`' kernel on `grid` × `block` threads and waits for it.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: the parameters must be valid for the kernel
    /// (pointers from [`Buffer::kernel_ptr`] of buffers that are large enough
    /// and outlive the launch).
    pub unsafe fn launch<K: Kernel>(
        &self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: K,
    ) -> Result<LaunchReport, HostError> {
        match &self.target {
            Target::Gpu { gpu, module } => {
                // SAFETY: forwarded from the caller.
                let elapsed = unsafe { gpu.launch(module, grid, block, args) }?;
                Ok(LaunchReport {
                    elapsed,
                    simulator: None,
                })
            }
            Target::Simulator { .. } => {
                let mut cfg = self.sim.clone();
                cfg.grid_dim = grid;
                cfg.block_dim = block;
                // SAFETY: forwarded from the caller.
                let stats = unsafe { args.simulate(&cfg) }?;
                Ok(LaunchReport {
                    elapsed: stats.elapsed,
                    simulator: Some(stats),
                })
            }
        }
    }
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Gpu { gpu, .. } => {
                let info = gpu.info();
                write!(
                    f,
                    "GPU {}: {} (sm_{}{}, {} SMs, {:.1} GiB, driver {}.{})",
                    info.ordinal,
                    info.name,
                    info.compute_capability.0,
                    info.compute_capability.1,
                    info.multiprocessors,
                    info.total_memory as f64 / f64::from(1u32 << 30),
                    info.driver_version / 1000,
                    info.driver_version % 1000 / 10
                )
            }
            Target::Simulator { why: None } => write!(f, "CPU warp simulator"),
            Target::Simulator { why: Some(why) } => {
                write!(f, "CPU warp simulator (no GPU: {why})")
            }
        }
    }
}

/// Memory that kernels can reach: device memory on a GPU, host memory in the
/// simulator.
pub enum Buffer<T> {
    /// Device memory.
    Gpu(CudaSlice<T>),
    /// Host memory (simulator).
    Host(Vec<T>),
}

impl<T: DeviceRepr> Buffer<T> {
    /// The address kernels use for this buffer.
    pub fn kernel_ptr(&mut self) -> *mut T {
        match self {
            Buffer::Gpu(slice) => {
                let stream = std::sync::Arc::clone(slice.stream());
                let (ptr, _sync) = slice.device_ptr_mut(&stream);
                ptr as usize as *mut T
            }
            Buffer::Host(v) => v.as_mut_ptr(),
        }
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        match self {
            Buffer::Gpu(slice) => slice.len(),
            Buffer::Host(v) => v.len(),
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
