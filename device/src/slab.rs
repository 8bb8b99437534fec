//! A slab: 2 MiB, aligned to 2 MiB, serving blocks of one size class.
//!
//! ```text
//!   0        4        8        12       16                data           2 MiB
//!   ┌────────┬────────┬────────┬────────┬──────────────┬─────┬──────────────┐
//!   │ block  │ slot   │ words  │ magic  │ bitfield[]   │ pad │ blocks[]     │
//!   └────────┴────────┴────────┴────────┴──────────────┴─────┴──────────────┘
//!   header (16 B)                        words × u32     to data_align
//! ```
//!
//! Bit `i` of the bitfield is set while block `i` (at `data + i·block`) is
//! allocated. A pointer that is not 2 MiB aligned belongs to the slab at its
//! 2 MiB boundary (the header sits where no block can); the granule table of the
//! heap says whether that slab is live before anything here is read.
//!
//! Invariants: `set bits ≤ usable`; bits `≥ usable` are never set; a bit is
//! set by exactly one lane (the one whose `fetch_or` turned it from 0 to 1)
//! and cleared by exactly one (whose `fetch_and` turned it from 1 to 0).

use crate::event::{Event, record};
use crate::index::{OFFSET_BITS, divide, reduce, valid_bits, wrap};
use crate::simt::{self, Scope};
use crate::size_class::{
    Geometry, HEADER_BYTES, MAX_DATA_ALIGN, SLAB_SIZE, WORD_BITS, class_index, geometry,
};
use crate::sync::{AtomicU32, Ordering, fence};

/// "WASL": marks a slab header written by this allocator.
pub const MAGIC: u32 = 0x5741_534c;

/// The header at offset 0 of every slab.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// Block bytes of the slab's class.
    pub block: u32,
    /// The slot that publishes the slab.
    pub slot: u32,
    /// Bitfield words of the class (kept while the slab is empty, so that a
    /// reuse knows how much of it is known to be zero).
    pub words: u32,
    /// [`MAGIC`].
    pub magic: u32,
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER_BYTES as usize);

impl Header {
    /// The header [`Slab::init`] writes for class `geo` in slot `slot`.
    pub const fn new(geo: Geometry, slot: u32) -> Header {
        Header {
            block: geo.block,
            slot,
            words: geo.words,
            magic: MAGIC,
        }
    }

    /// Its bytes as the device holds them (little-endian `u32`s, in field
    /// order): what the host writes at a slab it publishes
    /// (`DeviceHeap::publish_empty`).
    pub fn to_bytes(self) -> [u8; HEADER_BYTES as usize] {
        let mut bytes = [0u8; HEADER_BYTES as usize];
        for (at, field) in [self.block, self.slot, self.words, self.magic]
            .into_iter()
            .enumerate()
        {
            bytes[4 * at..4 * at + 4].copy_from_slice(&field.to_le_bytes());
        }
        bytes
    }

    /// The geometry of the class this header names, if `block` is one of
    /// the size classes' block sizes.
    #[inline(always)]
    pub fn geometry(&self) -> Option<Geometry> {
        if self.block < 16 || self.block as u64 > SLAB_SIZE / 2 {
            return None;
        }
        let geo = geometry(class_index(self.block));
        (geo.block == self.block).then_some(geo)
    }
}
const _: () = assert!(SLAB_SIZE.is_power_of_two());

/// A slab, by its address. The address must be a slab this heap owns for
/// every method that reads or writes through it (see each `# Safety`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slab(pub u64);

impl Slab {
    /// The slab containing `addr`.
    #[inline(always)]
    pub fn containing(addr: u64) -> Slab {
        Slab(addr & !(SLAB_SIZE - 1))
    }

    #[inline(always)]
    fn header_ptr(self) -> *mut Header {
        self.0 as usize as *mut Header
    }

    /// Reads the header.
    ///
    /// # Safety
    /// The slab is mapped and its header was written by [`Slab::init`]
    /// before (in happens-before order) this read.
    #[inline(always)]
    pub unsafe fn header(self) -> Header {
        // A load the lane waits for: the simulator counts it on the lane's
        // chain of round trips (`LaunchStats::round_trips`).
        #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
        warpalloc_sim::count_round_trip();
        // SAFETY: the caller's contract; the header is 16-byte aligned at
        // the slab's start.
        unsafe { self.header_ptr().read() }
    }

    /// Bitfield word `i`.
    ///
    /// # Safety
    /// The slab is mapped and `i` is below its class's word count.
    #[inline(always)]
    pub unsafe fn word<'a>(self, i: u32) -> &'a AtomicU32 {
        let ptr = (self.0 + u64::from(HEADER_BYTES) + 4 * u64::from(i)) as usize as *mut u32;
        // SAFETY: in bounds of a mapped slab by the caller's contract, and
        // 4-byte aligned; bitfield words are only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(ptr) }
    }

