//! warpalloc: `malloc`/`free` inside Rust GPU kernels — the library a
//! program that launches kernels depends on.
//!
//! ```text
//!   your kernel crate ── warpalloc-device (no_std): malloc, free, WarpAlloc,
//!                        kernel!{}; built to PTX by warpalloc-builder
//!   your program ─────── warpalloc (this crate): Heap over a Device
//!                          ├── device::Cuda      a GPU (CUDA driver, cudarc)
//!                          └── device::Emulated  the CPU warp simulator
//! ```
//!
//! A [`Heap`] binds a module's `WARPALLOC_HEAP`, serves its kernels' requests
//! for memory from the process's RPC server thread, and backs them with CUDA
//! virtual memory (or its host emulation). This crate has no command-line
//! dependencies and builds no kernels; the `warpalloc` tool
//! (`warpalloc-tool`) is a crate of its own.
//!
//! # A complete program
//! A kernel that allocates, a heap attached to the context and linked to
//! the kernels' module, a launch on a stream, and the heap's report. The
//! kernel crate is built to PTX by `warpalloc-builder` in the host crate's
//! build.rs (`examples/first-project/` is this program, runnable: `cargo
//! run` there, in the simulator, or `cargo run --features gpu` on a GPU,
//! where the context is `warpalloc::open_gpu(0)?` and the launch API
//! cudarc's).
//!
//! ```no_run
//! use std::error::Error;
//!
//! use warpalloc::emulated::{CudaContext, LaunchConfig, Ptx, PushKernelArg};
//! use warpalloc::{Heap, HeapConfig, WarpAlloc};
//! use warpalloc_device::{free, kernel, malloc, simt};
//!
//! // In the kernel crate (`#![no_std]`):
//! kernel! {
//!     /// Each thread takes 64 bytes, writes its index there, copies it to
//!     /// `out` and frees the block.
//!     pub fn scratch(out: *mut u32) {
//!         let me = simt::global_thread_id() as usize;
//!         let p = malloc(64).cast::<u32>();
//!         if !p.is_null() {
//!             // SAFETY: a fresh block of 64 bytes; `out` has a word per
//!             // thread.
//!             unsafe {
//!                 p.write(me as u32);
//!                 out.add(me).write(p.read());
//!                 free(p.cast());
//!             }
//!         }
//!     }
//! }
//!
//! // In the host program: kernels' `Vec`/`Box` go to the launch's heap in
//! // the simulator.
//! #[global_allocator]
//! static GLOBAL: WarpAlloc = WarpAlloc;
//!
//! /// Runs `scratch` from `ptx` (the kernel crate's PTX: in your program,
//! /// `include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"))`).
//! fn run(ptx: &str) -> Result<(), Box<dyn Error>> {
//!     // The simulator runs the kernels compiled into this program.
//!     let ctx = CudaContext::new(warpalloc_device::kernels![scratch])?;
//!     let module = ctx.load_module(Ptx::from_src(ptx))?;
//!     let heap = Heap::attach(&ctx, HeapConfig::default())?;
//!     heap.link(&module)?;
//!
//!     let f = module.load_function("scratch")?;
//!     let stream = ctx.default_stream();
//!     let mut out = stream.alloc_zeros::<u32>(1024)?;
//!     let cfg = LaunchConfig {
//!         grid_dim: (4, 1, 1),
//!         block_dim: (256, 1, 1),
//!         shared_mem_bytes: 0,
//!     };
//!     // SAFETY: `out` has a word for each of the 1 024 threads.
//!     unsafe { stream.launch_builder(&f).arg(&mut out).launch(cfg)? };
//!     let out = stream.memcpy_dtov(&out)?;
//!     assert!(out.iter().enumerate().all(|(i, &v)| v == i as u32));
//!     println!("{}", heap.stats()?);
//!     Ok(())
//! }
//! # fn main() {
//! #     run("").unwrap();
//! # }
//! ```

#![warn(missing_docs)]

pub use warpalloc_host::{
    Buffer, ClassPeak, Heap, HeapConfig, HeapProfile, HeapStats, HostError, KernelParam, Launcher,
    Mode, Moment, Prefer, RpcCounts, Shortfall, Snapshot, SpillCounts, backing, device, emulated,
    server, snapshot,
};

/// GPU `n`'s context as a `Result` ("no CUDA driver" rather than cudarc's
/// panic), and whether libcuda can be loaded at all.
pub use warpalloc_host::{driver_present, open_gpu};

/// Whether this program's `#[global_allocator]` is `WarpAlloc` (in the
/// simulator only then do kernels' `Vec`/`Box` use the heap; a program that
/// links a module on the emulated device without it is told so once, on
/// stderr: [`NOT_WARPALLOC`]).
pub use warpalloc_device::is_global_allocator;
pub use warpalloc_host::NOT_WARPALLOC;

/// What a heap attaches to and links (implemented for cudarc's
/// `Arc<CudaContext>` and `Arc<CudaModule>`, and for the emulated ones).
pub use warpalloc_host::device::{AsDevice, AsModule};

/// The cudarc that warpalloc's GPU side is built on (0.19): a program's own
/// `CudaContext` and `CudaModule` must come from this version to attach.
pub use warpalloc_host::cudarc;

/// The global allocator for a host program whose simulated kernels use
/// `Vec`/`Box`, and for kernel crates on the GPU. On the host a heap's
/// pointers go back to that heap and everything else to the system
/// allocator; on the GPU every allocation is the heap's (a pointer it never
/// handed out is an invalid free, counted in its error record).
pub use warpalloc_device::WarpAlloc;

/// What the device heap reports: its error record, traffic and census.
pub use warpalloc_device::heap::Census;
pub use warpalloc_device::{ClassCounts, Errors, KernelName, Traffic};

/// Kernels written once for the GPU and the simulator (`kernel!{}` defines
/// them in the kernel crate).
pub use warpalloc_device::kernel::Kernel;

/// The CPU warp simulator's launch settings (seed, workers, convergence),
/// for the emulated device.
pub use warpalloc_sim::{Convergence, LaunchConfig};
