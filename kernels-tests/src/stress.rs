//! Allocator stress kernels, in the mimalloc / LLVM libc style: a fixed-seed
//! generator per thread, an owner-tagged pattern written at malloc and checked
//! at free, occasional huge blocks, pointers handed between warps and blocks
//! through a shared array. Every kernel counts what went wrong on the device
//! ([`Stats`]); the host checks the counts — a run that corrupts or loses
//! memory fails, it does not just print.

use warpalloc_device::kernel;
use warpalloc_device::simt::{self, Scope};
use warpalloc_device::size_class::{CLASSES, LARGE_THRESHOLD, SLAB_SIZE};
use warpalloc_device::sync::{AtomicU64, Ordering, fence};
use warpalloc_device::{aligned_alloc, free, malloc, usable_size};

use crate::mix;

/// Device-side counters of a stress kernel: `stats[i]` for each field's index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// Allocations that returned null.
    pub nulls: u64,
    /// Blocks whose pattern was wrong when checked (corruption or overlap).
    pub corrupt: u64,
    /// Pointers that broke the allocator's promises (misaligned, too small
    /// a usable size, outside expectations).
    pub broken: u64,
    /// Bytes requested by successful allocations.
    pub bytes: u64,
    /// Large blocks (≥ 1 MiB) allocated.
    pub large: u64,
    /// The first corrupt block's owner tag, `1 << 63 | owner << 32 | seq`
    /// (0: none; `seq` is `u32::MAX` for a block handed over whose tag
    /// did not match), if the kernel records one.
    pub first_bad: u64,
    /// Bytes the kernel's threads hold now (requested sizes of the blocks
    /// allocated and not yet checked and freed; 0 after a clean run).
    pub live_bytes: u64,
    /// The most bytes they held at once: what the heap's peak mapped memory
    /// is measured against (`warpalloc stress`, tests/drift.rs).
    pub peak_live_bytes: u64,
}

/// Words of the stats array.
pub const STATS_WORDS: usize = 10;

impl Stats {
    /// Reads a stats array written by a kernel.
    pub fn from_words(w: &[u64]) -> Stats {
        Stats {
            allocs: w[0],
            frees: w[1],
            nulls: w[2],
            corrupt: w[3],
            broken: w[4],
            bytes: w[5],
            large: w[6],
            first_bad: w[7],
            live_bytes: w[8],
            peak_live_bytes: w[9],
        }
    }
}

#[inline(always)]
fn stat(stats: *mut u64, i: usize) -> &'static AtomicU64 {
    // SAFETY: the host allocated STATS_WORDS words at `stats` for the launch,
    // accessed only atomically by the kernels.
    unsafe { AtomicU64::from_ptr(stats.wrapping_add(i)) }
}

#[inline(always)]
fn count(stats: *mut u64, i: usize, n: u64) {
    stat(stats, i).fetch_add(n);
}

/// Counts, once a thread at its end, `rounds` malloc-and-free rounds of
/// which `nulls` got null and `bad` read a word back wrong: allocations and
/// frees (`stats[0]`, `stats[1]`), nulls (`stats[2]`), corrupt blocks
/// (`stats[3]`).
#[inline(always)]
fn count_rounds(stats: *mut u64, rounds: u32, nulls: u32, bad: u32) {
    let ok = u64::from(rounds - nulls);
    count(stats, 0, ok);
    count(stats, 1, ok);
    count(stats, 2, nulls.into());
    count(stats, 3, bad.into());
}

/// Counts a successful allocation of `size` bytes that the kernel will give
/// to [`check_and_free`]: one allocation, and `size` more bytes live (the
/// peak raised to the new total).
#[inline(always)]
fn count_alloc(stats: *mut u64, size: usize) {
    count(stats, 0, 1);
    count_live(stats, size);
}

/// `size` more bytes live, and the peak raised to the new total.
#[inline(always)]
fn count_live(stats: *mut u64, size: usize) {
    let now = stat(stats, 8).fetch_add(size as u64) + size as u64;
    stat(stats, 9).fetch_max(now);
}

/// A per-thread xorshift64* generator.
#[derive(Clone, Copy)]
pub struct Rng(u64);

impl Rng {
    /// The generator of thread `thread` under `seed`.
    pub fn new(seed: u32, thread: u32) -> Rng {
        let s =
            (u64::from(mix(seed ^ 0x5bd1_e995)) << 32) | u64::from(mix(thread.wrapping_add(seed)));
        Rng(s | 1)
    }

    /// The next 32 random bits.
    #[inline(always)]
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// A value in `0..n` (`n > 0`).
    #[inline(always)]
    pub fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.next_u32()) * u64::from(n)) >> 32) as u32
    }
}

/// Bytes of the tag at the start of every block of `size ≥ 16`.
pub const TAG_BYTES: usize = 16;
const TAG_MAGIC: u32 = 0x7a67_0da7;

/// The pattern byte at offset `i` of block `(owner, seq)`.
#[inline(always)]
pub fn pattern_byte(owner: u32, seq: u32, i: usize) -> u8 {
    (mix(owner ^ mix(seq ^ mix(i as u32 >> 2))) >> (8 * (i & 3))) as u8
}

/// Whether a block of `size` bytes carries its pattern in every 16-byte
/// granule past its head: up to 64 KiB. Not under Miri, which looks for
/// undefined behaviour rather than overlap and interprets every byte
/// written: denser spans added 150 s to CI's Miri job (2026-12-07).
#[inline(always)]
fn dense(size: usize) -> bool {
    !cfg!(miri) && size <= 64 << 10
}

/// The step of a sparse block's checked spans past its first 256 bytes:
/// 4 KiB; 64 KiB under Miri.
#[inline(always)]
fn span_step() -> usize {
    if cfg!(miri) { 64 << 10 } else { 4096 }
}