    /// Prepares the slab for class `geo` in slot `slot`. Every lane of
    /// `group` calls it; they zero the bitfield words from `clean_words` up
    /// together (words below `clean_words` are known to be zero: an empty
    /// slab of a class with that many words). Ends with a `syncwarp` of
    /// the group, after which the leader may publish the slab.
    ///
    /// # Safety
    /// The group owns the slab exclusively (a fresh claim), and it is mapped.
    pub unsafe fn init(self, group: u32, geo: Geometry, slot: u32, clean_words: u32) {
        // The leader's acquire of the slab (the provider's answer, the pool's
        // pop, a takeover's CAS) happens-before every lane's stores below,
        // over what was the slab's last use: `bar.warp.sync` orders memory
        // among the lanes it synchronises, a shuffle does not (PTX ISA).
        simt::syncwarp(group);
        let rank = (group & simt::lanemask_lt()).count_ones();
        let lanes = group.count_ones();
        if rank == 0 {
            // SAFETY: exclusive ownership by the caller's contract; the
            // header is in bounds and aligned.
            unsafe {
                let header = self.header_ptr();
                // `block` by an atomic store, though no one reads it now
                // without a reference (a search once did): as a plain
                // write, ptxas gave `malloc_only` 45 registers on sm_90
                // instead of 42 (2026-12-05).
                AtomicU32::from_ptr(&raw mut (*header).block).store(geo.block, Ordering::Relaxed);
                (&raw mut (*header).slot).write(slot);
                (&raw mut (*header).words).write(geo.words);
                (&raw mut (*header).magic).write(MAGIC);
            };
        }
        // Plain stores, interleaved across the group (coalesced on the GPU):
        // nobody else can touch a slab that is not published yet — a stray
        // free cannot lock it — and the release below orders them before
        // every later atomic access.
        let bitfield = (self.0 + u64::from(HEADER_BYTES)) as usize as *mut u32;
        let mut i = clean_words.min(geo.words) + rank;
        while i < geo.words {
            // SAFETY: `i < geo.words`: inside the mapped slab's bitfield,
            // which the group owns exclusively (the caller's contract).
            unsafe { bitfield.add(i as usize).write(0) };
            i += lanes;
        }
        // ORDERING: release (gpu): this lane's zeroing is ordered before the
        // syncwarp, after which the leader's release fence in
        // `Guard::publish` makes the whole slab visible to lockers.
        fence(Ordering::Release, Scope::Gpu);
        simt::syncwarp(group);
    }

    /// The block index of `addr` in a slab of class `geo`, if `addr` is a
    /// pointer the allocator may have handed out for that block: its first
    /// byte, or — from `aligned_alloc` with an alignment above
    /// `MAX_DATA_ALIGN` (4 KiB), the only ones rounded up inside a block
    /// (`size_class::place`) — the first byte rounded up to that alignment,
    /// which is then at most `addr`'s own (its lowest set bit) and the
    /// class's `geo.round` (the most `place` rounds up to in it; 0 for
    /// none), and more than `addr`'s distance into the block. What `free`
    /// accepts: any other pointer into a block (`p + 8`, and `p + 16` at a
    /// 32-byte boundary, which a 48-byte block's middle often is) is an
    /// invalid free, which frees nothing. (A pointer into a block at a
    /// boundary that such a rounding could have made is taken for one:
    /// without a tag per allocation, no allocator can tell.) Until
    /// 2026-12-07 any pointer into a block at a boundary above its distance
    /// into it was taken: `free(p + 16)` freed half the 48-byte blocks it
    /// was given; and later that day, any such pointer in a block of more
    /// than 4 KiB, whatever its class could be rounded to: 2 KiB into the
    /// third 6 KiB block, at a 16 KiB boundary, freed that live block (a
    /// review; `place` never rounds up in the 6 KiB class).
    #[inline(always)]
    pub fn freeable_index_of(self, addr: u64, geo: Geometry) -> Option<u32> {
        // Below the blocks, the subtraction wraps past the range check.
        let offset = addr.wrapping_sub(self.0 + u64::from(geo.data));
        if offset >= 1 << OFFSET_BITS {
            return None;
        }
        let index = divide(offset as u32, geo.magic);
        let into = (offset as u32).wrapping_sub(index.wrapping_mul(geo.block));
        // `addr`'s alignment, at most 2^31 (more than any block).
        let low = addr as u32 | 1 << 31;
        let align = low & low.wrapping_neg();
        // Above 4 KiB, `into` below `addr`'s alignment and the class's
        // `round`; else 0 (a bound of 1). Of four forms (ptxas,
        // 2026-12-07), this one costs the free path least: a register more
        // than before on sm_75 and sm_90. In a block of 4 KiB or less no
        // pointer is rounded up (`place` gives an alignment above 4 KiB a
        // larger block; `round` is 0): 0 there, whatever `addr`'s alignment
        // — a 48-byte block at offset 8 176 has its `p + 16` at an 8 KiB
        // boundary, which was taken for the block (a review, 2026-12-07).
        // The class's `round` in place of a mask of its block's size (all
        // ones above 4 KiB) cost no register (ptxas, 2026-12-07).
        let limit = (align & !(2 * MAX_DATA_ALIGN - 1)).min(geo.round).max(1);
        (index < geo.usable && into < limit).then_some(index)
    }

