//! The atomics facade: every atomic and fence of the device code goes through
//! here, so that one source runs on the GPU, in the simulator (a switch point
//! before each operation) and under loom (loom's model atomics).
//!
//! ```text
//!               ┌ nvptx64 ─ core atomics; fences are PTX `fence.*.{gpu,sys}`
//!   sync::* ────┼ host    ─ core atomics + a simulator switch point each
//!               └ loom    ─ loom::sync::atomic (cfg(loom))
//! ```
//!
//! **Read-modify-writes take no ordering: they are always relaxed.** LLVM 22
//! emits `fetch_add`/`fetch_or`/`swap`... on nvptx64 as plain relaxed
//! `atom.global.*` whatever ordering Rust asks for, so an ordering there would
//! be a lie on the GPU while loom and the simulator honoured it. Code orders a
//! read-modify-write with an explicit [`fence`] of the scope it needs, as LLVM
//! libc's GPU allocator does; each such fence carries an `// ORDERING:` comment
//! naming what it pairs with. Loads and stores keep their ordering (LLVM emits
//! `ld.acquire.sys` / `st.release.sys`); for state only the GPU sees, prefer
//! relaxed accesses plus a [`Scope::Gpu`] fence, which is cheaper than `.sys`.

pub use core::sync::atomic::Ordering;

use crate::simt::Scope;

#[cfg(not(loom))]
use core::sync::atomic as inner;
#[cfg(loom)]
use loom::sync::atomic as inner;

/// Called before every operation: a simulator switch point on the host.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
fn hook() {
    #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
    warpalloc_sim::switch_point();
}

macro_rules! atomic_int {
    ($(#[$doc:meta])* $name:ident, $int:ty) => {
        $(#[$doc])*
        #[repr(transparent)]
        pub struct $name(inner::$name);

        impl $name {
            /// A new atomic holding `value`.
            #[cfg(not(loom))]
            pub const fn new(value: $int) -> Self {
                $name(inner::$name::new(value))
            }

            /// A new atomic holding `value`.
            #[cfg(loom)]
            pub fn new(value: $int) -> Self {
                $name(inner::$name::new(value))
            }

            /// Views `ptr` as an atomic (not under loom).
            ///
            /// # Safety
            /// As [`core::sync::atomic`]'s `from_ptr`: `ptr` is aligned, valid
            /// for reads and writes for `'a`, and only accessed atomically
            /// while the reference lives.
            #[cfg(not(loom))]
            #[inline(always)]
            pub unsafe fn from_ptr<'a>(ptr: *mut $int) -> &'a Self {
                // SAFETY: the caller's contract above; `Self` is
                // `repr(transparent)` over the core atomic.
                unsafe { &*(inner::$name::from_ptr(ptr) as *const inner::$name as *const Self) }
            }

            /// Loads the value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn load(&self, order: Ordering) -> $int {
                hook();
                self.0.load(order)
            }

            /// Stores `value`.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn store(&self, value: $int, order: Ordering) {
                hook();
                self.0.store(value, order)
            }

            /// Relaxed swap; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn swap(&self, value: $int) -> $int {
                hook();
                self.0.swap(value, Ordering::Relaxed)
            }

            /// Relaxed compare-and-swap: `Ok(previous)` if it held `current`
            /// and now holds `new`, else `Err(actual)`.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn compare_exchange(&self, current: $int, new: $int) -> Result<$int, $int> {
                hook();
                self.0
                    .compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed)
            }

            /// Relaxed wrapping add; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_add(&self, value: $int) -> $int {
                hook();
                self.0.fetch_add(value, Ordering::Relaxed)
            }

            /// Relaxed wrapping subtract; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_sub(&self, value: $int) -> $int {
                hook();
                self.0.fetch_sub(value, Ordering::Relaxed)
            }

            /// Relaxed bitwise and; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_and(&self, value: $int) -> $int {
                hook();
                self.0.fetch_and(value, Ordering::Relaxed)
            }

            /// Relaxed bitwise or; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_or(&self, value: $int) -> $int {
                hook();
                self.0.fetch_or(value, Ordering::Relaxed)
            }

            /// Relaxed bitwise xor; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_xor(&self, value: $int) -> $int {
                hook();
                self.0.fetch_xor(value, Ordering::Relaxed)
            }

            /// Relaxed maximum; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_max(&self, value: $int) -> $int {
                hook();
                self.0.fetch_max(value, Ordering::Relaxed)
            }

            /// Relaxed minimum; returns the previous value.
            #[inline(always)]
            #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
            pub fn fetch_min(&self, value: $int) -> $int {
                hook();
                self.0.fetch_min(value, Ordering::Relaxed)
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
    /// A `u32` shared between lanes (and with the host).
    AtomicU32,
    u32
);
atomic_int!(
    /// A `u64` shared between lanes (and with the host).
    AtomicU64,
    u64
);
atomic_int!(
    /// A `usize` shared between lanes (and with the host).
    AtomicUsize,
    usize
);

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
        hook();
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
