//! Kernels written once, for the GPU and the simulator.
//!
//! [`kernel!`](crate::kernel!) plays the part of rust-cuda's `#[kernel]`: it
//! turns a plain function into
//!
//! * on nvptx64, an `extern "ptx-kernel"` entry point with the function's name
//!   (the kernel crate needs `#![feature(abi_ptx)]`), and
//! * everywhere, a module of the same name holding `Args` (the parameters as a
//!   `#[repr(C)]` struct that implements [`Kernel`]), `NAME`, and `body`, the
//!   function itself — which the simulator runs on every lane.
//!
//! ```ignore
//! warpalloc_device::kernel! {
//!     /// Writes each thread's lane id.
//!     pub fn lanes(out: *mut u32) {
//!         let i = simt::global_thread_id() as usize;
//!         // SAFETY: the host sized `out` for the grid.
//!         unsafe { *out.add(i) = simt::lane_id() };
//!     }
//! }
//! // host, with `out` sized for the grid:
//     unsafe { lanes::Args { out }.simulate(&LaunchConfig::linear(4, 96)) }?;
//! ```
//!
//! Parameters must be `Copy` and FFI-safe (integers, raw pointers, `repr(C)`
//! structs of those), as for any CUDA kernel. Raw pointers name device memory
//! (host memory in the simulator); the kernel's code is responsible for the
//! synchronisation of what they point to, exactly as in CUDA.

use core::ffi::c_void;

/// A kernel's parameters, launchable on a GPU (by name, with the parameter
/// pointers that `cuLaunchKernel` takes) or in the simulator.
pub trait Kernel: Copy + Send + Sync {
    /// The entry point's symbol in the PTX.
    const NAME: &'static str;

    /// Runs the kernel body on the calling lane.
    ///
    /// # Safety
    /// The parameters must be what the kernel's documentation requires (its
    /// pointers valid for the accesses it makes, for the whole launch), as
    /// for a launch on the GPU.
    unsafe fn run(&self);

    /// Calls `f` with a pointer to each parameter, in declaration order.
    fn for_each_param(&mut self, f: &mut dyn FnMut(*mut c_void));

    /// Runs the kernel on every thread of `cfg`'s grid in the CPU warp
    /// simulator.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: the parameters must be valid for the whole
    /// launch.
    #[cfg(not(target_arch = "nvptx64"))]
    unsafe fn simulate(
        self,
        cfg: &warpalloc_sim::LaunchConfig,
    ) -> Result<warpalloc_sim::LaunchStats, warpalloc_sim::SimError> {
        // SAFETY: every lane runs the kernel with the parameters the caller
        // vouched for, during the launch, which ends before we return.
        warpalloc_sim::launch(cfg, move || unsafe { self.run() })
    }
}

/// Defines a kernel; see the [module docs](crate::kernel). Parameters may
/// be `mut` (mutable inside the body, as in any function).
#[macro_export]
macro_rules! kernel {
    // Parameters are normalised one at a time to `[name : type ; mut?]`.
    (@params $meta:tt $vis:tt $name:ident [$($done:tt)*]
        (mut $arg:ident : $ty:ty $(, $($rest:tt)*)?) $body:block
    ) => {
        $crate::kernel!(@params $meta $vis $name [$($done)* [$arg : $ty ; mut]]
            ($($($rest)*)?) $body);
    };
    (@params $meta:tt $vis:tt $name:ident [$($done:tt)*]
        ($arg:ident : $ty:ty $(, $($rest:tt)*)?) $body:block
    ) => {
        $crate::kernel!(@params $meta $vis $name [$($done)* [$arg : $ty ;]]
            ($($($rest)*)?) $body);
    };
    (@params [$(#[$meta:meta])*] [$vis:vis] $name:ident
        [$([$arg:ident : $ty:ty ; $($mutable:tt)?])*] () $body:block
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case, dead_code)]
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            /// The kernel's symbol.
            pub const NAME: &str = stringify!($name);

            /// The kernel's parameters, in declaration order.
            #[derive(Clone, Copy, Debug)]
            #[repr(C)]
            pub struct Args {
                $( #[allow(missing_docs)] pub $arg: $ty, )*
            }

            // SAFETY: kernel parameters are copied to every thread, as on the
            // GPU; what their pointers address is device memory whose
            // synchronisation is the kernel's own business, as in CUDA.
            unsafe impl Send for Args {}
            // SAFETY: as for `Send`.
            unsafe impl Sync for Args {}

            /// The kernel body, as every thread runs it.
            ///
            /// # Safety
            /// The parameters must be what the kernel's documentation
            /// requires, as for a launch on the GPU.
            #[inline(always)]
            pub unsafe fn body($( $($mutable)? $arg: $ty ),*) $body

            impl $crate::kernel::Kernel for Args {
                const NAME: &'static str = NAME;

                #[inline(always)]
                unsafe fn run(&self) {
                    // SAFETY: forwarded from the caller of `run`.
                    unsafe { body($( self.$arg ),*) }
                }

                fn for_each_param(&mut self, f: &mut dyn FnMut(*mut ::core::ffi::c_void)) {
                    $( f(&raw mut self.$arg as *mut ::core::ffi::c_void); )*
                    let _ = f;
                }
            }

            /// The GPU entry point.
            ///
            /// # Safety
            /// Launched by the driver with parameters of the declared types.
            #[cfg(target_arch = "nvptx64")]
            #[unsafe(no_mangle)]
            pub unsafe extern "ptx-kernel" fn $name($( $arg: $ty ),*) {
                // SAFETY: forwarded from the launcher, who owns the contract.
                unsafe { body($( $arg ),*) }
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident ( $($params:tt)* ) $body:block
    ) => {
        $crate::kernel!(@params [$(#[$meta])*] [$vis] $name [] ($($params)*) $body);
    };
}
