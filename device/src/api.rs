//! The allocation API a kernel calls: `malloc`, `free`, `calloc`, `realloc`,
//! `aligned_alloc`, `usable_size`, and [`WarpAlloc`] for `alloc::{Box, Vec}`.
//!
//! Each function reads `activemask()` once and passes it down, so any subset
//! of a warp may call it together (Volta semantics), with any mix of sizes.
//! Bad input has a defined result and corrupts nothing:
//!
//! | call | result |
//! |---|---|
//! | `malloc(0)`, a size too large to round, `aligned_alloc` with a non-power-of-two alignment | null |
//! | no memory | null (counted in the heap's error record) |
//! | a block larger than the heap's region | null (counted; the host's refusal names the reservation to raise, and no kept slab is given back for it) |
//! | no heap bound (the module not linked, or its heap dropped) | null on a GPU (`Vec`/`Box` trap); in the simulator the launch fails naming `heap.link(&module)` (`malloc`), or the program ends after saying so (`Vec`/`Box`) |
//! | `free(null)` | nothing |
//! | `free` of a block already free, or of a pointer into a freed slab or block | nothing; counted as a double free |
//! | `free` of a pointer the heap never handed out (outside its region, a slab header, inside a large block, into a block's middle) | nothing; counted as an invalid free (inside a large block, as a double free where a slab or a block's head was before: `granule`) |
//! | `calloc(n, size)` with `n · size` overflowing | null |
//! | `realloc(null, n)` | `malloc(n)` |
//! | `realloc(p, 0)` | frees `p`, returns null |
//! | `realloc(p, n)`, `n` at most `usable_size(p)`, no memory for a smaller block | `p` (it stays in place; a shrink never returns null, and counts no null) |
//! | `realloc` of a pointer that is not a live allocation (never handed out, or freed) | null; counted as an invalid free; nothing freed |
//! | `usable_size` of a pointer that is not a live allocation (a freed block, a pointer into a block's middle) | 0 |
//!
//! A pointer is an allocation's if it is a block's first byte, or — as
//! `aligned_alloc` hands out for alignments above 4 KiB — that byte rounded
//! up to the pointer's own alignment. `free(p + 8)`, and any other pointer
//! into a block of 4 KiB or less or at a boundary of 4 KiB or less, is an
//! invalid free that frees nothing, so the `free(p)` after it is the real
//! one. (A pointer into a block at a boundary above 4 KiB that such a
//! rounding could have made in its class — a boundary of at most the
//! class's `Geometry::round`: 8 KiB in the 8 KiB and 12 KiB classes, none
//! in the 6, 7 and 14 KiB ones, 512 KiB in the 1 MiB one — is taken for
//! one: without a tag per allocation no allocator can tell.) A double free is caught until the block is handed out again;
//! after that it frees the new owner's block, as in every allocator without
//! per-allocation tags — and a warp's next malloc of a class usually takes
//! the blocks the warp freed last (its bitfield walk starts at the warp's
//! own word), so a double free after the warp's next malloc of that class
//! is rarely caught.
//!
//! The heap's error record keeps the first bad free: its address, block and
//! thread, and — once its kernel has ended, where the kernel was defined
//! with [`kernel!`](crate::kernel!) or calls [`kernel_ended`] last — its
//! kernel's name, on a GPU as in the simulator.

use core::alloc::{GlobalAlloc, Layout};

use crate::heap::DeviceHeap;
use crate::simt;

/// The heap of the running kernel: the one the module's `WARPALLOC_HEAP`
/// links on the GPU; on the host, the heap the simulator launch was bound to
/// (the emulated device binds the launched module's link). None when no heap
/// is linked, or outside a launch.
#[inline(always)]
pub fn heap() -> Option<&'static DeviceHeap> {
    #[cfg(target_arch = "nvptx64")]
    let address = crate::WARPALLOC_HEAP.address() as usize;
    #[cfg(not(target_arch = "nvptx64"))]
    let address = warpalloc_sim::binding();
    // SAFETY: the link (or the launch's binding) is 0 or the address of a
    // `DeviceHeap` that the host's `Heap` keeps alive while the module is
    // linked to it, which covers every launch of the module.
    (address != 0).then(|| unsafe { &*core::ptr::with_exposed_provenance::<DeviceHeap>(address) })
}