/// Offsets of a block that carry the pattern: every byte of the first 256;
/// then, up to 64 KiB ([`dense`]), the first 4 bytes of every 16-byte
/// granule, else 16 bytes at each [`span_step`]; and the last 16. (A full
/// write of a 3 MiB block would dominate a simulator run.) Blocks are
/// 16-byte aligned and at least 16 bytes long, and each writes its first
/// 16 (its tag), so a block that starts inside a dense one covers one of
/// its granules' checked bytes, and a check fails (the test
/// `a_block_inside_another_is_seen`); in a larger block, only a block over
/// one of its spans, 4 KiB apart, is seen. Until 2026-12-07 the spans were
/// 64 KiB apart, then 16 bytes every 256 (a review: a 48-byte block inside
/// an 8 KiB one, between two spans, went unseen; another review).
#[inline(always)]
fn pattern_spans(size: usize, mut f: impl FnMut(usize, usize)) {
    let head = size.min(256);
    f(0, head);
    let (step, len) = if dense(size) {
        (16, 4)
    } else {
        (span_step(), 16)
    };
    let mut at = step.max(256);
    while at + len <= size {
        f(at, len);
        at += step;
    }
    if size > 256 {
        f(size - 16.min(size - 256), 16.min(size - 256));
    }
}

/// A checked byte near the middle of a block of `size` bytes (a span's
/// first, or the head's): where a planted corruption is sure to be seen.
#[inline(always)]
pub fn checked_middle(size: usize) -> usize {
    if size <= 256 {
        size / 2
    } else if dense(size) {
        size / 2 / 16 * 16
    } else {
        size / 2 / span_step() * span_step()
    }
}

/// Writes block `(owner, seq)`'s tag (when `size ≥ 16`) and pattern.
///
/// # Safety
/// `p` is a live allocation of at least `size` bytes owned by the caller.
pub unsafe fn write_pattern(p: *mut u8, size: usize, owner: u32, seq: u32) {
    pattern_spans(size, |start, len| {
        for i in start..start + len {
            // SAFETY: `i < size`, inside the caller's block.
            unsafe { p.add(i).write(pattern_byte(owner, seq, i)) };
        }
    });
    if size >= TAG_BYTES {
        let tag = [TAG_MAGIC, owner, seq, size as u32];
        // SAFETY: 16 bytes inside the block; unaligned writes are fine.
        unsafe { p.cast::<[u32; 4]>().write_unaligned(tag) };
    }
}

/// Checks block `(owner, seq)` of `size` bytes.
///
/// # Safety
/// As for [`write_pattern`].
pub unsafe fn check_pattern(p: *const u8, size: usize, owner: u32, seq: u32) -> bool {
    let mut ok = true;
    if size >= TAG_BYTES {
        // SAFETY: 16 bytes inside the block.
        let tag = unsafe { p.cast::<[u32; 4]>().read_unaligned() };
        ok &= tag == [TAG_MAGIC, owner, seq, size as u32];
    }
    pattern_spans(size, |start, len| {
        for i in start.max(if size >= TAG_BYTES { TAG_BYTES } else { 0 })..start + len {
            // SAFETY: `i < size`.
            ok &= unsafe { p.add(i).read() } == pattern_byte(owner, seq, i);
        }
    });
    ok
}

/// Reads the tag of a block handed over by another thread: (owner, seq,
/// size), if the magic is there.
///
/// # Safety
/// `p` is a live block of at least 16 bytes.
pub unsafe fn read_tag(p: *const u8) -> Option<(u32, u32, usize)> {
    // SAFETY: the caller's contract.
    let tag = unsafe { p.cast::<[u32; 4]>().read_unaligned() };
    (tag[0] == TAG_MAGIC).then_some((tag[1], tag[2], tag[3] as usize))
}

/// A request size from the churn distribution: log-uniform from 16 bytes to
/// `max_small`, and one in `large_one_in` a block of 1 MiB to 5 MiB
/// (1 to 3 granules).
#[inline(always)]
pub fn churn_size(rng: &mut Rng, max_small: u32, large_one_in: u32) -> usize {
    if large_one_in != 0 && rng.below(large_one_in) == 0 {
        return LARGE_THRESHOLD as usize + rng.below(2 * SLAB_SIZE as u32) as usize;
    }
    let bits = 32 - max_small.max(32).leading_zeros(); // log2(max) + 1
    let octave = 4 + rng.below(bits - 4);
    let low = 1u32 << (octave - 1);
    let size = low + rng.below(low);
    // `max_small` below the tag's bytes (a caller's slip) is the tag's:
    // `clamp` panics when its bounds cross, which on a GPU is a trap.
    size.clamp(TAG_BYTES as u32, max_small.max(TAG_BYTES as u32)) as usize
}

/// Checks, tags-first, and frees a block the caller owns; counts the result.
///
/// # Safety
/// `p` is a live block of `size` bytes written by `write_pattern(owner,
/// seq)` (or corrupted: that is what is checked).
unsafe fn check_and_free(stats: *mut u64, p: *mut u8, size: usize, owner: u32, seq: u32) {
    // SAFETY: the caller's contract.
    if !unsafe { check_pattern(p, size, owner, seq) } {
        count(stats, 3, 1);
        first_bad(stats, owner, seq);
    }
    // SAFETY: the caller owns `p`, and nothing uses it after.
    unsafe { free(p) };
    count(stats, 1, 1);
    stat(stats, 8).fetch_sub(size as u64);
}

/// Bits of a transfer slot's word that carry the pointer; the 16 above
/// them carry the low 16 bits of the thread that left it (pointers, the
/// GPU's and the host's, lie below 2^48).
const TRANSFER_PTR_BITS: u32 = 48;

/// The word a transfer slot holds for `p`, left by thread `owner`.
#[inline(always)]
fn transfer_word(p: *mut u8, owner: u32) -> u64 {
    p.expose_provenance() as u64 | u64::from(owner & 0xffff) << TRANSFER_PTR_BITS
}

