//! The atomics facade: every atomic and fence of the device code goes through
//! here, so that one source runs on the GPU, in the simulator (a switch point
//! before each operation) and under loom (loom's model atomics).
//!
//! ```text
//!               ┌ nvptx64 ─ Atomic*: PTX at .gpu scope (`ld.relaxed.gpu.global`,
//!               │           `atom.relaxed.gpu.global.*`); SysAtomic*: core
//!               │           atomics (loads, stores `.sys`); fences
//!               │           `fence.*.{gpu,sys}`
//!   sync::* ────┼ host    ─ core atomics + a count and a simulator switch point
//!               │           each
//!               └ loom    ─ loom::sync::atomic (cfg(loom))
//! ```
//!
//! **Scope.** Device state (the heap, slabs, the mailbox's lock bits) is only
//! ever touched by kernels between launches' host copies, so its atomics are
//! `Atomic*`: `.gpu` scope, the `.global` state space (`cvta.to.global` of the
//! address first), which is cheaper than `.sys` and compiles to one
//! instruction where LLVM's generic form adds a fallback. So an `Atomic*` must
//! live in global memory on the GPU (the heap, a kernel's buffer, a module
//! global): one on the stack or in shared memory would be addressed as
//! global memory, wrongly. Memory the host reads *while* kernels run — the
//! RPC ports in mapped host memory — uses `SysAtomic*`: LLVM's atomics, whose
//! loads and stores are `.sys` (`ld.relaxed.sys`, `ld.acquire.sys`,
//! `st.release.sys`). Their read-modify-writes are not: LLVM emits an
//! unscoped `atom.global.*`, and PTX assumes `.gpu` when `atom` names no
//! scope (PTX ISA, `atom`); a read-modify-write on mapped host memory is
//! atomic for the CPU only where the device has host-native atomics anyway.
//! The mailbox uses loads and stores only.
//!
//! **Read-modify-writes take no ordering: they are always relaxed.** LLVM 22
//! emits `fetch_add`/`fetch_or`/`swap`... on nvptx64 as plain relaxed
//! `atom.global.*` whatever ordering Rust asks for, so an ordering there would
//! be a lie on the GPU while loom and the simulator honoured it. Code orders a
//! read-modify-write with an explicit [`fence`] of the scope it needs, as LLVM
//! libc's GPU allocator does; each such fence carries an `// ORDERING:` comment
//! naming what it pairs with. A counter whose old value the bumping lane
//! does not need is bumped with `add`, a `red.relaxed.gpu.global.add` on the GPU: the lane does not wait
//! for it, and the simulator counts it as a read-modify-write but not as a
//! dependent round trip (`Access::Reduction`).
//! Loads and stores keep their ordering (LLVM emits
//! `ld.acquire.sys` / `st.release.sys`); for state only the GPU sees, prefer
//! relaxed accesses plus a [`Scope::Gpu`] fence, which is cheaper than `.sys`.
//! (`Atomic*` loads and stores honour `Acquire`/`Release`/`SeqCst` at `.gpu`
//! scope: `ld.acquire.gpu`, `st.release.gpu`, a `fence.sc.gpu` first for
//! `SeqCst`.)

pub use core::sync::atomic::Ordering;

use crate::simt::Scope;

#[cfg(not(loom))]
use core::sync::atomic as inner;
#[cfg(loom)]
use loom::sync::atomic as inner;

/// What an operation is, for the simulator's counts.
#[derive(Clone, Copy)]
#[cfg_attr(any(target_arch = "nvptx64", loom), allow(dead_code))]
enum Op {
    Load,
    Store,
    Rmw,
    /// A read-modify-write with no result (`red`): counted as one, but
    /// not as a round trip.
    Reduction,
    /// Counted as `fences` (any scope).
    Fence,
}

