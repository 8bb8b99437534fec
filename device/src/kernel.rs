//! Kernels written once, for the GPU and the simulator.
//!
//! [`kernel!`](crate::kernel!) plays the part of rust-cuda's `#[kernel]`: it
//! turns a plain function into
//!
//! * on nvptx64, an `extern "ptx-kernel"` entry point with the function's name
//!   (the kernel crate needs `#![feature(abi_ptx)]`), and
//! * everywhere, a module of the same name holding `Args` (the parameters as a
//!   `#[repr(C)]` struct that implements [`Kernel`]), `NAME`, and `body`, the
//!   function itself. A launch (the GPU's entry point, `Kernel::run` in the
//!   simulator) runs `body` on every lane and then
//!   [`kernel_ended`](crate::kernel_ended), which gives the heap's error
//!   record the kernel's name if the lane made its first bad free; calling
//!   `body` directly skips that.
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
//! unsafe { lanes::Args { out }.simulate(&LaunchConfig::linear(4, 96)) }?;
//! ```
//!
//! On the host, each kernel module also has `ENTRY`, an [`Entry`]: the kernel
//! by name, launchable from parameters given as bytes — what the emulated
//! device runs when a program launches by name, as cudarc's launch builder
//! does on a GPU. [`kernels!`](crate::kernels!) lists a crate's entries:
//!
//! ```ignore
//! #[cfg(not(target_arch = "nvptx64"))]
//! pub const KERNELS: &[warpalloc_device::kernel::Entry] =
//!     warpalloc_device::kernels![lanes, scratch];
//! ```
//!
//! Parameters must be `Copy` and implement [`Param`] (integers, floats, raw
//! pointers), as a CUDA kernel's parameters are plain values. Raw pointers name device memory
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
        // The lanes know the kernel's name (for the messages that name it).
        let cfg = cfg.clone().kernel(Self::NAME);
        // SAFETY: every lane runs the kernel with the parameters the caller
        // vouched for, during the launch, which ends before we return.
        warpalloc_sim::launch(&cfg, move || unsafe { self.run() })
    }
}

/// A kernel parameter: a plain value the host passes by its bytes. On the
/// host, [`Param::from_bytes`] rebuilds it from the bytes a launch builder
/// pushed (a pointer from its address, exposed as device addresses are).
///
/// # Safety
/// An implementor is plain data: every byte of it is its value's (no
/// padding left undefined), it holds nothing shared that lanes could mutate
/// at once (a `Cell`, a reference to one), and [`Param::to_bytes`] gives
/// exactly its memory's `size_of::<Self>()` bytes, which
/// [`Param::from_bytes`] reads back. A GPU gets the memory itself (cudarc's
/// `DeviceRepr`, which `warpalloc::KernelParam` implements from this), the
/// simulator the bytes: they must be the same, and a kernel's `Args` are
/// shared by every lane (`Send` and `Sync`). (A safe trait let safe code
/// break both: a review, 2026-12-07.)
pub unsafe trait Param: Copy {
    /// The value in `bytes` (native endianness), or `None` when `bytes` is
    /// not exactly `size_of::<Self>()` long.
    fn from_bytes(bytes: &[u8]) -> Option<Self>;

    /// The bytes a launch passes for the value (native endianness; a
    /// pointer's exposed address): what [`Param::from_bytes`] reads back.
    #[cfg(not(target_arch = "nvptx64"))]
    fn to_bytes(&self) -> std::vec::Vec<u8>;
}

macro_rules! plain_params {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive: plain data, its native-endian bytes.
        unsafe impl Param for $t {
            fn from_bytes(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_ne_bytes(bytes.try_into().ok()?))
            }

            #[cfg(not(target_arch = "nvptx64"))]
            fn to_bytes(&self) -> std::vec::Vec<u8> {
                self.to_ne_bytes().to_vec()
            }
        }
    )*};
}
plain_params!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