/// A transfer slot's word: the block, and the low 16 bits of the thread
/// that left it.
#[inline(always)]
fn from_transfer(word: u64) -> (*mut u8, u32) {
    let p =
        core::ptr::with_exposed_provenance_mut((word & ((1 << TRANSFER_PTR_BITS) - 1)) as usize);
    (p, (word >> TRANSFER_PTR_BITS) as u32)
}

/// Takes a block another thread left in `transfer`: checks it against its
/// tag and the thread that left it (two threads given one block, the
/// second's pattern over the first's, would pass a check by the tag
/// alone: a review, 2026-12-07), and frees it; counts the result.
///
/// # Safety
/// `got` is a live block, ours by a swap of its slot, left with `from`.
unsafe fn take_handed(stats: *mut u64, got: *mut u8, from: u32) {
    // SAFETY: blocks in `transfer` are live and at least 16 bytes.
    match unsafe { read_tag(got) } {
        Some((owner, s, n)) if owner & 0xffff == from && usable_size(got) >= n => {
            // SAFETY: the caller's contract; `n` bytes are the block's.
            unsafe { check_and_free(stats, got, n, owner, s) }
        }
        _ => {
            count(stats, 3, 1);
            first_bad(stats, from, u32::MAX);
            // SAFETY: ours, by the swap.
            unsafe { free(got) };
            count(stats, 1, 1);
        }
    }
}

/// Records the first corrupt block, `(owner, seq)`, in `stats[7]`: its tag
/// with bit 63 set, so that owner 0's block 0 is not "none" (a review,
/// 2026-12-07).
#[inline(always)]
fn first_bad(stats: *mut u64, owner: u32, seq: u32) {
    let tag = 1 << 63 | u64::from(owner & 0x7fff_ffff) << 32 | u64::from(seq);
    let _ = stat(stats, 7).compare_exchange(0, tag);
}

/// Hands `p` (ours: thread `me`'s) to the shared array at a random slot;
/// returns what was there, and the low 16 bits of the thread that left it.
#[inline(always)]
fn hand_over(transfer: *mut u64, slots: u32, rng: &mut Rng, p: *mut u8, me: u32) -> (*mut u8, u32) {
    let at = rng.below(slots) as usize;
    // SAFETY: the host allocated `slots` words at `transfer`, only ever
    // accessed atomically.
    let slot = unsafe { AtomicU64::from_ptr(transfer.wrapping_add(at)) };
    // ORDERING: release (gpu): our pattern writes happen-before the taker's
    // checks; pairs with the acquire fence below on the taking side.
    fence(Ordering::Release, Scope::Gpu);
    let old = slot.swap(transfer_word(p, me));
    // ORDERING: acquire (gpu): pairs with the release fence of whoever put
    // `old` there.
    fence(Ordering::Acquire, Scope::Gpu);
    from_transfer(old)
}

/// Live blocks a churning thread keeps.
pub const WINDOW: usize = 4;

kernel! {
    /// Churn: each thread runs `iterations` rounds of malloc (sizes from
    /// [`churn_size`]) → write its pattern → keep it in a window of
    /// [`WINDOW`] blocks or hand it to another thread through `transfer`
    /// (`slots` words) → check and free whatever it evicts or receives.
    /// Blocks left in `transfer` are freed by [`drain_transfer`].
    pub fn churn(
        stats: *mut u64,
        transfer: *mut u64,
        slots: u32,
        seed: u32,
        iterations: u32,
        max_small: u32,
        large_one_in: u32,
    ) {
        let me = simt::global_thread_id() as u32;
        let mut rng = Rng::new(seed, me);
        let mut window = [(core::ptr::null_mut::<u8>(), 0usize, 0u32); WINDOW];
        for seq in 0..iterations {
            let size = churn_size(&mut rng, max_small, large_one_in);
            let p = malloc(size);
            if p.is_null() {
                count(stats, 2, 1);
                continue;
            }
            count_alloc(stats, size);
            count(stats, 5, size as u64);
            if size as u64 >= LARGE_THRESHOLD {
                count(stats, 6, 1);
            }
            if (usable_size(p)) < size || !p.addr().is_multiple_of(16) {
                count(stats, 4, 1);
            }
            // SAFETY: a fresh block of `size` bytes, ours.
            unsafe { write_pattern(p, size, me, seq) };
            if slots != 0 && rng.below(4) == 0 {
                let (got, from) = hand_over(transfer, slots, &mut rng, p, me);
                if !got.is_null() {
                    // SAFETY: blocks in `transfer` are live, ≥ 16 bytes and
                    // tagged by their writer; the swap made it ours.
                    unsafe { take_handed(stats, got, from) };
                }
            } else {
                let at = rng.below(WINDOW as u32) as usize;
                let (old, n, s) = window[at];
                window[at] = (p, size, seq);
                if !old.is_null() {
                    // SAFETY: our own block from an earlier round.
                    unsafe { check_and_free(stats, old, n, me, s) };
                }
            }
        }
        for (p, n, s) in window {
            if !p.is_null() {
                // SAFETY: our own block.
                unsafe { check_and_free(stats, p, n, me, s) };
            }
        }
    }
}

kernel! {
    /// Checks and frees every block left in `transfer` (thread `i` takes
    /// slots `i, i + threads, ...`).
    pub fn drain_transfer(stats: *mut u64, transfer: *mut u64, slots: u32) {
        let threads = (simt::grid_dim().volume() * simt::block_dim().volume()) as u32;
        let mut at = simt::global_thread_id() as u32;
        while at < slots {
            // SAFETY: `at < slots`, accessed atomically.
            let slot = unsafe { AtomicU64::from_ptr(transfer.wrapping_add(at as usize)) };
            let (got, from) = from_transfer(slot.swap(0));
            // ORDERING: acquire (gpu): pairs with the release fence of the
            // thread that left the block (in an earlier launch as well).
            fence(Ordering::Acquire, Scope::Gpu);
            if !got.is_null() {
                // SAFETY: live tagged blocks, ours by the swap.
                unsafe { take_handed(stats, got, from) };
            }
            at += threads;
        }
    }
}