/// Called before every operation: on the host, counts it (the launch's
/// `atomic_loads`/`_stores`/`_rmws`/`fences`, and its `sys_*` too when
/// `sys`: an operation at system scope; a read-modify-write against `addr` when the
/// launch counts addresses) and is a simulator switch point.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
fn hook(op: Op, sys: bool, addr: usize) {
    #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
    {
        let access = match op {
            Op::Load => warpalloc_sim::Access::Load,
            Op::Store => warpalloc_sim::Access::Store,
            Op::Rmw => warpalloc_sim::Access::Rmw,
            Op::Reduction => warpalloc_sim::Access::Reduction,
            Op::Fence => warpalloc_sim::Access::Fence,
        };
        warpalloc_sim::count_access_at(access, sys, addr);
        warpalloc_sim::switch_point();
    }
    #[cfg(any(target_arch = "nvptx64", loom))]
    let _ = (op, sys, addr);
}

macro_rules! atomic_int {
    ($(#[$doc:meta])* $name:ident, $inner:ident, $int:ty, $ops:path, $sys:literal) => {
        $(#[$doc])*
        #[repr(transparent)]
        pub struct $name(inner::$inner);

        impl $name {
            /// A new atomic holding `value`. On the GPU an `Atomic*` is used
            /// in global memory only (see the module's docs).
            #[cfg(not(loom))]
            pub const fn new(value: $int) -> Self {
                $name(inner::$inner::new(value))
            }

            /// A new atomic holding `value`.
            #[cfg(loom)]
            pub fn new(value: $int) -> Self {
                $name(inner::$inner::new(value))
            }

            /// Views `ptr` as an atomic (not under loom).
            ///
            /// # Safety
            /// As [`core::sync::atomic`]'s `from_ptr`: `ptr` is aligned, valid
            /// for reads and writes for `'a`, and only accessed atomically
            /// while the reference lives. On the GPU, for an `Atomic*`, `ptr`
            /// points into global memory (see the module's docs).
            #[cfg(not(loom))]
            #[inline(always)]
            pub unsafe fn from_ptr<'a>(ptr: *mut $int) -> &'a Self {
                // SAFETY: the caller's contract above; `Self` is
                // `repr(transparent)` over the core atomic.
                unsafe { &*(inner::$inner::from_ptr(ptr) as *const inner::$inner as *const Self) }
            }

            /// Loads the value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn load(&self, order: Ordering) -> $int {
                hook(Op::Load, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::load(self.0.as_ptr(), order) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.load(order)
            }

            /// Stores `value`.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn store(&self, value: $int, order: Ordering) {
                hook(Op::Store, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::store(self.0.as_ptr(), value, order) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.store(value, order)
            }

            /// Relaxed swap; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn swap(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::swap(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.swap(value, Ordering::Relaxed)
            }

            /// Relaxed compare-and-swap: `Ok(previous)` if it held `current`
            /// and now holds `new`, else `Err(actual)`.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn compare_exchange(&self, current: $int, new: $int) -> Result<$int, $int> {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::compare_exchange(self.0.as_ptr(), current, new) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0                     .compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed)
            }

            /// Relaxed wrapping add; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_add(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_add(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_add(value, Ordering::Relaxed)
            }

            /// Relaxed wrapping add with no result (PTX `red`): the lane
            /// goes on without waiting for it — for counters no path reads.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn add(&self, value: $int) {
                hook(Op::Reduction, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::add(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    self.0.fetch_add(value, Ordering::Relaxed);
                }
            }

            /// Relaxed wrapping subtract; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_sub(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_sub(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_sub(value, Ordering::Relaxed)
            }

            /// Relaxed bitwise and; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_and(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_and(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_and(value, Ordering::Relaxed)
            }

            /// Relaxed bitwise or; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_or(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_or(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_or(value, Ordering::Relaxed)
            }

            /// Relaxed bitwise xor; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_xor(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_xor(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_xor(value, Ordering::Relaxed)
            }

            /// Relaxed maximum; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_max(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_max(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_max(value, Ordering::Relaxed)
            }

            /// Relaxed minimum; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_min(&self, value: $int) -> $int {
                hook(Op::Rmw, $sys, self as *const Self as usize);
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned
                // while `self` is borrowed.
                return unsafe { use $ops as ops; ops::fetch_min(self.0.as_ptr(), value) };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.fetch_min(value, Ordering::Relaxed)
            }

            /// A relaxed load that is neither counted nor a simulator switch
            /// point (host builds): for host code that must not yield while
            /// it holds a lock (the registry's lookups).
            #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
            #[inline(always)]
            pub fn load_unhooked(&self) -> $int {
                self.0.load(Ordering::Relaxed)
            }

            /// A plain read, for a value that no one writes while kernels
            /// run (the heap's configuration, written by the host between
            /// launches): on the GPU an ordinary `ld.global` that the
            /// compiler may merge, hoist or repeat instead of keeping the
            /// value in a register; neither counted nor a simulator switch
            /// point.
            #[inline(always)]
            pub fn load_config(&self) -> $int {
                #[cfg(target_arch = "nvptx64")]
                // SAFETY: the atomic's own address, valid and aligned while
                // `self` is borrowed; no write races with the read (the
                // caller's promise: written only while no kernel runs).
                return unsafe { self.0.as_ptr().read() };
                #[cfg(not(target_arch = "nvptx64"))]
                self.0.load(Ordering::Relaxed)
            }

            /// The address of the value (not under loom).
            #[cfg(not(loom))]
            #[inline(always)]
            pub fn as_ptr(&self) -> *mut $int {
                self.0.as_ptr()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                // A debug print is not an operation of the algorithm: no
                // switch point.
                core::fmt::Debug::fmt(&self.0.load(Ordering::Relaxed), f)
            }
        }
    };
}