// SAFETY: an address (plain data; what it points to is the kernel's to
// synchronise, as in CUDA), its bytes the exposed address's.
unsafe impl<T> Param for *mut T {
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(core::ptr::with_exposed_provenance_mut(usize::from_bytes(
            bytes,
        )?))
    }

    #[cfg(not(target_arch = "nvptx64"))]
    fn to_bytes(&self) -> std::vec::Vec<u8> {
        self.expose_provenance().to_bytes()
    }
}

// SAFETY: as for `*mut T`.
unsafe impl<T> Param for *const T {
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(core::ptr::with_exposed_provenance(usize::from_bytes(
            bytes,
        )?))
    }

    #[cfg(not(target_arch = "nvptx64"))]
    fn to_bytes(&self) -> std::vec::Vec<u8> {
        self.expose_provenance().to_bytes()
    }
}

/// Why a launch by name did not run.
#[cfg(not(target_arch = "nvptx64"))]
#[derive(Debug)]
pub enum EntryError {
    /// The launch gave the wrong number of parameters.
    ParamCount {
        /// The kernel's.
        expected: usize,
        /// The launch's.
        given: usize,
        /// The kernel's parameters, `(name, type)`.
        signature: &'static [(&'static str, &'static str)],
        /// Bytes of each parameter the launch gave.
        given_sizes: std::vec::Vec<usize>,
    },
    /// Parameter `index` has the wrong size.
    ParamSize {
        /// Its position, from 0.
        index: usize,
        /// Bytes of the declared type.
        expected: usize,
        /// Bytes given.
        given: usize,
        /// The kernel's parameters, `(name, type)`.
        signature: &'static [(&'static str, &'static str)],
    },
    /// The simulator stopped the launch.
    Sim(warpalloc_sim::SimError),
}