/// The request sizes of [`size_sweep`]: 1..=64 bytes, then every class's
/// block size and one byte more, then large blocks around 1, 2 and 3 MiB.
pub fn sweep_size(i: u32) -> usize {
    const CLASSES_N: u32 = CLASSES.len() as u32;
    const LARGE: [usize; 6] = [
        LARGE_THRESHOLD as usize - 1,
        LARGE_THRESHOLD as usize,
        LARGE_THRESHOLD as usize + 1,
        SLAB_SIZE as usize,
        SLAB_SIZE as usize + 1,
        3 * SLAB_SIZE as usize / 2 + 12_345,
    ];
    if i < 64 {
        return i as usize + 1;
    }
    let j = i - 64;
    if j < 2 * CLASSES_N {
        let block = CLASSES[(j / 2) as usize].block as usize;
        return block + (j % 2) as usize;
    }
    LARGE[((j - 2 * CLASSES_N) as usize) % LARGE.len()]
}

/// How many distinct sizes [`sweep_size`] has.
pub const SWEEP_SIZES: u32 = 64 + 2 * CLASSES.len() as u32 + 6;

kernel! {
    /// Size sweep: thread `i` allocates [`sweep_size`]`(i % SWEEP_SIZES)`
    /// bytes, checks the usable size and alignment, writes and checks its
    /// pattern, and frees it.
    pub fn size_sweep(stats: *mut u64) {
        let me = simt::global_thread_id() as u32;
        let size = sweep_size(me % SWEEP_SIZES);
        let p = malloc(size);
        if p.is_null() {
            count(stats, 2, 1);
            return;
        }
        count_alloc(stats, size);
        if usable_size(p) < size || !p.addr().is_multiple_of(16) {
            count(stats, 4, 1);
        }
        // SAFETY: a fresh block of `size` bytes, ours.
        unsafe {
            write_pattern(p, size, me, 0);
            check_and_free(stats, p, size, me, 0);
        }
    }
}

/// The alignment thread `i` of [`aligned`] asks for: 1 B to 4 KiB, then
/// 8 KiB, 64 KiB, 512 KiB, 2 MiB and 4 MiB.
pub fn sweep_align(i: u32) -> usize {
    const BIG: [usize; 5] = [8 << 10, 64 << 10, 512 << 10, 2 << 20, 4 << 20];
    let k = i % 18;
    if k < 13 {
        1 << k
    } else {
        BIG[(k - 13) as usize]
    }
}

kernel! {
    /// Alignment: each thread allocates `aligned_alloc(sweep_align(i),
    /// size)` with a random size, checks alignment and usable size, writes,
    /// checks and frees.
    pub fn aligned(stats: *mut u64, seed: u32) {
        let me = simt::global_thread_id() as u32;
        let mut rng = Rng::new(seed, me);
        let align = sweep_align(me);
        let size = 1 + rng.below(if align > 4096 { 4096 } else { 3 * align as u32 + 64 }) as usize;
        let p = aligned_alloc(align, size);
        if p.is_null() {
            count(stats, 2, 1);
            return;
        }
        count_alloc(stats, size);
        if !p.addr().is_multiple_of(align) || usable_size(p) < size {
            count(stats, 4, 1);
        }
        // SAFETY: a fresh block of `size` bytes, ours.
        unsafe {
            write_pattern(p, size, me, 1);
            check_and_free(stats, p, size, me, 1);
        }
    }
}

kernel! {
    /// Fill: each thread allocates `size(i)` bytes until null or `per_thread`
    /// blocks, writes each block's pattern and records it in `ptrs` /
    /// `sizes` (`per_thread` entries per thread; `counts[thread]` used).
    pub fn fill(
        stats: *mut u64,
        ptrs: *mut u64,
        sizes: *mut u32,
        counts: *mut u32,
        per_thread: u32,
        seed: u32,
        max_small: u32,
    ) {
        let me = simt::global_thread_id() as u32;
        let mut rng = Rng::new(seed, me);
        let mut n = 0;
        while n < per_thread {
            let size = churn_size(&mut rng, max_small, 0);
            let p = malloc(size);
            if p.is_null() {
                count(stats, 2, 1);
                break;
            }
            count_alloc(stats, size);
            // SAFETY: a fresh block, ours.
            unsafe { write_pattern(p, size, me, n) };
            let at = (me * per_thread + n) as usize;
            // SAFETY: the host sized `ptrs` and `sizes` for `per_thread`
            // entries per thread; this entry is ours.
            unsafe {
                ptrs.add(at).write(p.expose_provenance() as u64);
                sizes.add(at).write(size as u32);
            }
            n += 1;
        }
        // SAFETY: one entry per thread, ours.
        unsafe { counts.add(me as usize).write(n) };
    }
}

kernel! {
    /// Checks and frees what [`fill`] recorded, from a different thread than
    /// the one that allocated it (thread `i` drains thread `(i + shift) %
    /// threads`'s blocks: another warp and block when `shift` is large).
    pub fn drain(
        stats: *mut u64,
        ptrs: *mut u64,
        sizes: *mut u32,
        counts: *mut u32,
        per_thread: u32,
        shift: u32,
    ) {
        let threads = (simt::grid_dim().volume() * simt::block_dim().volume()) as u32;
        let me = simt::global_thread_id() as u32;
        let owner = (me + shift) % threads;
        // SAFETY: entries written by `fill` in an earlier launch.
        let n = unsafe { counts.add(owner as usize).read() };
        for k in 0..n {
            let at = (owner * per_thread + k) as usize;
            // SAFETY: as above.
            let (p, size) = unsafe { (ptrs.add(at).read(), sizes.add(at).read()) };
            let p: *mut u8 = core::ptr::with_exposed_provenance_mut(p as usize);
            // SAFETY: a live block written by `fill` for (owner, k).
            unsafe { check_and_free(stats, p, size as usize, owner, k) };
        }
    }
}