atomic_int!(
    /// A `u32` shared between lanes, at `.gpu` scope on the GPU (the host
    /// reads it between launches).
    AtomicU32,
    AtomicU32,
    u32,
    crate::sync::gpu::u32,
    false
);
atomic_int!(
    /// A `u64` shared between lanes, at `.gpu` scope on the GPU.
    AtomicU64,
    AtomicU64,
    u64,
    crate::sync::gpu::u64,
    false
);
atomic_int!(
    /// A `usize` shared between lanes, at `.gpu` scope on the GPU.
    AtomicUsize,
    AtomicUsize,
    usize,
    crate::sync::gpu::usize,
    false
);
atomic_int!(
    /// A `u32` that the host reads while kernels run (an RPC port), at
    /// `.sys` scope on the GPU.
    SysAtomicU32,
    AtomicU32,
    u32,
    crate::sync::sys::u32,
    true
);
atomic_int!(
    /// A `u64` that the host reads while kernels run, at `.sys` scope.
    SysAtomicU64,
    AtomicU64,
    u64,
    crate::sync::sys::u64,
    true
);

/// `.gpu`-scoped atomics on global memory, in PTX.
#[cfg(target_arch = "nvptx64")]
mod gpu {
    macro_rules! gpu_ops {
        ($m:ident, $int:ty, $reg:ident, $u:literal, $b:literal) => {
            pub(crate) mod $m {
                use core::arch::asm;
                use core::sync::atomic::Ordering;

                /// `ld.{relaxed,acquire}.gpu.global`.
                ///
                /// # Safety
                /// `p` is a valid, aligned address in global memory.
                #[inline(always)]
                pub(crate) unsafe fn load(p: *mut $int, order: Ordering) -> $int {
                    let v: $int;
                    // SAFETY: the caller's contract; the asm reads `p` only.
                    unsafe {
                        match order {
                            Ordering::Relaxed => asm!(
                                concat!("cvta.to.global.u64 {p}, {p};\n\tld.relaxed.gpu.global.", $u, " {v}, [{p}];"),
                                p = inout(reg64) p => _, v = out($reg) v, options(nostack)
                            ),
                            Ordering::SeqCst => asm!(
                                concat!("fence.sc.gpu;\n\tcvta.to.global.u64 {p}, {p};\n\tld.acquire.gpu.global.", $u, " {v}, [{p}];"),
                                p = inout(reg64) p => _, v = out($reg) v, options(nostack)
                            ),
                            _ => asm!(
                                concat!("cvta.to.global.u64 {p}, {p};\n\tld.acquire.gpu.global.", $u, " {v}, [{p}];"),
                                p = inout(reg64) p => _, v = out($reg) v, options(nostack)
                            ),
                        }
                    }
                    v
                }

                /// `st.{relaxed,release}.gpu.global`.
                ///
                /// # Safety
                /// As for [`load`].
                #[inline(always)]
                pub(crate) unsafe fn store(p: *mut $int, v: $int, order: Ordering) {
                    // SAFETY: the caller's contract; the asm writes `p` only.
                    unsafe {
                        match order {
                            Ordering::Relaxed => asm!(
                                concat!("cvta.to.global.u64 {p}, {p};\n\tst.relaxed.gpu.global.", $u, " [{p}], {v};"),
                                p = inout(reg64) p => _, v = in($reg) v, options(nostack)
                            ),
                            Ordering::SeqCst => asm!(
                                concat!("fence.sc.gpu;\n\tcvta.to.global.u64 {p}, {p};\n\tst.release.gpu.global.", $u, " [{p}], {v};"),
                                p = inout(reg64) p => _, v = in($reg) v, options(nostack)
                            ),
                            _ => asm!(
                                concat!("cvta.to.global.u64 {p}, {p};\n\tst.release.gpu.global.", $u, " [{p}], {v};"),
                                p = inout(reg64) p => _, v = in($reg) v, options(nostack)
                            ),
                        }
                    }
                }

                gpu_ops!(@rmw $int, $reg, swap, "exch.", $b);
                gpu_ops!(@rmw $int, $reg, fetch_add, "add.", $u);
                gpu_ops!(@rmw $int, $reg, fetch_and, "and.", $b);
                gpu_ops!(@rmw $int, $reg, fetch_or, "or.", $b);
                gpu_ops!(@rmw $int, $reg, fetch_xor, "xor.", $b);
                gpu_ops!(@rmw $int, $reg, fetch_max, "max.", $u);
                gpu_ops!(@rmw $int, $reg, fetch_min, "min.", $u);

                /// `red.relaxed.gpu.global.add`: no result to wait for.
                ///
                /// # Safety
                /// As for [`load`].
                #[inline(always)]
                pub(crate) unsafe fn add(p: *mut $int, v: $int) {
                    // SAFETY: the caller's contract; the asm reads and
                    // writes `p` only.
                    unsafe {
                        asm!(
                            concat!("cvta.to.global.u64 {p}, {p};\n\tred.relaxed.gpu.global.add.", $u, " [{p}], {v};"),
                            p = inout(reg64) p => _, v = in($reg) v, options(nostack)
                        )
                    };
                }

                /// Relaxed wrapping subtract: an add of the negation.
                ///
                /// # Safety
                /// As for [`load`].
                #[inline(always)]
                pub(crate) unsafe fn fetch_sub(p: *mut $int, v: $int) -> $int {
                    // SAFETY: forwarded.
                    unsafe { fetch_add(p, v.wrapping_neg()) }
                }

                /// `atom.relaxed.gpu.global.cas`: `Ok(previous)` when it held
                /// `current`, else `Err(actual)`.
                ///
                /// # Safety
                /// As for [`load`].
                #[inline(always)]
                pub(crate) unsafe fn compare_exchange(
                    p: *mut $int,
                    current: $int,
                    new: $int,
                ) -> Result<$int, $int> {
                    let old: $int;
                    // SAFETY: the caller's contract; the asm reads and writes
                    // `p` only.
                    unsafe {
                        asm!(
                            concat!("cvta.to.global.u64 {p}, {p};\n\tatom.relaxed.gpu.global.cas.", $b, " {old}, [{p}], {cur}, {new};"),
                            p = inout(reg64) p => _, old = out($reg) old,
                            cur = in($reg) current, new = in($reg) new, options(nostack)
                        )
                    };
                    if old == current { Ok(old) } else { Err(old) }
                }
            }
        };
        (@rmw $int:ty, $reg:ident, $name:ident, $op:literal, $ty:literal) => {
            /// A relaxed `.gpu`-scoped read-modify-write; the previous value.
            ///
            /// # Safety
            /// As for [`load`].
            #[inline(always)]
            pub(crate) unsafe fn $name(p: *mut $int, v: $int) -> $int {
                let old: $int;
                // SAFETY: the caller's contract; the asm reads and writes `p`
                // only.
                unsafe {
                    asm!(
                        concat!("cvta.to.global.u64 {p}, {p};\n\tatom.relaxed.gpu.global.", $op, $ty, " {old}, [{p}], {v};"),
                        p = inout(reg64) p => _, old = out($reg) old, v = in($reg) v,
                        options(nostack)
                    )
                };
                old
            }
        };
    }

