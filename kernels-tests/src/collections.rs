//! `alloc` collections in kernels: `Vec`, `Box` and `String` growing through
//! warpalloc's global allocator ([`WarpAlloc`](warpalloc_device::WarpAlloc)).
//! The kernel crate declares it on the GPU; a host test binary declares it
//! too, and the simulator's lanes then allocate from the launch's heap.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use warpalloc_device::kernel;
use warpalloc_device::simt;
use warpalloc_device::sync::AtomicU64;

/// Counts a broken expectation in `stats[4]` (the stress kernels' layout).
fn broken(stats: *mut u64, bad: bool) {
    if bad {
        // SAFETY: the host gave `stats` the stress kernels' 8 words, used
        // atomically.
        unsafe { AtomicU64::from_ptr(stats.wrapping_add(4)) }.fetch_add(1);
    }
}

kernel! {
    /// Each thread grows a `Vec<u64>` to `n` elements (reallocating as it
    /// goes), a `Vec` of `Vec<u8>`s, a `String` and a boxed array, checks
    /// their contents and drops them; `stats[0]` counts finished threads.
    pub fn collections(stats: *mut u64, n: u32) {
        let me = simt::global_thread_id();
        let mut v: Vec<u64> = Vec::new();
        for i in 0..u64::from(n) {
            v.push(me * 1_000_003 + i);
        }
        broken(stats, v.len() != n as usize);
        broken(stats, v.iter().enumerate().any(|(i, &x)| x != me * 1_000_003 + i as u64));

        let mut nested: Vec<Vec<u8>> = Vec::with_capacity(2);
        for k in 0..8u8 {
            nested.push((0..k * 9).map(|b| b ^ k).collect());
        }
        broken(stats, nested.iter().enumerate().any(|(k, w)| w.len() != k * 9));

        let mut s = String::new();
        for d in 0..n.min(200) {
            s.push(char::from(b'a' + (d % 26) as u8));
        }
        broken(stats, s.len() != n.min(200) as usize || !s.starts_with("abc"));

        // Growth within the block stays in place: 100 bytes take a block
        // of 112, so 110 fit; and a shrink to more than half of it too.
        let mut bytes: Vec<u8> = Vec::with_capacity(100);
        bytes.extend_from_slice(&[me as u8; 100]);
        let at = bytes.as_ptr();
        bytes.reserve_exact(10);
        broken(stats, bytes.as_ptr() != at || bytes.capacity() != 110);
        bytes.truncate(60);
        bytes.shrink_to_fit();
        broken(stats, bytes.as_ptr() != at || bytes.iter().any(|&b| b != me as u8));
        // Beyond the block: moved, the bytes with it.
        bytes.reserve_exact(200);
        broken(stats, bytes.as_ptr() == at || bytes.iter().any(|&b| b != me as u8));
        drop(bytes);
        if me == 0 {
            // A large block (1.5 MiB: a granule of 2 MiB) grows to the
            // granule's end in place.
            let mut big: Vec<u8> = Vec::with_capacity(3 << 19);
            big.push(7);
            let at = big.as_ptr();
            big.reserve_exact((2 << 20) - 1);
            broken(stats, big.as_ptr() != at || big[0] != 7);
        }

        let boxed = Box::new([me as u32; 64]);
        broken(stats, boxed.iter().any(|&x| x != me as u32));
        drop((v, nested, s, boxed));
        // SAFETY: as in `broken`.
        unsafe { AtomicU64::from_ptr(stats) }.fetch_add(1);
    }
}

kernel! {
    /// Builds a `Vec<u32>` of 100 elements (`i * 3`), and leaks it: writes
    /// its pointer and length to `out[0]` and `out[1]` (the host frees it).
    pub fn leak_one(out: *mut u64) {
        let v: Vec<u32> = (0..100u32).map(|i| i * 3).collect();
        let mut v = core::mem::ManuallyDrop::new(v);
        v.shrink_to_fit();
        // SAFETY: the host gave `out` two words.
        unsafe {
            out.write(v.as_mut_ptr().addr() as u64);
            out.add(1).write(v.len() as u64);
        }
    }
}

kernel! {
    /// Takes 1 MiB blocks until the heap has none (keeping them), then
    /// panics with a formatted message, whose text and payload the panic
    /// allocates while the heap is exhausted. `out[0]`: the blocks taken.
    pub fn panic_when_full(out: *mut u64) {
        let mut taken = 0u64;
        while !warpalloc_device::malloc(1 << 20).is_null() {
            taken += 1;
        }
        // SAFETY: the host gave `out` a word.
        unsafe { out.write(taken) };
        panic!("the heap was full after {taken} blocks of 1 MiB");
    }
}