    /// The address of block `index`.
    #[inline(always)]
    pub fn block_addr(self, index: u32, geo: Geometry) -> u64 {
        self.0 + u64::from(geo.data) + u64::from(index) * u64::from(geo.block)
    }

    /// Allocates one block for each lane of `uniform` (lanes that share this
    /// slab and each hold a reservation; `reserved` is the lane's 1-based
    /// position among the slab's reservations). All lanes of `uniform` call
    /// it; each gets a distinct block.
    ///
    /// The walk starts at a word drawn from the warp's slot, at a bit drawn
    /// from it too (so that a run of the group's size fits the word): warps
    /// that run at once start at different words, warps that share a word
    /// at different bits, and a warp that comes back to a slab (its
    /// stream's hint names the slab it last used) finds the bits it freed
    /// free again. In a slab of few words (`LOOK_WORDS`: 1 KiB blocks and
    /// larger), where the warps that share it meet in their words, the
    /// walk of a group whose stream's hint names no block of the slab
    /// starts where a load says there is room instead (`roomy_start`).
    /// Lanes that land in one word set their bits with one `fetch_or`;
    /// lanes that lost use the word it returned: to the first run of free
    /// bits there that holds them all (from the warp's bit on), or, when
    /// none does, to the nearest word a load says has room (few words) or
    /// a random word (many) — at once: the next try is elsewhere, so a
    /// wait would only delay it.
    ///
    /// `hinted` is a block plus one (0: none) where the caller's stream
    /// last freed in this slab (its hint, `HINT_BLOCK_SHIFT`): a group of
    /// half a word or more starts there, with no look — the run its stream
    /// freed, free again unless another warp took it — and so does any
    /// group in a slab of few words. In a slab of many words a smaller
    /// group's freed bits are few and soon taken: it starts as above. In a
    /// slab of few words a small group that finds the hint's block taken
    /// learns the word from its `fetch_or` and takes a free run of it at
    /// once: its second round costs the round trip that a look cost every
    /// such malloc before. In the contention test's mixed launch (cold and
    /// warm; 2026-12-06, 19:53-20:30 UTC), lone lanes that start at the hint's
    /// block lose it 11 % of the time in slabs under a quarter full, 45 %
    /// in slabs three quarters full — another warp that took the block
    /// and freed it points its own hint there too — and groups of 2 to 15
    /// lanes 15 to 63 %: 0.147 to 0.154 extra walk rounds and 0.006 to
    /// 0.008 looks per group-malloc, against 0.077 to 0.081 and 0.36
    /// before; the best warp's path 7 round trips per pair (8 before),
    /// their mean over the warps 9.1 to 9.3 (9.6 to 9.7), and under the
    /// timed schedule 2.5 % fewer cycles per pair (BENCHMARKS.md, "The
    /// hint's block in slabs of few words"). In the
    /// contention test's warm launches (2026-12-05, 11:35-11:58 UTC),
    /// extra walk rounds per group-malloc went from 0.08–0.24 to 0.02–0.05
    /// at 1 KiB and from 0.27–0.48 to 0.24–0.42 at 8 KiB, and the look's
    /// round trip left the path at 1 KiB (8 → 7 per pair); with every
    /// group starting at its hint, mixed sizes went from 0.15 to 0.42–0.55.
    ///
    /// Measured with the contention test's warm launches (2026-12-05 03:31
    /// UTC, extra walk rounds per group-malloc): from the warp's word at
    /// bit 0, 0.28 at 1 KiB, 1.1 to 1.4 at 8 KiB and 1.26 mixed (the small
    /// groups of a mixed launch collide at bit 0 of shared words, and their
    /// second try from the first free bit meets the next warp's blocks);
    /// with the warp's bit and the run that fits, 0.26, 1.35 and 0.25;
    /// with the look in slabs of up to 64 words too, 0.11 to 0.14, 0.35 to
    /// 0.50 and 0.15 to 0.18, for one load more per malloc there (the
    /// path's round trips per pair: 17 at 16 and 64 B, 18 at 1 and 8 KiB).
    /// Looking in slabs of up to 1 024 words too took mixed to 0.12 and 64
    /// B from 0.003 to 0: not worth a load on every malloc of 64 B. Picking
    /// among the words with room by the group's place among the slab's
    /// reservations, rather than the nearest, doubled the rounds at 1 KiB.
    ///
    /// Measured with the contention test's warm launches (2026-12-05, extra
    /// walk rounds per warp-malloc and the walk's sleep per pair): starting
    /// at the group's reservation position, as before, 0.41 extra rounds
    /// and 49 ns at 16 B, 0.58 and 70 ns at 64 B — a reservation position
    /// is where other warps' live blocks sit once a slab has turned over;
    /// from the warp's word, 0.006 and 0.003 rounds. With a stream per warp,
    /// 1 KiB took 0.63 to 0.65 extra rounds from the reservation and 0.28 to
    /// 0.32 from the warp's word; a drawn wait (32 to 256 ns) before a
    /// random word cost 31 to 98 ns of sleep per pair at 1 KiB and 8 KiB,
    /// and without it, 0 to 11 ns.
    ///
    /// The warp's word and bit come from one hash of its slot (the bit
    /// from where the hash falls within the word's share), and in a slab
    /// of many words the bit moves with the group's first lane. Before,
    /// the bit came from a second hash, the same for every lane of the
    /// warp: in the contention test's mixed launch, where a warp's lanes
    /// each allocate their own size and free it after a loop of that
    /// size's length, a lane's malloc often met the block another lane of
    /// its warp still held at the warp's bit. Extra walk rounds per
    /// group-malloc, mixed, warm (2026-12-05, 12:15–12:22 UTC): 0.153 to
    /// 0.177 before; 0.136 to 0.150 with one hash; 0.10 with the lane in
    /// every slab (dense slabs' rounds up by half: their look already
    /// finds a free bit, and the lanes' shifts undo the hash's spacing);
    /// 0.078 to 0.088 with the lane in slabs of many words only. Of the
    /// 0.15 before, lanes alone in their group in slabs of many words had
    /// 0.07, and 0.013 after.
    ///
    /// # Safety
    /// Each lane holds a reservation on this live slab (a successful lock
    /// whose position is ≤ `geo.usable`), so a free bit exists for it.
    pub unsafe fn allocate(self, uniform: u32, reserved: u32, geo: Geometry, hinted: u32) -> u64 {
        // The leader's acquire of the slab (its lock) happens-before every
        // lane's walk: a slab's words zeroed by its creator with plain stores
        // are zero to each lane's `fetch_or`. `bar.warp.sync` orders memory
        // among the lanes it synchronises, the scan's shuffles do not (PTX
        // ISA).
        simt::syncwarp(uniform);
        let bits = geo.usable.max(1);
        let mut state = simt::draw();
        debug_assert!((1..=geo.usable).contains(&reserved));
        // The warp's word and its bit in it, from one hash of its slot:
        // the word from the hash's place among the words, the bit from its
        // place within that word's share — so warps that share a word
        // start at bits as far apart as their hashes (for consecutive
        // slots, Fibonacci hashing spaces them evenly).
        // The leader's reading of the warp's slot, for every lane: the walk
        // needs one start for the group (a run's head sets its lanes' bits),
        // and `%smid`/`%warpid` are volatile (PTX ISA, special registers): a
        // warp preempted between two lanes' reads could see two values.
        let slot = simt::shfl_u32(uniform, simt::warp_slot(), simt::leader(uniform));
        let placed = u64::from(slot.wrapping_mul(0x9e37_79b9)) * u64::from(geo.words);
        let own = (placed >> 32) as u32;
        let dense = geo.words <= LOOK_WORDS;
        // In a slab of many words (no look), the bit moves with the
        // group's first lane, a 32nd of the word per lane: a warp's lanes
        // whose calls come apart (each lane its own size, say) start at
        // bits of their own instead of the one the warp's other lanes may
        // still hold.
        let lead = if dense {
            0
        } else {
            uniform.trailing_zeros() << (32 - WORD_BITS.ilog2())
        };
        let pref = reduce(
            (placed as u32).wrapping_add(lead),
            WORD_BITS + 1 - uniform.count_ones(),
        );
        let blind = own * WORD_BITS + pref;
        // The block the stream's hint names (where it last freed in this
        // slab): a group of half a word or more, and any group in a slab
        // of few words, starts there, with no look.
        let named = hinted.wrapping_sub(1);
        let first = if named < bits && uniform.count_ones() >= WORD_BITS / 2 {
            named
        } else if named < bits && dense {
            // A smaller group: the block its stream freed — or, where the
            // hint names a word's first block, as the host aims a stream at
            // a word (`DeviceHeap::aim_hints`), the warp's bit in that word,
            // so that the streams aimed at one word start apart (a block
            // freed at a word's first bit reads the same: one in 32). With
            // the aimed block itself, the mixed launch after a spread took
            // 0.238 extra walk rounds per group-malloc, 0.131 to 0.151 so.
            let at = named + pref;
            if named.is_multiple_of(WORD_BITS) && at < bits {
                at
            } else {
                named
            }
        } else if dense {
            // SAFETY: the caller's contract (a reservation each on this
            // live slab); `own < geo.words`.
            match unsafe { self.roomy_start(uniform, own, pref, geo) } {
                u32::MAX => blind,
                start => start,
            }
        } else {
            blind
        };
        // The last word may be partial: below `usable` only.
        let mut start = if first < bits { first } else { 0 };
        let mut result = 0u64;
        let mut waiting = uniform;
        while waiting != 0 {
            if result == 0 {
                // Lanes still looking: `waiting`, all of them here.
                let lt = simt::lanemask_lt();
                let id = (waiting & lt).count_ones();
                // `start < bits` and `id <` the group's size `≤ bits` (each
                // lane holds a reservation).
                let index = wrap(start, id, bits);
                let word = index / WORD_BITS;
                let bit = index % WORD_BITS;
                // Runs of lanes whose bits are consecutive in one word: a run
                // starts at the first lane and at every word boundary (and at
                // the wrap to index 0, which is a word boundary).
                let heads = simt::ballot(waiting, id == 0 || bit == 0);
                let me = simt::lane_id();
                let head = 31 - (heads & lanes_below(me + 1)).leading_zeros();
                let above = heads & !lanes_below(head + 1);
                let next = if above == 0 {
                    32
                } else {
                    above.trailing_zeros()
                };
                let run = waiting & lanes_below(next) & !lanes_below(head);
                // Bits of a run are consecutive from the head's bit.
                let head_bit = bit - (run & lt).count_ones();
                let run_mask = (((1u64 << run.count_ones()) - 1) << head_bit) as u32;
                let mut before = 0;
                if me == head {
                    // SAFETY: `word < geo.words` since `index < usable`.
                    before = unsafe { self.word(word) }.fetch_or(run_mask);
                }
                let before = simt::shfl_u32(waiting, before, head);
                if before & (1 << bit) == 0 {
                    result = self.block_addr(index, geo);
                }
                let after = before | run_mask;
                let still = simt::ballot(waiting, result == 0);
                if still != 0 && me == simt::leader(waiting) {
                    record(Event::ExtraProbe);
                }
                if result == 0 {
                    // The word's free blocks: a run that holds every lane
                    // left, else any (the first lanes get theirs).
                    let free = !after & valid_bits(word, bits);
                    let runs = match runs_of(free, still.count_ones()) {
                        0 => free,
                        runs => runs,
                    };
                    let here = if runs != 0 {
                        word * WORD_BITS + pick(runs, pref)
                    } else {
                        u32::MAX
                    };
                    let leader = simt::leader(still);
                    let mut next = simt::shfl_u32(still, here, leader);
                    if next == u32::MAX && dense {
                        let from = simt::shfl_u32(still, word, leader);
                        // SAFETY: the caller's contract; `from < words`.
                        next =
                            unsafe { self.roomy_start(still, wrap(from, 1, geo.words), pref, geo) };
                    }
                    if next == u32::MAX {
                        let random = reduce(xorshift32(&mut state), bits) & !(WORD_BITS - 1);
                        next = simt::shfl_u32(still, random, leader);
                    }
                    start = next;
                }
            }
            waiting = simt::ballot(uniform, result == 0);
        }
        // ORDERING: acquire (gpu): a head's, after its `fetch_or`, pairs
        // with the release fence of the lane that freed the block
        // (`deallocate`): its accesses to the block happen-before ours.
        fence(Ordering::Acquire, Scope::Gpu);
        // The lanes that did not read the word themselves are ordered after
        // their head's acquire: `bar.warp.sync` orders memory among the
        // lanes it synchronises, a shuffle does not (PTX ISA).
        simt::syncwarp(uniform);
        result
    }