kernel! {
    /// Bad input: `malloc(0)`, a size too large to round, a non-power-of-two
    /// alignment and an overflowing `calloc` must return null; `free(null)`
    /// must do nothing; a double free and a free of a pointer the heap never
    /// handed out (`foreign`) must change nothing (the heap counts them).
    /// Counts each broken promise in `broken`.
    pub fn bad_input(stats: *mut u64, foreign: u64) {
        let me = simt::global_thread_id() as u32;
        let broken = |bad: bool| if bad { count(stats, 4, 1) };
        broken(!malloc(0).is_null());
        broken(!malloc(usize::MAX).is_null());
        broken(!malloc(usize::MAX - (1 << 20)).is_null());
        broken(!aligned_alloc(48, 64).is_null());
        broken(!warpalloc_device::calloc(usize::MAX / 2, 3).is_null());
        // SAFETY: null is always accepted.
        unsafe { free(core::ptr::null_mut()) };
        let p = malloc(40);
        let mine = !p.is_null();
        if !mine {
            count(stats, 2, 1);
        }
        // Every lane of the warp holds its block before any frees, and
        // every real free is done before any double free: a block freed
        // here and handed out again to another lane of the warp (a later
        // malloc starts at the warp's own bitfield word) would make that
        // lane's double free a real one, of the other lane's block — no
        // allocator without a tag per allocation can tell those apart.
        simt::syncwarp(simt::warp_mask());
        // SAFETY: ours; every free but the first `free(p)` is bad input
        // under test, which the allocator must survive without touching
        // memory: pointers into the block's middle (invalid frees, which
        // frees nothing: the block stays live and intact, and the free of
        // `p` that follows is the real one; a `realloc` of it is refused,
        // an invalid free too, and its usable size is 0), a double free, a
        // pointer the heap never handed out.
        unsafe {
            if mine {
                write_pattern(p, 40, me, 7);
                free(p.wrapping_add(8));
                broken(!warpalloc_device::realloc(p.wrapping_add(8), 64).is_null());
                broken(usable_size(p.wrapping_add(8)) != 0);
                // `p + 16`: in the 48-byte class, at a 32-byte boundary for
                // every other block, which is no reason to take it for a
                // block's start (only `aligned_alloc` above 4 KiB rounds a
                // pointer up inside its block).
                free(p.wrapping_add(16));
                broken(usable_size(p.wrapping_add(16)) != 0);
                broken(usable_size(p) < 40 || !check_pattern(p, 40, me, 7));
                free(p);
            }
            simt::syncwarp(simt::warp_mask());
            if mine {
                free(p);
            }
            free(core::ptr::with_exposed_provenance_mut(foreign as usize));
        }
        if !mine {
            return;
        }
        count(stats, 1, 1);
    }
}

kernel! {
    /// A pointer into a small block's middle at a large boundary: each
    /// thread takes 40-byte blocks (the 48-byte class), chained through
    /// their first words, until one has an 8 KiB boundary inside it (at
    /// most `tries`), frees that boundary — an invalid free, which must
    /// free nothing — and checks the block's size and pattern survived,
    /// then frees every block it took. Counts: `allocs` the blocks taken,
    /// `frees` the frees, `nulls`, `broken` a block its middle's free
    /// freed (or whose middle has a size), and in `bytes` the threads that
    /// found such a block.
    pub fn interior_free(stats: *mut u64, tries: u32) {
        let me = simt::global_thread_id() as u32;
        let mut last: *mut u8 = core::ptr::null_mut();
        let mut found = false;
        for _ in 0..tries {
            let p = malloc(40);
            if p.is_null() {
                count(stats, 2, 1);
                break;
            }
            count(stats, 0, 1);
            // SAFETY: a fresh block of 40 bytes, ours: the chain's link in
            // its first word, the pattern after it.
            unsafe {
                p.cast::<u64>().write(last.expose_provenance() as u64);
                write_pattern(p.add(8), 32, me, 5);
            }
            last = p;
            let inside = (p.addr() + 1).next_multiple_of(8192);
            if inside < p.addr() + 40 {
                found = true;
                // SAFETY: bad input under test: a pointer into our live
                // block's middle, which must free nothing.
                unsafe {
                    free(p.with_addr(inside));
                    let whole = usable_size(p) >= 40 && check_pattern(p.add(8), 32, me, 5);
                    if !whole || usable_size(p.with_addr(inside)) != 0 {
                        count(stats, 4, 1);
                    }
                }
                break;
            }
        }
        if found {
            count(stats, 5, 1);
        }
        while !last.is_null() {
            // SAFETY: a block of the chain, ours; its first word links the
            // one taken before it.
            let before = unsafe { last.cast::<u64>().read() };
            // SAFETY: as above.
            unsafe { free(last) };
            count(stats, 1, 1);
            last = core::ptr::with_exposed_provenance_mut(before as usize);
        }
    }
}