/// What a simulated kernel that allocates with no heap is told: how to link
/// its module (and what a GPU would do).
#[cfg(not(target_arch = "nvptx64"))]
pub const UNLINKED: &str = "a kernel allocated, but no heap serves its module: link the module \
     to a heap before launching it (`let heap = warpalloc::Heap::attach(&ctx, \
     HeapConfig::default())?; heap.link(&module)?;`) and keep the heap alive while the \
     module's kernels run. On a GPU this module's malloc would return null and its Vec/Box \
     trap.";

/// A lane of a simulator launch allocated with no heap bound (its module
/// not linked, or its heap dropped): the launch fails here with
/// [`UNLINKED`] and the lane's place, rather than going on with nulls the
/// user may never look at. On a GPU `malloc` returns null there and `Vec` or
/// `Box` trap: the simulator is not more forgiving. Outside a launch
/// (the host program itself) nothing happens.
#[cfg(not(target_arch = "nvptx64"))]
#[cold]
#[inline(never)]
fn unlinked_allocation() {
    if warpalloc_sim::in_launch() {
        panic!("kernel `{}`: {UNLINKED}", warpalloc_sim::kernel_name());
    }
}

/// The end of kernel `name` on the calling lane. [`kernel!`](crate::kernel!)
/// calls it last in every kernel it defines; a kernel defined otherwise
/// (another stack's `#[kernel]`) may call it as its last statement. If
/// the lane made the first bad free that its heap's error record keeps
/// (`Errors::first_bad_kernel`), the record gets `name`: a GPU's device
/// code knows which kernel runs only where the kernel says so. It costs a
/// call and one load a lane where a heap is linked.
///
/// Out of line: inlined into the kernel, ptxas gave the sm_80 module's
/// `free_only` 28 registers on sm_80 (budget 26), and the name's copy
/// packed into words 2 more to every allocating kernel on sm_75
/// (2026-12-05).
#[inline(never)]
pub fn kernel_ended(name: &str) {
    if let Some(heap) = heap() {
        heap.kernel_ended(name);
    }
}

/// `size` bytes, 16-byte aligned; null on failure (see the module docs).
pub fn malloc(size: usize) -> *mut u8 {
    let Some(heap) = heap() else {
        #[cfg(not(target_arch = "nvptx64"))]
        unlinked_allocation();
        return core::ptr::null_mut();
    };
    heap.allocate(simt::activemask(), size as u64, 1)
}

/// `size` bytes aligned to `align` (any power of two); null on failure.
pub fn aligned_alloc(align: usize, size: usize) -> *mut u8 {
    let Some(heap) = heap() else {
        #[cfg(not(target_arch = "nvptx64"))]
        unlinked_allocation();
        return core::ptr::null_mut();
    };
    heap.allocate(simt::activemask(), size as u64, align as u64)
}

/// `n · size` zeroed bytes; null when the product overflows or on failure.
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        return core::ptr::null_mut();
    };
    let ptr = malloc(total);
    if !ptr.is_null() {
        // SAFETY: `ptr` is a fresh allocation of at least `total` bytes.
        unsafe { core::ptr::write_bytes(ptr, 0, total) };
    }
    ptr
}

/// Frees `ptr` (see the module docs for null, double and invalid frees).
///
/// # Safety
/// No access to the allocation may follow the free.
pub unsafe fn free(ptr: *mut u8) {
    if let Some(heap) = heap() {
        heap.deallocate(simt::activemask(), ptr);
    }
}

