//! The first project's host program: attaches a warpalloc heap to a context,
//! links the kernels' module, launches three allocating kernels with the
//! launch builder on two streams, and checks what they wrote and what the
//! heap saw. `cargo run` runs it in the CPU warp simulator;
//! `cargo run --features gpu` on GPU 0 through cudarc.

use std::error::Error;

// The one place where the GPU and the simulator differ: where the context
// and the launch API come from.
#[cfg(feature = "gpu")]
mod device {
    pub use cudarc::driver::{CudaContext, DevicePtr, LaunchConfig, PushKernelArg};
    pub use cudarc::nvrtc::Ptx;

    /// GPU 0: "no CUDA driver" or "no GPU" as an error, where cudarc's
    /// `CudaContext::new(0)` would panic.
    pub fn context() -> Result<std::sync::Arc<CudaContext>, Box<dyn std::error::Error>> {
        Ok(warpalloc::open_gpu(0)?)
    }
}
#[cfg(not(feature = "gpu"))]
mod device {
    pub use warpalloc::emulated::{CudaContext, DevicePtr, LaunchConfig, Ptx, PushKernelArg};

    /// The emulated device, running the kernels compiled into this program.
    pub fn context() -> Result<std::sync::Arc<CudaContext>, Box<dyn std::error::Error>> {
        Ok(CudaContext::new(first_kernels::KERNELS)?)
    }
}
use device::{DevicePtr, LaunchConfig, Ptx, PushKernelArg};

/// In the simulator the kernels' `Vec` and `Box` use the program's global
/// allocator: `WarpAlloc` sends them to the heap of the launch, and
/// everything else (outside launches) to the system allocator.
#[global_allocator]
static GLOBAL: warpalloc::WarpAlloc = warpalloc::WarpAlloc;

/// The kernels as PTX, built by build.rs.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/first_kernels.ptx"));

/// Threads per kernel.
const N: u32 = 2048;

fn main() -> Result<(), Box<dyn Error>> {
    let ctx = device::context()?;
    let module = ctx.load_module(Ptx::from_src(PTX))?;

    // The heap: attached to the context, linked to every module whose
    // kernels allocate. It serves them on any stream while they run.
    let heap = warpalloc::Heap::attach(&ctx, warpalloc::HeapConfig::default())?;
    heap.link(&module)?;

    let squares = module.load_function("squares")?;
    let boxes = module.load_function("boxes")?;
    let blocks = module.load_function("blocks")?;

    // Data-dependent lengths: thread i's Vec holds (i * 7) % 61 squares.
    let counts: Vec<u32> = (0..N).map(|i| (i * 7) % 61).collect();

    let first = ctx.default_stream();
    let second = ctx.new_stream()?;
    let counts_dev = first.clone_htod(&counts)?;
    let mut sums = first.alloc_zeros::<u64>(N as usize)?;
    let mut boxed = second.alloc_zeros::<u64>(N as usize)?;
    let mut ok = second.alloc_zeros::<u32>(N as usize)?;
    // The same calls on both devices: zero a slice on its stream, and read
    // a slice's device address (to hand it to a kernel inside a struct; the
    // record borrows the slice until it drops, at the block's end).
    second.memset_zeros(&mut ok)?;
    let sums_addr = {
        let (addr, _record) = sums.device_ptr(&first);
        addr
    };

    let cfg = LaunchConfig {
        grid_dim: (N / 256, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: each kernel gets N elements for each of its pointers.
    unsafe {
        first
            .launch_builder(&squares)
            .arg(&counts_dev)
            .arg(&mut sums)
            .arg(&N)
            .launch(cfg)?;
        second
            .launch_builder(&boxes)
            .arg(&mut boxed)
            .arg(&N)
            .launch(cfg)?;
        second
            .launch_builder(&blocks)
            .arg(&mut ok)
            .arg(&N)
            .launch(cfg)?;
    }
    first.synchronize()?;
    second.synchronize()?;

    let sums = first.clone_dtoh(&sums)?;
    let boxed = second.clone_dtoh(&boxed)?;
    let ok = second.clone_dtoh(&ok)?;
    let mut wrong = 0;
    for i in 0..N as usize {
        wrong += usize::from(sums[i] != first_kernels::sum_of_squares(counts[i]));
        wrong += usize::from(boxed[i] != first_kernels::boxed_value(i as u32));
        wrong += usize::from(ok[i] != 1);
    }

    // What the heap saw (synchronises the context first).
    let stats = heap.stats()?;
    println!(
        "{} threads x 3 kernels on {}: {} wrong results (sums at {sums_addr:#x})",
        N,
        heap.device().info(),
        wrong
    );
    println!(
        "heap: {} slabs made, {} large blocks, {} RPC requests; peak mapped {} KiB; \
         live now: {} allocations; device errors: {}",
        stats.traffic.slabs_from_provider,
        stats.traffic.large_allocations,
        stats.rpc.allocs + stats.rpc.frees,
        stats.region.peak_mapped_bytes >> 10,
        stats.live.live_allocations(),
        stats.device
    );
    if wrong != 0 {
        return Err(format!("{wrong} wrong results").into());
    }
    if stats.traffic.served() == 0 {
        return Err(
            "the heap served nothing: the kernels did not allocate through warpalloc".into(),
        );
    }
    if stats.live.live_allocations() != 0
        || stats.device.double_frees + stats.device.invalid_frees != 0
    {
        return Err("the heap has leaks or bad frees".into());
    }
    println!("ok");
    Ok(())
}