    /// Where the walk of the lanes of `uniform` (all calling; `n` of
    /// them) starts in a slab of few words (`geo.words ≤ LOOK_WORDS`): the
    /// first bit of a run of `n` free bits (a whole free word for 32) in
    /// the nearest word from the warp's own (`own`) that has one, by a load
    /// of each word looked at — `n` words at once, one a lane, at most
    /// `LOOK_ROUNDS` times and 32 words. Where no word looked at has such a
    /// run, the first free bit of the nearest word with any (the first
    /// lanes get theirs: a run that fits may not exist anywhere, and a walk
    /// that only looked for one never ended in a slab of scattered free
    /// blocks — the test `malloc_cost_stays_flat_as_one_class_grows` hung);
    /// `u32::MAX` if none has. Of a word's runs or free bits, the first at
    /// or above the warp's bit `pref`.
    ///
    /// # Safety
    /// As for [`Slab::allocate`]; `own < geo.words`.
    #[inline(always)]
    unsafe fn roomy_start(self, uniform: u32, own: u32, pref: u32, geo: Geometry) -> u32 {
        let n = uniform.count_ones();
        let rank = (uniform & simt::lanemask_lt()).count_ones();
        let span = geo.words.min(WORD_BITS).min(n * LOOK_ROUNDS);
        let mut looked = 0;
        while looked < span {
            if simt::is_leader(uniform) {
                record(Event::Look);
            }
            let offset = looked + rank;
            // The first bit of a run that holds the group, and of any room.
            let (mut fits, mut some) = (u32::MAX, u32::MAX);
            if offset < span {
                // `own < words` and `offset < words`.
                let word = wrap(own, offset, geo.words);
                // SAFETY: `word < geo.words`.
                let seen = unsafe { self.word(word) }.load(Ordering::Relaxed);
                let free = !seen & valid_bits(word, geo.usable);
                let runs = runs_of(free, n);
                if runs != 0 {
                    fits = word * WORD_BITS + pick(runs, pref);
                }
                if free != 0 {
                    some = word * WORD_BITS + pick(free, pref);
                }
            }
            // The lowest lane with room looked nearest.
            let roomy = simt::ballot(uniform, fits != u32::MAX);
            if roomy != 0 {
                return simt::shfl_u32(uniform, fits, simt::leader(roomy));
            }
            let partly = simt::ballot(uniform, some != u32::MAX);
            if partly != 0 {
                return simt::shfl_u32(uniform, some, simt::leader(partly));
            }
            looked += n;
        }
        u32::MAX
    }