/// Resizes the allocation at `ptr` to `size` bytes, in place when it fits,
/// else by moving it (the contents up to the smaller size are kept); null on
/// failure, leaving `ptr` allocated. A shrink to less than half the block
/// moves to a smaller block when there is memory for one, and otherwise
/// stays in place: it never fails.
///
/// # Safety
/// `ptr` is null or an allocation of this heap that no one accesses during
/// the call; after a non-null return, only the returned pointer is used.
pub unsafe fn realloc(ptr: *mut u8, size: usize) -> *mut u8 {
    if ptr.is_null() {
        return malloc(size);
    }
    let Some(heap) = heap() else {
        #[cfg(not(target_arch = "nvptx64"))]
        unlinked_allocation();
        return core::ptr::null_mut();
    };
    if size == 0 {
        heap.deallocate(simt::activemask(), ptr);
        return core::ptr::null_mut();
    }
    let usable = heap.usable_size(ptr);
    if usable == 0 {
        heap.note_invalid_free(ptr);
        return core::ptr::null_mut();
    }
    let size64 = size as u64;
    if size64 <= usable && size64 >= usable / 2 {
        return ptr;
    }
    let moved = if size64 <= usable {
        heap.allocate_to_shrink(simt::activemask(), size64, 1)
    } else {
        malloc(size)
    };
    if moved.is_null() {
        // A shrink that found no memory to move to keeps the block where it
        // is (the smaller size fits): a shrinking `realloc` never fails, and
        // its null is no null a kernel saw.
        if size64 <= usable {
            heap.forgive_null(size64, 1);
            return ptr;
        }
        return moved;
    }
    // SAFETY: both are live allocations of at least the copied length, and
    // distinct (`moved` is fresh).
    unsafe { core::ptr::copy_nonoverlapping(ptr, moved, usable.min(size64) as usize) };
    heap.deallocate(simt::activemask(), ptr);
    moved
}

/// Bytes usable at `ptr` (to the end of its block), 0 for a pointer
/// that is not a live allocation of this heap.
pub fn usable_size(ptr: *const u8) -> usize {
    heap().map_or(0, |h| h.usable_size(ptr) as usize)
}

/// The global allocator for kernels: `#[global_allocator] static A: WarpAlloc
/// = WarpAlloc;` in the kernel crate makes `alloc::{Box, Vec, String}` use
/// warpalloc.
///
/// On the host the same declaration (in the program that launches simulated
/// kernels) serves the lanes of a launch bound to a heap from that heap, and
/// everything else (the host program, the simulator itself) from the system
/// allocator. A pointer is freed by the registered heap whose region holds it
/// (see `registry`), wherever the free happens, as long as that heap lives:
/// free a heap's pointers before dropping the heap. The system allocator
/// frees only what no live heap's region holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct WarpAlloc;