kernel! {
    /// Holds a `Vec` of 8 KiB capacity with 100 bytes in it, takes blocks
    /// of 1 MiB until the heap has none (16 at most), then shrinks the
    /// `Vec` to fit — by more than half, so its allocator wants a smaller
    /// block, which the exhausted heap cannot give: the `Vec` keeps its
    /// block (a shrink never fails). `out[0]`: 1 when it stayed where it
    /// was with its bytes; `out[1]`: the blocks taken. Frees everything.
    pub fn shrink_when_full(out: *mut u64) {
        let mut v: Vec<u8> = Vec::with_capacity(8192);
        v.extend_from_slice(&[5u8; 100]);
        let at = v.as_ptr();
        let mut blocks = [core::ptr::null_mut::<u8>(); 16];
        let mut taken = 0;
        while taken < blocks.len() {
            let p = warpalloc_device::malloc(1 << 20);
            if p.is_null() {
                break;
            }
            blocks[taken] = p;
            taken += 1;
        }
        v.shrink_to_fit();
        let stayed = v.as_ptr() == at && v.iter().all(|&b| b == 5);
        for p in blocks.into_iter().take(taken) {
            // SAFETY: ours, from the loop above.
            unsafe { warpalloc_device::free(p) };
        }
        drop(v);
        // SAFETY: the host gave `out` two words.
        unsafe {
            out.write(u64::from(stayed));
            out.add(1).write(taken as u64);
        }
    }
}

kernel! {
    /// C's `realloc` shrinking a large block on a heap its limit keeps
    /// from more: 64 blocks of 32 KiB taken and freed (their slabs kept
    /// empty by their class), a block of 6 MiB taken, then shrunk to
    /// 2 MiB and 4 KiB — by more than half, so `realloc` asks for a block
    /// of 4 MiB, which the limit refuses. The block stays where it was, and
    /// the class keeps its emptied slabs: a flush of them to the host had
    /// made room for the smaller block and moved it. `out`: 1 when the
    /// 6 MiB block was had, 1 when it stayed where it was with its bytes,
    /// and how many of 64 blocks of 32 KiB were had again after it.
    pub fn shrink_large_when_full(out: *mut u64) {
        let mut small = [core::ptr::null_mut::<u8>(); 64];
        for p in small.iter_mut() {
            *p = warpalloc_device::malloc(32 << 10);
        }
        for p in small {
            // SAFETY: ours (or null), from the loop above.
            unsafe { warpalloc_device::free(p) };
        }
        let large = warpalloc_device::malloc(6 << 20);
        let mut stayed = false;
        if !large.is_null() {
            // SAFETY: 6 MiB of ours.
            unsafe { core::ptr::write_bytes(large, 7, 6 << 20) };
            // SAFETY: ours, used by no one else; only the result after.
            let shrunk = unsafe { warpalloc_device::realloc(large, (2 << 20) + 4096) };
            // SAFETY: `shrunk` holds the first 2 MiB + 4 KiB of the block.
            stayed = shrunk == large
                && unsafe { core::slice::from_raw_parts(shrunk, (2 << 20) + 4096) }
                    .iter()
                    .all(|&b| b == 7);
            // SAFETY: ours.
            unsafe { warpalloc_device::free(shrunk) };
        }
        let mut again = 0u64;
        for p in small.iter_mut() {
            *p = warpalloc_device::malloc(32 << 10);
            again += u64::from(!p.is_null());
        }
        for p in small {
            // SAFETY: ours (or null), from the loop above.
            unsafe { warpalloc_device::free(p) };
        }
        // SAFETY: the host gave `out` three words.
        unsafe {
            out.write(u64::from(!large.is_null()));
            out.add(1).write(u64::from(stayed));
            out.add(2).write(again);
        }
    }
}

kernel! {
    /// Every lane takes and frees blocks of 1 to 8 KiB, `rounds` times, on
    /// a heap that grows while they run; thread 0 panics after its
    /// `after`th block: the launch fails with lanes anywhere in the
    /// allocator, a slab's creation among them.
    pub fn panic_amid_growth(rounds: u32, after: u32) {
        let me = simt::global_thread_id() as u32;
        for r in 0..rounds {
            let size = 1024 * (1 + ((me + r) % 8) as usize);
            let p = warpalloc_device::malloc(size);
            if me == 0 && r == after {
                panic!("a planted panic amid growth");
            }
            // SAFETY: ours (or null).
            unsafe { warpalloc_device::free(p) };
        }
    }
}