    /// Clears the bits of the blocks that the lanes of `uniform` (all of
    /// which call this together, on this slab) free: `index` is the lane's
    /// block, `None` for a pointer that is no block of the slab. Lanes
    /// combine their bits and one lane of each combination clears them with
    /// one `fetch_and`, as `allocate`'s `fetch_or` sets them. Returns whether
    /// this lane's free was real: its bit was set and no lower lane of the
    /// call freed the same block; `false` is a double free (nothing
    /// changed). Of several lanes freeing one block in one call only the
    /// lowest clears its bit, so a block that another warp allocates while
    /// the call runs keeps its bit.
    ///
    /// How lanes combine depends on the architecture ([`simt::has_redux`]):
    /// - with `redux.sync` (sm_80 and later), all lanes on one bitfield word
    ///   OR their bits together: one atomic per word touched;
    /// - without (sm_75), lanes combine when their blocks lie on one word
    ///   *at one offset from their lane ids* (lane `l` frees block `b + l`,
    ///   as a coalesced malloc handed them out): the combined bits are the
    ///   group's lane mask rotated by that offset, with no shuffles. A
    ///   coalesced free is one atomic per word either way; a permuted one
    ///   takes up to one per lane here. Shuffling the bits together would
    ///   cost the free path 5 more registers (29 instead of 24 on sm_75),
    ///   paid by every kernel that frees.
    ///
    /// # Safety
    /// The caller holds a reference to this live slab for each lane, and
    /// every `index` is below the class's `usable`.
    #[inline(always)]
    pub unsafe fn deallocate(self, uniform: u32, index: Option<u32>) -> bool {
        if simt::has_redux() {
            // SAFETY: the caller's contract.
            unsafe { self.deallocate_by_word(uniform, index) }
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.deallocate_by_run(uniform, index) }
        }
    }

    /// [`Slab::deallocate`] combining every lane on one word
    /// ([`simt::reduce_or`]).
    ///
    /// # Safety
    /// As for [`Slab::deallocate`].
    #[inline(always)]
    unsafe fn deallocate_by_word(self, uniform: u32, index: Option<u32>) -> bool {
        let (i, first) = first_to_free(uniform, index);
        let bit = match index {
            Some(i) if first => 1u32 << (i % WORD_BITS),
            _ => 0,
        };
        check_cleared_once(uniform, i, bit != 0);
        // The lanes on my word; the lowest of them (the head) clears their
        // bits, ORed over the group.
        let word = i / WORD_BITS;
        let group = simt::match_any_u32(uniform, word);
        let head = simt::leader(group);
        let combined = simt::reduce_or(group, bit);
        // SAFETY: the caller's contract; `combined` holds the bits of the
        // group's blocks, `word` is theirs.
        let before = unsafe { self.clear_at_head(uniform, head, index.is_some(), word, combined) };
        bit != 0 && before & bit != 0
    }

    /// [`Slab::deallocate`] combining the lanes on one word whose blocks sit
    /// at one offset from their lane ids (a run), by rotating their mask.
    ///
    /// # Safety
    /// As for [`Slab::deallocate`].
    #[inline(always)]
    unsafe fn deallocate_by_run(self, uniform: u32, index: Option<u32>) -> bool {
        let me = simt::lane_id();
        let (i, first) = first_to_free(uniform, index);
        // The run's key: its word (the block index's upper bits) and the
        // offset of its bits from its lanes (the lower five), as
        // `WORD_BITS` divides the index. No block index reaches `u32::MAX`
        // (`usable` is far below), so lanes with nothing to clear form a
        // run of their own.
        const _: () = assert!(WORD_BITS == 32);
        let key = match index {
            Some(i) if first => (i & !(WORD_BITS - 1)) | (i.wrapping_sub(me) % WORD_BITS),
            _ => u32::MAX,
        };
        let clears = key != u32::MAX;
        check_cleared_once(uniform, i, clears);
        let run = simt::match_any_u32(uniform, key);
        let head = simt::leader(run);
        // Lane `l` of the run frees bit `(l + offset) % 32`: the run's mask
        // rotated (distinct lanes at one offset: distinct bits).
        let bits = run.rotate_left(key % WORD_BITS);
        let word = key / WORD_BITS;
        // SAFETY: the caller's contract; `bits` are the run's blocks, on
        // `word`, theirs.
        let before = unsafe { self.clear_at_head(uniform, head, clears, word, bits) };
        clears && before & (1 << (i % WORD_BITS)) != 0
    }

    /// The end of both combinings: lane `head` of each group clears `bits`
    /// on `word` (when `valid`), and every lane gets its head's word as it
    /// was before.
    ///
    /// # Safety
    /// As for [`Slab::deallocate`]; where `valid`, `word` is a bitfield word
    /// of the slab and `bits` are the group's blocks on it.
    #[inline(always)]
    unsafe fn clear_at_head(
        self,
        uniform: u32,
        head: u32,
        valid: bool,
        word: u32,
        bits: u32,
    ) -> u32 {
        // The lanes' last accesses to their blocks happen-before what the
        // heads do next: `bar.warp.sync` orders memory among the lanes it
        // synchronises.
        simt::syncwarp(uniform);
        let mut before = 0;
        if simt::lane_id() == head && valid {
            // ORDERING: release (gpu), cumulative: the freeing lanes'
            // accesses to their blocks (ordered before this by the syncwarp)
            // happen-before the next owners' (pairs with the acquire fence at
            // the end of `allocate`).
            fence(Ordering::Release, Scope::Gpu);
            // SAFETY: `index < usable` so the word is in the bitfield.
            before = unsafe { self.word(word) }.fetch_and(!bits);
        }
        simt::shfl_u32(uniform, before, head)
    }

    /// Whether block `index` is allocated now (its bit is set).
    ///
    /// # Safety
    /// As for [`Slab::header`]; `index < usable`.
    #[inline(always)]
    pub unsafe fn is_allocated(self, index: u32) -> bool {
        // SAFETY: `index < usable` so the word is in the bitfield.
        let word = unsafe { self.word(index / WORD_BITS) }.load(Ordering::Relaxed);
        word & (1 << (index % WORD_BITS)) != 0
    }

    /// The class geometry of a live slab.
    ///
    /// # Safety
    /// As for [`Slab::header`].
    #[inline(always)]
    pub unsafe fn geometry(self) -> Option<Geometry> {
        // SAFETY: the caller's contract.
        unsafe { self.header() }.geometry()
    }
}