// SAFETY: allocations come from `DeviceHeap::allocate` with the layout's size
// and alignment (or the system allocator on the host), are distinct while
// live, and are freed by the allocator that made them.
unsafe impl GlobalAlloc for WarpAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(not(target_arch = "nvptx64"))]
        if !SERVED.load(core::sync::atomic::Ordering::Relaxed) {
            SERVED.store(true, core::sync::atomic::Ordering::Relaxed);
        }
        // The host program's own allocations, and a panicking lane's (its
        // message, its payload: from an exhausted heap they were null, and
        // the process aborted in `handle_alloc_error` with the panic's
        // message lost; a review, 2026-12-07), go to the system allocator
        // (`system_serves`). They are freed there too: no heap's region
        // holds them.
        #[cfg(not(target_arch = "nvptx64"))]
        if system_serves() {
            // SAFETY: forwarded from our caller.
            return unsafe { std::alloc::System.alloc(layout) };
        }
        match heap() {
            Some(heap) => {
                let ptr = heap.allocate(
                    simt::activemask(),
                    layout.size() as u64,
                    layout.align() as u64,
                );
                // `Vec`/`Box` end the program on null: say where and why
                // first (the simulator's lanes only; a GPU traps).
                #[cfg(not(target_arch = "nvptx64"))]
                if ptr.is_null() && warpalloc_sim::in_launch() {
                    report(layout.size(), Some(heap));
                }
                ptr
            }
            // A lane of a launch with no heap (the host's own allocations
            // went to the system allocator above): null, which makes `Vec`
            // or `Box` end the program as a GPU's trap would, after saying
            // why (an allocator must not unwind, so no panic here). Not
            // while the lane panics (above): the panic's own message and
            // payload (an unlinked `malloc`'s, say) go to the system
            // allocator, so that the launch reports it.
            None => {
                #[cfg(not(target_arch = "nvptx64"))]
                report(layout.size(), None);
                core::ptr::null_mut()
            }
        }
    }

    /// On the host, what the system allocator serves (`system_serves`)
    /// comes from its own `alloc_zeroed`, whose large blocks are the OS's
    /// zeroed pages, untouched until used: the default (alloc, then write
    /// zeros) made every `vec![0; n]` of a host program whose global
    /// allocator is `WarpAlloc` touch all its pages (a review, 2026-12-07).
    /// Elsewhere, [`GlobalAlloc::alloc`] and zeros written.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        #[cfg(not(target_arch = "nvptx64"))]
        if system_serves() {
            // SAFETY: forwarded from our caller.
            return unsafe { std::alloc::System.alloc_zeroed(layout) };
        }
        // SAFETY: forwarded from our caller.
        let ptr = unsafe { self.alloc(layout) };
        if !ptr.is_null() {
            // SAFETY: `ptr` holds `layout.size()` bytes, ours.
            unsafe { core::ptr::write_bytes(ptr, 0, layout.size()) };
        }
        ptr
    }

    /// On the host, a block the system allocator made (no live heap's
    /// region holds it) that it would make again (`system_serves`) grows
    /// or shrinks by its own `realloc` (in place, or a remap of large
    /// blocks). Elsewhere, a block whose usable bytes hold `new_size` and
    /// would not be more than half empty (the rule of C's [`realloc`])
    /// stays where it is: a `Vec` that grows within its block's class, or a
    /// large block's last granule, and a shrink by less than half, copy
    /// nothing. Else as the default does: a new block of the layout's
    /// alignment, the bytes both hold copied, the old one freed; null (the
    /// old block kept) when no memory is left.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        #[cfg(not(target_arch = "nvptx64"))]
        if system_serves() && crate::registry::owner_of(ptr.expose_provenance() as u64).is_none() {
            // SAFETY: forwarded from our caller; the system allocator made
            // `ptr` with `layout` (no heap's region holds it).
            return unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        }
        // In place: `ptr` is aligned to `layout.align()`, the new layout's
        // too. A pointer of another heap than the launch's (a host's
        // `Vec` given to a kernel) has no usable bytes in it: moved.
        let heap = heap();
        let usable = heap.map_or(0, |heap| heap.usable_size(ptr));
        let wanted = new_size as u64;
        let shrink = wanted <= usable;
        if shrink && wanted >= usable / 2 {
            return ptr;
        }
        let new = match heap.filter(|_| shrink) {
            // A shrink by more than half: a smaller block if there is
            // memory, else this one, as C's `realloc` does — a `Vec`'s
            // `shrink_to_fit` on an exhausted heap got null and trapped
            // (a review, 2026-12-07). No report, and its null forgiven.
            Some(heap) => {
                let new =
                    heap.allocate_to_shrink(simt::activemask(), wanted, layout.align() as u64);
                if new.is_null() {
                    heap.forgive_null(wanted, layout.align() as u64);
                    return ptr;
                }
                new
            }
            None => {
                // SAFETY: our caller's contract: `new_size`, rounded up to
                // `layout.align()`, does not overflow `isize`.
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: `new_size` is not zero (our caller's contract).
                unsafe { self.alloc(new_layout) }
            }
        };
        if !new.is_null() {
            // SAFETY: both blocks hold at least the bytes copied and are
            // distinct live allocations; `ptr` was made with `layout`.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(target_arch = "nvptx64")]
        {
            let _ = layout;
            if let Some(heap) = heap() {
                heap.deallocate(simt::activemask(), ptr);
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        match crate::registry::owner_of(ptr.expose_provenance() as u64) {
            Some(heap) => heap.deallocate(simt::activemask(), ptr),
            // SAFETY: not in any heap's region, so the system allocator made
            // it, with this layout (our caller's contract).
            None => unsafe { std::alloc::System.dealloc(ptr, layout) },
        }
    }
}

/// Whether `WarpAlloc` hands the caller's allocation to the system
/// allocator (host builds): a panicking thread's, and any outside a
/// launch's lanes that no heap serves — the host program's own.
#[cfg(not(target_arch = "nvptx64"))]
fn system_serves() -> bool {
    std::thread::panicking() || (heap().is_none() && !warpalloc_sim::in_launch())
}

/// Set once `WarpAlloc::alloc` has run: whether it is the program's global
/// allocator (host builds).
#[cfg(not(target_arch = "nvptx64"))]
static SERVED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether this program's `#[global_allocator]` is [`WarpAlloc`] (host
/// builds): a probe allocation reaches it or not. In the simulator, kernels'
/// `Vec`, `Box` and `String` use the program's global allocator; only
/// `WarpAlloc` sends them to the launch's heap (another allocator would
/// quietly serve them from host memory, where a GPU uses the heap).
#[cfg(not(target_arch = "nvptx64"))]
pub fn is_global_allocator() -> bool {
    if !SERVED.load(core::sync::atomic::Ordering::Relaxed) {
        drop(core::hint::black_box(std::boxed::Box::new(0u8)));
    }
    SERVED.load(core::sync::atomic::Ordering::Relaxed)
}

/// Writes why a lane's global allocation got null — no heap ([`UNLINKED`]),
/// or no memory in `heap` (its counters) — with the kernel and the lane, to
/// stderr without allocating (it runs inside the global allocator): a stack
/// buffer, one write. `Vec`/`Box` end the program next, as a GPU traps.
#[cfg(not(target_arch = "nvptx64"))]
#[cold]
fn report(bytes: usize, heap: Option<&DeviceHeap>) {
    use core::fmt::Write as _;
    use std::io::Write as _;

    /// A fixed buffer that `write!` fills and truncates.
    struct Line {
        bytes: [u8; 1536],
        len: usize,
    }
    impl core::fmt::Write for Line {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let room = self.bytes.len() - self.len;
            let n = s.len().min(room);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
    let mut line = Line {
        bytes: [0; 1536],
        len: 0,
    };
    let (b, t) = (warpalloc_sim::block_idx(), warpalloc_sim::thread_idx());
    let _ = write!(
        line,
        "warpalloc: kernel `{}`, block ({}, {}, {}) thread ({}, {}, {}) asked the global \
         allocator for {bytes} bytes: ",
        warpalloc_sim::kernel_name(),
        b.0,
        b.1,
        b.2,
        t.0,
        t.1,
        t.2
    );
    let _ = match heap {
        None => writeln!(line, "{UNLINKED}"),
        Some(heap) => writeln!(
            line,
            "the heap has no memory for it (its limit, the device's memory, or a pool run dry), \
             so Vec/Box end the program here, as they would trap on a GPU. Raise \
             HeapConfig::limit (or the pool's slabs), free earlier, or use try_reserve and \
             handle the error. The heap so far: {:?}; {:?}.",
            heap.errors(),
            heap.traffic()
        ),
    };
    let _ = std::io::stderr().write_all(&line.bytes[..line.len]);
}

/// C-ABI exports for kernels written in or linking C (`--features c-abi`):
/// `malloc`, `free`, `calloc`, `realloc`, `aligned_alloc`. GPU builds only:
/// on the host these names belong to the C library.
#[cfg(all(feature = "c-abi", target_arch = "nvptx64"))]
mod c_abi {
    #[unsafe(no_mangle)]
    extern "C" fn malloc(size: usize) -> *mut u8 {
        super::malloc(size)
    }

    #[unsafe(no_mangle)]
    extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut u8 {
        super::aligned_alloc(align, size)
    }

    #[unsafe(no_mangle)]
    extern "C" fn calloc(n: usize, size: usize) -> *mut u8 {
        super::calloc(n, size)
    }

    /// # Safety
    /// C's `free` contract.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn free(ptr: *mut u8) {
        // SAFETY: C's contract is ours.
        unsafe { super::free(ptr) }
    }

    /// # Safety
    /// C's `realloc` contract.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn realloc(ptr: *mut u8, size: usize) -> *mut u8 {
        // SAFETY: C's contract is ours.
        unsafe { super::realloc(ptr, size) }
    }
}