    gpu_ops!(u32, u32, reg32, "u32", "b32");
    gpu_ops!(u64, u64, reg64, "u64", "b64");
    gpu_ops!(usize, usize, reg64, "u64", "b64");
}

/// `.sys`-scoped atomics: LLVM's own (core's) on a pointer.
#[cfg(target_arch = "nvptx64")]
mod sys {
    macro_rules! sys_ops {
        ($m:ident, $int:ty, $core:ident) => {
            pub(crate) mod $m {
                use core::sync::atomic::{Ordering, $core as A};

                macro_rules! rmw {
                    ($name:ident) => {
                        /// A relaxed read-modify-write; the previous value.
                        /// `.gpu` scope, not `.sys` (see the module's docs).
                        ///
                        /// # Safety
                        /// `p` is valid and aligned, and only accessed
                        /// atomically.
                        #[inline(always)]
                        pub(crate) unsafe fn $name(p: *mut $int, v: $int) -> $int {
                            // SAFETY: the caller's contract.
                            unsafe { A::from_ptr(p) }.$name(v, Ordering::Relaxed)
                        }
                    };
                }
                rmw!(swap);
                rmw!(fetch_add);
                rmw!(fetch_sub);
                rmw!(fetch_and);
                rmw!(fetch_or);
                rmw!(fetch_xor);
                rmw!(fetch_max);
                rmw!(fetch_min);

                /// A relaxed add whose result is dropped.
                ///
                /// # Safety
                /// As for the read-modify-writes.
                #[inline(always)]
                pub(crate) unsafe fn add(p: *mut $int, v: $int) {
                    // SAFETY: the caller's contract.
                    unsafe { A::from_ptr(p) }.fetch_add(v, Ordering::Relaxed);
                }

                /// A load.
                ///
                /// # Safety
                /// As for the read-modify-writes.
                #[inline(always)]
                pub(crate) unsafe fn load(p: *mut $int, order: Ordering) -> $int {
                    // SAFETY: the caller's contract.
                    unsafe { A::from_ptr(p) }.load(order)
                }

                /// A store.
                ///
                /// # Safety
                /// As for the read-modify-writes.
                #[inline(always)]
                pub(crate) unsafe fn store(p: *mut $int, v: $int, order: Ordering) {
                    // SAFETY: the caller's contract.
                    unsafe { A::from_ptr(p) }.store(v, order)
                }

                /// A relaxed compare-and-swap.
                ///
                /// # Safety
                /// As for the read-modify-writes.
                #[inline(always)]
                pub(crate) unsafe fn compare_exchange(
                    p: *mut $int,
                    current: $int,
                    new: $int,
                ) -> Result<$int, $int> {
                    // SAFETY: the caller's contract.
                    unsafe { A::from_ptr(p) }.compare_exchange(
                        current,
                        new,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                }
            }
        };
    }

    sys_ops!(u32, u32, AtomicU32);
    sys_ops!(u64, u64, AtomicU64);
}

/// A fence of `order` for observers in `scope`. `Relaxed` is a no-op.
///
/// On nvptx64: `fence.acq_rel.{gpu,sys}` for acquire/release/acq_rel and
/// `fence.sc.{gpu,sys}` for seq_cst, written as PTX so that the scope is what
/// the code says. Elsewhere the scope does not exist and the fence is the
/// host's (or loom's) fence of the same order.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn fence(order: Ordering, scope: Scope) {
    if order == Ordering::Relaxed {
        return;
    }
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: fences take no operands; as `asm!` without `nomem` they
        // also stop the compiler from moving memory accesses across them.
        unsafe {
            match (order, scope) {
                (Ordering::SeqCst, Scope::Gpu) => core::arch::asm!("fence.sc.gpu;"),
                (Ordering::SeqCst, Scope::System) => core::arch::asm!("fence.sc.sys;"),
                (_, Scope::Gpu) => core::arch::asm!("fence.acq_rel.gpu;"),
                (_, Scope::System) => core::arch::asm!("fence.acq_rel.sys;"),
            }
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = scope;
        hook(Op::Fence, false, 0);
        inner::fence(order);
    }
}