/// The lane's block index (`u32::MAX` for none) and whether the lane is
/// the one that frees it: of lanes freeing one block in one call, the
/// lowest; the others are double frees and clear nothing (letting both
/// clear would let another warp's malloc take the block between the two
/// clears and lose its bit to the second).
#[inline(always)]
fn first_to_free(uniform: u32, index: Option<u32>) -> (u32, bool) {
    let i = index.unwrap_or(u32::MAX);
    (
        i,
        simt::leader(simt::match_any_u32(uniform, i)) == simt::lane_id(),
    )
}

/// The invariant behind a free's combining, checked in the simulator's
/// debug builds: no block is cleared by two lanes of one call (`clears`:
/// lane's bit for block `index` goes into its group's `fetch_and`).
/// Otherwise a block that another warp allocates between the two clears
/// would lose its bit to the second — a window too narrow for a stress run
/// to hit, so the equation is checked instead. Panics (a simulator report)
/// when broken; nothing in release builds or on the GPU.
#[inline(always)]
fn check_cleared_once(uniform: u32, index: u32, clears: bool) {
    #[cfg(all(debug_assertions, not(target_arch = "nvptx64")))]
    {
        // No block index is `u32::MAX` (`usable` is far below).
        let same = simt::match_any_u32(uniform, if clears { index } else { u32::MAX });
        assert!(
            !clears || same.count_ones() == 1,
            "block {index} cleared by lanes {same:#x} of one free"
        );
    }
    #[cfg(not(all(debug_assertions, not(target_arch = "nvptx64"))))]
    let _ = (uniform, index, clears);
}