#[cfg(not(target_arch = "nvptx64"))]
impl core::fmt::Display for EntryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        /// `(name: type, ...)`.
        struct Signature(&'static [(&'static str, &'static str)]);
        impl core::fmt::Display for Signature {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("(")?;
                for (i, (name, ty)) in self.0.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{name}: {ty}")?;
                }
                f.write_str(")")
            }
        }
        match self {
            EntryError::ParamCount {
                expected,
                given,
                signature,
                given_sizes,
            } => {
                write!(
                    f,
                    "the kernel takes {expected} parameters {}, the launch gave {given} (of \
                     {given_sizes:?} bytes): push one `.arg(&value)` per parameter, in order",
                    Signature(signature)
                )
            }
            EntryError::ParamSize {
                index,
                expected,
                given,
                signature,
            } => {
                let (name, ty) = signature.get(*index).copied().unwrap_or(("?", "?"));
                write!(
                    f,
                    "parameter {index} of {}, `{name}: {ty}`, is {expected} bytes; the launch \
                     gave {given}: pass a value of type {ty} there",
                    Signature(signature)
                )
            }
            EntryError::Sim(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl core::error::Error for EntryError {}

/// A kernel compiled into this program, by name: what the emulated device
/// launches for a PTX entry point of the same name.
#[cfg(not(target_arch = "nvptx64"))]
#[derive(Clone, Copy)]
pub struct Entry {
    /// The entry point's symbol.
    pub name: &'static str,
    /// Bytes of each parameter, in order.
    pub params: &'static [usize],
    /// Each parameter's name and type, as declared.
    pub signature: &'static [(&'static str, &'static str)],
    run: unsafe fn(
        &[&[u8]],
        &warpalloc_sim::LaunchConfig,
    ) -> Result<warpalloc_sim::LaunchStats, EntryError>,
}

#[cfg(not(target_arch = "nvptx64"))]
impl core::fmt::Debug for Entry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl Entry {
    /// For `kernel!`'s expansion.
    #[doc(hidden)]
    pub const fn new(
        name: &'static str,
        params: &'static [usize],
        signature: &'static [(&'static str, &'static str)],
        run: unsafe fn(
            &[&[u8]],
            &warpalloc_sim::LaunchConfig,
        ) -> Result<warpalloc_sim::LaunchStats, EntryError>,
    ) -> Entry {
        Entry {
            name,
            params,
            signature,
            run,
        }
    }

    /// Runs the kernel in the simulator with `params`, each parameter's
    /// bytes in declaration order.
    ///
    /// # Safety
    /// As for [`Kernel::run`]: the parameters must be valid for the kernel
    /// for the whole launch.
    pub unsafe fn launch(
        &self,
        params: &[&[u8]],
        cfg: &warpalloc_sim::LaunchConfig,
    ) -> Result<warpalloc_sim::LaunchStats, EntryError> {
        let sizes: std::vec::Vec<usize> = params.iter().map(|p| p.len()).collect();
        self.check_params(&sizes)?;
        // SAFETY: forwarded from the caller; the sizes match.
        unsafe { (self.run)(params, cfg) }
    }

    /// `Ok` if a launch's parameters of `sizes` bytes match the kernel's,
    /// else which do not, with the kernel's parameters and their types.
    pub fn check_params(&self, sizes: &[usize]) -> Result<(), EntryError> {
        if sizes.len() != self.params.len() {
            return Err(EntryError::ParamCount {
                expected: self.params.len(),
                given: sizes.len(),
                signature: self.signature,
                given_sizes: sizes.to_vec(),
            });
        }
        if let Some((index, (&given, &expected))) = sizes
            .iter()
            .zip(self.params)
            .enumerate()
            .find(|(_, (given, expected))| given != expected)
        {
            return Err(EntryError::ParamSize {
                index,
                expected,
                given,
                signature: self.signature,
            });
        }
        Ok(())
    }
}

/// The [`Entry`]s of the kernels named, as a `&'static [Entry]` (host
/// builds): `kernels![scratch, lanes]`.
#[macro_export]
macro_rules! kernels {
    ($($kernel:path),* $(,)?) => {
        &[$( { use $kernel as k; k::ENTRY } ),*]
    };
}

/// Defines a kernel; see the [module docs](mod@crate::kernel). Parameters may
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
                    unsafe { body($( self.$arg ),*) };
                    $crate::kernel_ended(NAME);
                }

                fn for_each_param(&mut self, f: &mut dyn FnMut(*mut ::core::ffi::c_void)) {
                    $( f(&raw mut self.$arg as *mut ::core::ffi::c_void); )*
                    let _ = f;
                }
            }

            /// The kernel by name, launchable from its parameters' bytes
            /// (the emulated device's launches by name).
            #[cfg(not(target_arch = "nvptx64"))]
            pub const ENTRY: $crate::kernel::Entry = $crate::kernel::Entry::new(
                NAME,
                &[$( ::core::mem::size_of::<$ty>() ),*],
                &[$( (stringify!($arg), stringify!($ty)) ),*],
                launch_from_bytes,
            );

            /// # Safety
            /// As for `Kernel::run`; `params` has one entry of the right
            /// size per parameter (`Entry::launch` checked).
            #[cfg(not(target_arch = "nvptx64"))]
            unsafe fn launch_from_bytes(
                params: &[&[u8]],
                cfg: &$crate::sim::LaunchConfig,
            ) -> Result<$crate::sim::LaunchStats, $crate::kernel::EntryError> {
                let mut _next = params.iter();
                let args = Args {
                    $( $arg: _next
                        .next()
                        .and_then(|b| <$ty as $crate::kernel::Param>::from_bytes(b))
                        .ok_or_else(|| $crate::kernel::EntryError::ParamCount {
                            expected: ENTRY.params.len(),
                            given: params.len(),
                            signature: ENTRY.signature,
                            given_sizes: params.iter().map(|p| p.len()).collect(),
                        })?, )*
                };
                // SAFETY: forwarded from the caller.
                unsafe { $crate::kernel::Kernel::simulate(args, cfg) }
                    .map_err($crate::kernel::EntryError::Sim)
            }

            /// The GPU entry point.
            ///
            /// # Safety
            /// Launched by the driver with parameters of the declared types.
            #[cfg(target_arch = "nvptx64")]
            #[unsafe(no_mangle)]
            pub unsafe extern "ptx-kernel" fn $name($( $arg: $ty ),*) {
                // SAFETY: forwarded from the launcher, who owns the contract.
                unsafe { body($( $arg ),*) };
                $crate::kernel_ended(NAME);
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