kernel! {
    /// `realloc` and `calloc`: each thread grows a block from 16 bytes to
    /// `max` by doubling with `realloc` (in place while it fits, moving
    /// otherwise), checking that the bytes written so far survive every
    /// move, then shrinks it back; and checks that `calloc` memory is zero.
    pub fn resize(stats: *mut u64, max: u32) {
        let me = simt::global_thread_id() as u32;
        let mut size = 16usize;
        let mut p = malloc(size);
        if p.is_null() {
            count(stats, 2, 1);
            return;
        }
        count(stats, 0, 1);
        // SAFETY: a fresh block of `size` bytes, ours.
        unsafe { write_pattern(p, size, me, 9) };
        while size < max as usize {
            // SAFETY: `p` is our live block; nothing else uses it.
            let q = unsafe { warpalloc_device::realloc(p, size * 2) };
            if q.is_null() {
                count(stats, 2, 1);
                break;
            }
            // SAFETY: the first `size` bytes moved with the block.
            if !unsafe { check_pattern(q, size, me, 9) } {
                count(stats, 3, 1);
            }
            size *= 2;
            p = q;
            // SAFETY: ours, `size` bytes.
            unsafe { write_pattern(p, size, me, 9) };
        }
        // To 24 bytes: a shrink, unless the first growth already failed and
        // the block is still 16 bytes. A grow may fail (a null, the block
        // stays ours); a shrink never does (a broken promise if it did).
        // SAFETY: as above.
        let q = unsafe { warpalloc_device::realloc(p, 24) };
        if q.is_null() {
            count(stats, if size < 24 { 2 } else { 4 }, 1);
        } else {
            // The kept bytes: the tag (which still names the size before)
            // and the pattern up to 24 or the old size, whichever is less.
            let kept_len = size.min(24);
            // SAFETY: `q` is our live block of at least 24 bytes.
            let kept = unsafe { read_tag(q) } == Some((me, 9, size))
                && (TAG_BYTES..kept_len)
                    .all(|i| unsafe { q.add(i).read() } == pattern_byte(me, 9, i));
            if !kept {
                count(stats, 3, 1);
            }
        }
        // SAFETY: ours.
        unsafe { free(if q.is_null() { p } else { q }) };
        count(stats, 1, 1);

        let z = warpalloc_device::calloc(33, 7);
        if z.is_null() {
            count(stats, 2, 1);
            return;
        }
        count(stats, 0, 1);
        // SAFETY: 231 bytes, ours.
        let zeroed = (0..231).all(|i| unsafe { z.add(i).read() } == 0);
        if !zeroed {
            count(stats, 4, 1);
        }
        // SAFETY: ours.
        unsafe { free(z) };
        count(stats, 1, 1);
    }
}

/// Long-lived blocks a thread of [`lifetimes`] keeps.
pub const LONG_LIVED: usize = 8;

kernel! {
    /// Long-lived / short-lived mix: each thread allocates `iterations`
    /// blocks (sizes from [`churn_size`], no large ones); one in
    /// `keep_one_in` lives until the end of the kernel (up to
    /// [`LONG_LIVED`] at a time, the oldest freed to make room), the others
    /// are checked and freed at once, so short-lived blocks churn around
    /// long-lived ones in the same slabs.
    ///
    /// `corrupt_one_in` (0: never) plants a stray write: one in that many
    /// blocks gets a byte changed after its pattern is written, as a bug in
    /// the allocator (an overlap) or in a kernel would. The check at free
    /// must see it: that is how `warpalloc stress` shows it fails loudly.
    pub fn lifetimes(
        stats: *mut u64,
        seed: u32,
        iterations: u32,
        max_small: u32,
        keep_one_in: u32,
        corrupt_one_in: u32,
    ) {
        let me = simt::global_thread_id() as u32;
        let mut rng = Rng::new(seed, me);
        let mut kept = [(core::ptr::null_mut::<u8>(), 0usize, 0u32); LONG_LIVED];
        let mut oldest = 0;
        for seq in 0..iterations {
            let size = churn_size(&mut rng, max_small, 0);
            let p = malloc(size);
            if p.is_null() {
                count(stats, 2, 1);
                continue;
            }
            count_alloc(stats, size);
            count(stats, 5, size as u64);
            // SAFETY: a fresh block of `size` bytes, ours.
            unsafe { write_pattern(p, size, me, seq) };
            if corrupt_one_in != 0 && rng.below(corrupt_one_in) == 0 {
                // SAFETY: inside our own block (size ≥ 16).
                unsafe { *p.add(checked_middle(size)) ^= 0x5a };
            }
            if keep_one_in != 0 && rng.below(keep_one_in) == 0 {
                let (old, n, s) = kept[oldest % LONG_LIVED];
                kept[oldest % LONG_LIVED] = (p, size, seq);
                oldest += 1;
                if !old.is_null() {
                    // SAFETY: our own long-lived block.
                    unsafe { check_and_free(stats, old, n, me, s) };
                }
            } else {
                // SAFETY: ours, just written.
                unsafe { check_and_free(stats, p, size, me, seq) };
            }
        }
        for (p, n, s) in kept {
            if !p.is_null() {
                // SAFETY: our own block.
                unsafe { check_and_free(stats, p, n, me, s) };
            }
        }
    }
}

kernel! {
    /// The published GPU-allocator benchmark's basic case: each thread
    /// allocates `size` bytes, writes a word, frees it, `rounds` times.
    /// `stats[0]` counts allocations (and `stats[1]` the frees: the same),
    /// `stats[2]` nulls, `stats[3]` words that did not read back. The loop
    /// counts in two 32-bit registers (neither count can exceed `rounds`;
    /// the allocations are `rounds` less the nulls), so that little of the
    /// kernel's own state lives across the allocator's calls: its register
    /// budget (tests/ptx.rs) is the allocator's.
    pub fn alloc_free(stats: *mut u64, size: u32, rounds: u32) {
        let me = simt::global_thread_id() as u32;
        let mut nulls = 0u32;
        let mut bad = 0u32;
        for r in 0..rounds {
            let p = malloc(size as usize) as *mut u32;
            if p.is_null() {
                nulls += 1;
                continue;
            }
            let word = me ^ r.wrapping_mul(0x9e37_79b9);
            // SAFETY: at least 4 bytes (every block is ≥ 16), ours.
            unsafe {
                p.write_volatile(word);
                bad += u32::from(p.read_volatile() != word);
                free(p.cast());
            }
        }
        count_rounds(stats, rounds, nulls, bad);
    }
}