/// Slabs of at most this many bitfield words (1 KiB blocks and larger)
/// start their walk where a load says there is room ([`Slab::allocate`]).
pub const LOOK_WORDS: u32 = 64;
/// How many times `roomy_start` loads a word a lane before it gives up.
const LOOK_ROUNDS: u32 = 2;

/// The bits `p` of `free` that start a run of `n` set bits (`p..p + n`
/// all set; `n` from 1 to 32).
#[inline(always)]
fn runs_of(free: u32, n: u32) -> u32 {
    let mut runs = free;
    let mut have = 1;
    while have < n {
        let step = have.min(n - have);
        runs &= runs >> step;
        have += step;
    }
    runs
}

/// The first of `runs` (not 0) at or above bit `pref` (below 32), else
/// the first: where warps that see one word's free runs alike start apart.
#[inline(always)]
fn pick(runs: u32, pref: u32) -> u32 {
    let above = runs & !lanes_below(pref);
    if above != 0 {
        above.trailing_zeros()
    } else {
        runs.trailing_zeros()
    }
}

/// Lanes `0..n` as a mask (`n` up to 32).
#[inline(always)]
fn lanes_below(n: u32) -> u32 {
    if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
}

/// xorshift32 with a multiplicative finish.
#[inline(always)]
fn xorshift32(state: &mut u32) -> u32 {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    state.wrapping_mul(0x9e37_79bb)
}

#[cfg(test)]
mod tests {
    use super::{Slab, runs_of};
    use crate::size_class::{
        CLASS_COUNT, MAX_DATA_ALIGN, Placement, SLAB_SIZE, class_index, geometry, place,
    };