/// One step of a spin-wait: `nanosleep` on the GPU, a switch point in the
/// simulator, a yield of the model thread under loom.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn snooze(nanoseconds: u32) {
    #[cfg(loom)]
    {
        let _ = nanoseconds;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    crate::simt::nanosleep(nanoseconds);
}

/// `N` elements shared between lanes (atomics, or structs of atomics) in one
/// `UnsafeCell`, handed out one element at a time. The layout is `[T; N]`'s.
///
/// ```text
///   UnsafeCell< [ T | T | T | ... | T ] >      get(i): &T, by pointer offset
/// ```
///
/// Why not a plain `[T; N]`: Miri checks every shared reference to a value
/// with interior mutability by visiting each `UnsafeCell` inside it, so a
/// reference to a heap of 100 000 atomics costs 100 000 steps — at every call
/// of a method on it. Behind one outer `UnsafeCell` the whole array is one
/// interior-mutable range, and `get` never makes a reference to the whole
/// array. On the GPU and the host it compiles to the same address
/// arithmetic as indexing.
#[repr(transparent)]
pub struct SharedArray<T, const N: usize>(core::cell::UnsafeCell<[T; N]>);

// SAFETY: the array only hands out shared references to its elements, which
// are `Sync`; it is exactly as shareable as `[T; N]`.
unsafe impl<T: Sync, const N: usize> Sync for SharedArray<T, N> {}

impl<T, const N: usize> SharedArray<T, N> {
    const MASK: usize = {
        assert!(N.is_power_of_two());
        N - 1
    };

    /// The array of `elements`.
    pub const fn new(elements: [T; N]) -> Self {
        SharedArray(core::cell::UnsafeCell::new(elements))
    }

    /// Element `index % N` (`N` is a power of two: a mask, never a panic).
    #[inline(always)]
    pub fn get(&self, index: usize) -> &T {
        let base = self.0.get().cast::<T>();
        // SAFETY: `index & MASK < N`, inside the array; elements are only
        // ever accessed through shared references (their own interior
        // mutability), so a shared reference to one is always valid.
        unsafe { &*base.add(index & Self::MASK) }
    }

    /// Elements `0..n` (at most `N`), one at a time.
    pub fn iter(&self, n: usize) -> impl Iterator<Item = &T> + '_ {
        (0..n.min(N)).map(move |i| self.get(i))
    }
}

impl<T: core::fmt::Debug, const N: usize> core::fmt::Debug for SharedArray<T, N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SharedArray<{N}>")
    }
}