kernel! {
    /// The published benchmark's mixed case, as the peers' drivers run it
    /// (`scripts/device-check/baseline.cu`, `mixed`): each thread, `rounds`
    /// times, allocates a size from [`churn_size`] (log-uniform, 16 B to
    /// `max_small`), writes its first and last words, reads them back and
    /// frees it. Counts as [`alloc_free`] does, once a thread at the end:
    /// the lanes of a warp stay together, with no loop over a block's
    /// bytes between their calls (unlike [`lifetimes`]).
    pub fn mixed_pairs(stats: *mut u64, seed: u32, rounds: u32, max_small: u32) {
        let me = simt::global_thread_id() as u32;
        let mut rng = Rng::new(seed, me);
        let mut nulls = 0u32;
        let mut bad = 0u32;
        for r in 0..rounds {
            let size = churn_size(&mut rng, max_small, 0);
            let p = malloc(size) as *mut u32;
            if p.is_null() {
                nulls += 1;
                continue;
            }
            let word = me ^ r.wrapping_mul(0x9e37_79b9);
            let last = size / 4 - 1;
            // SAFETY: `size` bytes (at least 16), ours: words 0 and `last`.
            unsafe {
                p.write_volatile(word);
                p.add(last).write_volatile(!word);
                bad += u32::from(p.read_volatile() != word || p.add(last).read_volatile() != !word);
                free(p.cast());
            }
        }
        count_rounds(stats, rounds, nulls, bad);
    }
}

kernel! {
    /// A freed block in a slab that still has live blocks is not a live
    /// allocation: `usable_size` gives 0 and `realloc` refuses it (null,
    /// counted as an invalid free, nothing freed). Each thread keeps one
    /// block, frees another and asks; `stats[4]` counts broken promises.
    /// One block of whole warps (the lanes of a warp wait for each other).
    pub fn freed_queries(stats: *mut u64) {
        let keep = malloc(40);
        let p = malloc(40);
        // Every lane of the warp has both blocks before any frees one, so
        // no lane's later malloc takes a block freed here (a block handed
        // out again is live, rightly).
        simt::syncwarp(simt::warp_mask());
        if keep.is_null() || p.is_null() {
            count(stats, 2, 1);
            // SAFETY: ours or null.
            unsafe {
                free(keep);
                free(p);
            }
            return;
        }
        count(stats, 0, 2);
        // SAFETY: ours; after the first free, `p` is the bad input under
        // test, which the allocator must refuse without touching memory.
        unsafe {
            free(p);
            if usable_size(p) != 0 {
                count(stats, 4, 1);
            }
            if !warpalloc_device::realloc(p, 64).is_null() {
                count(stats, 4, 1);
            }
            if usable_size(keep) < 40 {
                count(stats, 4, 1);
            }
            free(keep);
        }
        count(stats, 1, 2);
    }
}

kernel! {
    /// Duplicate frees in one call racing with other warps' mallocs. Even
    /// warps: each lane takes `size` bytes and checks its pattern, then lanes
    /// `2k` and `2k + 1` both free lane `2k`'s block in one call of the
    /// whole warp (one free and one double free), and the odd lanes free
    /// their own; a null is tried again until a block comes. Odd warps: take
    /// `size` bytes (a null is tried again next round), write, check and
    /// free; nulls are counted in `stats[2]`. `rounds` times, one class. Were
    /// a duplicate's bit cleared after an odd warp took the block again, the
    /// block would have two owners: a broken pattern (`stats[3]`) or counts
    /// that the heap's check refuses. Whole warps.
    pub fn duplicate_frees(stats: *mut u64, size: u32, rounds: u32) {
        let size = size as usize;
        let me = simt::global_thread_id() as u32;
        let lane = simt::lane_id();
        let whole = simt::warp_mask();
        let even = simt::warp_id().is_multiple_of(2);
        for round in 0..rounds {
            let mut p = malloc(size);
            // A full heap: the odd warps try again next round; the even
            // warps wait for the odd warps' frees (which always come).
            while p.is_null() && even {
                count(stats, 2, 1);
                simt::nanosleep(1000);
                p = malloc(size);
            }
            if p.is_null() {
                count(stats, 2, 1);
            } else {
                count(stats, 0, 1);
                if !even {
                    // Checked and freed below.
                    count_live(stats, size);
                }
                // SAFETY: a fresh block of `size` bytes, ours.
                unsafe { write_pattern(p, size, me, round) };
            }
            if !even {
                if !p.is_null() {
                    // SAFETY: ours, just written.
                    unsafe { check_and_free(stats, p, size, me, round) };
                }
                continue;
            }
            // SAFETY: ours (or null), just written.
            if !p.is_null() && !unsafe { check_pattern(p, size, me, round) } {
                count(stats, 3, 1);
            }
            // Every lane of the warp has its block (or null) before any
            // frees one.
            simt::syncwarp(whole);
            let pair = simt::shfl_ptr(whole, p, lane & !1);
            // Lane `2k`'s block, freed by both lanes of the pair in one call
            // of the whole warp (the heap's own entry, with the mask: `free`
            // would pass `activemask()`, which may split the pair into two
            // calls, and a second free after another warp took the block
            // again is not detectable). The bad input under test; null:
            // nothing.
            if let Some(heap) = warpalloc_device::heap() {
                heap.deallocate(whole, pair);
            }
            if lane.is_multiple_of(2) && !pair.is_null() {
                count(stats, 1, 1);
            }
            if !lane.is_multiple_of(2) && !p.is_null() {
                // SAFETY: our own block, not freed yet.
                unsafe { free(p) };
                count(stats, 1, 1);
            }
        }
    }
}

kernel! {
    /// The malloc path alone: each thread takes `size` bytes and stores the
    /// address in `ptrs[thread]` (0 when null). For ptxas budgets and the
    /// simulator's per-operation counts.
    pub fn malloc_only(ptrs: *mut u64, size: u32) {
        let me = simt::global_thread_id() as usize;
        let p = malloc(size as usize);
        // SAFETY: the host gave a word per thread.
        unsafe { ptrs.add(me).write(p.expose_provenance() as u64) };
    }
}