    /// In every class, a block's first byte is its own and no other byte of
    /// it is, but for a pointer that `aligned_alloc` rounds up inside a
    /// block (alignments above 4 KiB); bytes outside the blocks are none.
    #[test]
    #[cfg_attr(miri, ignore = "safe arithmetic only, and minutes under Miri")]
    fn only_a_blocks_start_or_its_rounding_up_is_freeable() {
        let slab = Slab(SLAB_SIZE * 7);
        for class in 0..CLASS_COUNT {
            let geo = geometry(class);
            let blocks = (0..geo.usable.min(96)).chain([geo.usable - 1]);
            for i in blocks {
                let start = slab.block_addr(i, geo);
                assert_eq!(slab.freeable_index_of(start, geo), Some(i), "{}", geo.block);
                let into = (1..64u64)
                    .chain((6..20).map(|k| 1u64 << k))
                    .chain([u64::from(geo.block) - 1]);
                for d in into.filter(|&d| d < u64::from(geo.block)) {
                    let p = start + d;
                    // The most `aligned_alloc` rounds up by in this class:
                    // `p`'s own alignment, at most the class's `round`.
                    let own = 1u64 << p.trailing_zeros();
                    let most = own.min(u64::from(geo.round));
                    let want = (most > u64::from(MAX_DATA_ALIGN) && d < most).then_some(i);
                    assert_eq!(
                        slab.freeable_index_of(p, geo),
                        want,
                        "block {} #{i}, start {start:#x} + {d}",
                        geo.block
                    );
                }
            }
            assert_eq!(slab.freeable_index_of(slab.0 + 8, geo), None, "the header");
            let end = slab.block_addr(geo.usable, geo);
            assert_eq!(slab.freeable_index_of(end, geo), None, "past the blocks");
        }
        // A small block's middle at a large boundary: the 48-byte class's
        // block at offset 8 176 has `p + 16` at 8 KiB, which is no pointer
        // the allocator hands out (it was taken for one until 2026-12-07).
        let geo = geometry(class_index(48));
        let at = (0..geo.usable)
            .find(|&i| (slab.block_addr(i, geo) + 16).is_multiple_of(8192))
            .expect("a 48-byte block across an 8 KiB boundary");
        let p = slab.block_addr(at, geo);
        assert_eq!(p - slab.0, 8176, "the first such block");
        assert_eq!(slab.freeable_index_of(p + 16, geo), None);
        assert_eq!(slab.freeable_index_of(p, geo), Some(at));
        // A class that `aligned_alloc` never rounds up in (6 KiB: a smaller
        // class serves every request aligned above 4 KiB that it could):
        // its block 2 at 0x3800 has 0x4000, 2 KiB into it, at a 16 KiB
        // boundary — no pointer it hands out (a review, 2026-12-07: it was
        // taken for one, and freed the live block). The 1 MiB class is
        // rounded to 512 KiB at most: 1 MiB into its block 0 is not one.
        let geo = geometry(class_index(6144));
        assert_eq!(slab.block_addr(2, geo) - slab.0, 0x3800);
        assert_eq!(slab.freeable_index_of(slab.0 + 0x4000, geo), None);
        let geo = geometry(class_index(1 << 20));
        assert_eq!(slab.freeable_index_of(slab.0 + 0x10_0000, geo), None);
        assert_eq!(slab.freeable_index_of(slab.0 + 0x8_0000, geo), Some(0));
        // What `aligned_alloc` hands out above 4 KiB: freeable.
        for align in [8192u64, 16_384, 65_536, 262_144] {
            for bytes in [1u64, 100, 4096, 20_000] {
                let Placement::Slab { class } = place(bytes, align) else {
                    continue;
                };
                let geo = geometry(class);
                for i in 0..geo.usable.min(8) {
                    let p = slab.block_addr(i, geo).next_multiple_of(align);
                    assert_eq!(
                        slab.freeable_index_of(p, geo),
                        Some(i),
                        "{bytes} B at {align}"
                    );
                }
            }
        }
    }

    /// A header whose block is no class's names none, whatever it holds
    /// (a corrupt slab's, read by the host's check): 80 and 100 made
    /// `class_index` underflow, a panic in a debug build.
    #[test]
    fn a_header_of_no_class_names_no_geometry() {
        use super::Header;
        use crate::size_class::{CLASSES, LARGE_THRESHOLD};
        let of = |block| {
            Header {
                block,
                ..Header::new(geometry(0), 0)
            }
            .geometry()
        };
        for block in [0, 1, 15, 17, 80, 100, 65, 127, 129, 5000, u32::MAX] {
            assert_eq!(of(block), None, "{block}");
        }
        // Every class's block and its neighbours 16 bytes apart (every
        // size in steps of 16 took minutes under Miri).
        let near = CLASSES
            .iter()
            .flat_map(|g| [g.block - 16, g.block, g.block + 16])
            .chain([LARGE_THRESHOLD as u32 + 16]);
        for block in near {
            let class = CLASSES.iter().find(|g| g.block == block).copied();
            assert_eq!(of(block), class, "{block}");
        }
    }

    #[test]
    fn runs_of_marks_the_starts_of_free_runs() {
        // Each start p, for every n, against the bits one by one.
        for free in [
            0u32,
            1,
            0b1011_0111,
            0xf0f0_ff00,
            u32::MAX,
            0x8000_0001,
            0x7fff_fffe,
        ] {
            for n in 1..=32u32 {
                let want = (0..32u32)
                    .filter(|&p| p + n <= 32 && (p..p + n).all(|b| free & (1 << b) != 0))
                    .fold(0u32, |m, p| m | 1 << p);
                assert_eq!(runs_of(free, n), want, "free {free:#x}, n {n}");
            }
        }
    }
}