kernel! {
    /// malloc and free together, once: each thread takes `size` bytes,
    /// writes and reads back a word, frees the block and stores 1 in
    /// `ok[thread]` if all went well (0: null or a wrong read). For ptxas
    /// budgets: the two paths in one kernel with no loop of its own.
    pub fn malloc_free_once(ok: *mut u32, size: u32) {
        let me = simt::global_thread_id() as usize;
        let p = malloc(size as usize) as *mut u32;
        let mut good = 0;
        if !p.is_null() {
            // SAFETY: at least 4 bytes (every block is ≥ 16), ours until the
            // free.
            unsafe {
                p.write_volatile(me as u32);
                good = u32::from(p.read_volatile() == me as u32);
                free(p.cast());
            }
        }
        // SAFETY: the host gave a word per thread.
        unsafe { ok.add(me).write(good) };
    }
}

kernel! {
    /// Each thread takes `sizes[thread]` bytes (a warp of mixed classes)
    /// and stores the address in `ptrs[thread]` (0 when null).
    pub fn malloc_sizes(ptrs: *mut u64, sizes: *const u32) {
        let me = simt::global_thread_id() as usize;
        // SAFETY: the host gave a word per thread in each buffer.
        unsafe {
            let p = malloc(sizes.add(me).read() as usize);
            ptrs.add(me).write(p.expose_provenance() as u64);
        }
    }
}

kernel! {
    /// Each thread takes `aligned_alloc(align, size)` and stores the
    /// address in `ptrs[thread]` (0 when null).
    pub fn aligned_only(ptrs: *mut u64, size: u32, align: u64) {
        let me = simt::global_thread_id() as usize;
        let p = aligned_alloc(align as usize, size as usize);
        // SAFETY: the host gave a word per thread.
        unsafe { ptrs.add(me).write(p.expose_provenance() as u64) };
    }
}

kernel! {
    /// The free path alone: each thread frees `ptrs[thread]` (0: nothing).
    pub fn free_only(ptrs: *const u64) {
        let me = simt::global_thread_id() as usize;
        // SAFETY: the host gave a word per thread, each 0 or a block that
        // `malloc_only` handed out and nobody freed since.
        unsafe { free(core::ptr::with_exposed_provenance_mut(ptrs.add(me).read() as usize)) };
    }
}

/// A kernel parameter of the program's own type (for `fill_with`): where to
/// write, the first value, and how many. No padding: its bytes are its
/// fields'.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Fill {
    /// `n` words of device memory.
    pub out: *mut u64,
    /// What thread 0 writes; thread `i` writes `value + i`.
    pub value: u64,
    /// Threads that write.
    pub n: u32,
    /// Zero (the struct's padding made explicit).
    pub pad: u32,
}

// SAFETY: `repr(C)` plain data with its padding made a field (`pad`), so
// every byte is its value's; `to_bytes` writes its fields at their offsets.
unsafe impl warpalloc_device::kernel::Param for Fill {
    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != core::mem::size_of::<Fill>() {
            return None;
        }
        let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let half = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        Some(Fill {
            out: core::ptr::with_exposed_provenance_mut(word(0) as usize),
            value: word(8),
            n: half(16),
            pad: half(20),
        })
    }

    #[cfg(not(target_arch = "nvptx64"))]
    fn to_bytes(&self) -> alloc::vec::Vec<u8> {
        let mut bytes = (self.out.expose_provenance() as u64).to_ne_bytes().to_vec();
        bytes.extend(self.value.to_ne_bytes());
        bytes.extend(self.n.to_ne_bytes());
        bytes.extend(self.pad.to_ne_bytes());
        bytes
    }
}

const _: () = assert!(core::mem::size_of::<Fill>() == 24);

kernel! {
    /// Thread `i < args.n` writes `args.value + i` to `args.out[i]`: a
    /// kernel whose parameter is a struct of the program's own.
    pub fn fill_with(args: Fill) {
        let i = simt::global_thread_id() as u32;
        if i < args.n {
            // SAFETY: the host passes `n` words at `out`.
            unsafe { args.out.add(i as usize).write(args.value + u64::from(i)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{check_pattern, checked_middle, write_pattern};
    use alloc::vec;

    /// A block that starts inside another of up to 64 KiB is seen, written
    /// after it, whatever its size: its tag (its first 16 bytes) covers
    /// the checked bytes of the first's granule there, and one check fails
    /// — wherever it starts (every 16 B, the blocks' alignment). (In a
    /// block above 64 KiB, whose spans are 4 KiB apart, only a block over a
    /// span is.) With 16 bytes checked every 256 (before 2026-12-07), the
    /// 16-, 48-, 112- and 128-byte cases failed.
    #[test]
    #[cfg_attr(miri, ignore = "millions of byte checks; runs natively")]
    fn a_block_inside_another_is_seen() {
        for (first, second) in [
            (512usize, 256usize),
            (8192, 256),
            (8192, 4096),
            (65_536, 1024),
            (4096, 65_536),
            (8192, 16),
            (8192, 48),
            (512, 16),
            (65_536, 128),
            (4096, 112),
        ] {
            let mut memory = vec![0u8; first + second];
            let base = memory.as_mut_ptr();
            for offset in (16..first).step_by(16) {
                // SAFETY: both blocks lie inside `memory`.
                let seen = unsafe {
                    write_pattern(base, first, 1, 1);
                    write_pattern(base.add(offset), second, 2, 2);
                    !check_pattern(base, first, 1, 1)
                        || !check_pattern(base.add(offset), second, 2, 2)
                };
                assert!(
                    seen,
                    "a {second}-byte block at {offset} in a {first}-byte one"
                );
            }
        }
    }

    /// A planted corruption's byte is one the check reads.
    #[test]
    #[cfg_attr(miri, ignore = "millions of byte checks; runs natively")]
    fn a_planted_corruption_is_seen_at_every_size() {
        for size in (16..70_000).step_by(7).chain([1 << 20, 3 << 20]) {
            let mut memory = vec![0u8; size];
            let p = memory.as_mut_ptr();
            // SAFETY: `size` bytes of `memory`.
            unsafe {
                write_pattern(p, size, 3, 4);
                *p.add(checked_middle(size)) ^= 0x5a;
                assert!(!check_pattern(p, size, 3, 4), "{size}");
            }
        }
    }
}
