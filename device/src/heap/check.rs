//! Checks and counts of a quiescent heap (no kernel running): its invariants
//! (`check`) and what is live in it (`census`; by size class,
//! `class_census`; large blocks one by one, `for_each_large`).
//!
//! Both read the heap's own state directly and the slabs' headers and
//! bitfields through a [`SlabMemory`], so that a host runs them on its copy
//! of a device heap, reading slab memory through its device interface.

use super::DeviceHeap;
use crate::granule::Granule;
use crate::index::valid_bits;
use crate::size_class::{CLASS_COUNT, Geometry, HEADER_BYTES, SLAB_SHIFT, class_index};
use crate::slab::{Header, MAGIC};
use crate::sync::Ordering;

/// Where slab memory is read from.
pub trait SlabMemory {
    /// Reads `out.len()` words at `addr` (4-byte aligned); `false` if the
    /// memory cannot be read.
    fn read_words(&self, addr: u64, out: &mut [u32]) -> bool;
}

/// What is live in a heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Slots that publish a slab with live blocks.
    pub live_slabs: u64,
    /// Blocks allocated in slabs (set bits).
    pub live_blocks: u64,
    /// Their bytes (block sizes, not the requested sizes).
    pub live_block_bytes: u64,
    /// Large blocks allocated.
    pub large_blocks: u64,
    /// Their bytes.
    pub large_bytes: u64,
    /// Slots that publish an empty slab (no live block): its class's next
    /// malloc, or any claim of a new slab, takes it; `trim` gives it back.
    pub empty_slabs: u64,
    /// Slabs in the pool.
    pub pool_slabs: u64,
}

impl Census {
    /// Allocations live now (slab blocks and large blocks).
    pub fn live_allocations(&self) -> u64 {
        self.live_blocks + self.large_blocks
    }

    /// Their bytes.
    pub fn live_bytes(&self) -> u64 {
        self.live_block_bytes + self.large_bytes
    }
}

/// What one size class holds in a quiescent heap (`class_census`).
///
/// `slabs ≥ empty_slabs`, `live_blocks ≤ (slabs − empty_slabs) · usable`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCensus {
    /// Slots that publish a slab of the class, empty ones included.
    pub slabs: u32,
    /// Of those, slabs with no live block.
    pub empty_slabs: u32,
    /// Blocks of the class allocated (set bits).
    pub live_blocks: u64,
}

/// Bitfield words read at a time.
const BATCH: usize = 64;

fn read_header(mem: &dyn SlabMemory, slab: u64) -> Option<Header> {
    let mut w = [0u32; 4];
    mem.read_words(slab, &mut w).then_some(Header {
        block: w[0],
        slot: w[1],
        words: w[2],
        magic: w[3],
    })
}

/// The geometry a header names, if it is one of ours.
fn header_geometry(h: &Header) -> Option<Geometry> {
    if h.magic != MAGIC {
        return None;
    }
    h.geometry()
}

/// Calls `f(word_index, word)` on the first `words` bitfield words of `slab`.
fn for_each_word(
    mem: &dyn SlabMemory,
    slab: u64,
    words: u32,
    mut f: impl FnMut(u32, u32),
) -> Result<(), &'static str> {
    let mut buf = [0u32; BATCH];
    let mut at = 0u32;
    while at < words {
        let n = ((words - at) as usize).min(BATCH);
        let addr = slab + u64::from(HEADER_BYTES) + 4 * u64::from(at);
        if !mem.read_words(addr, &mut buf[..n]) {
            return Err("a slab's bitfield cannot be read");
        }
        for (i, &w) in buf[..n].iter().enumerate() {
            f(at + i as u32, w);
        }
        at += n as u32;
    }
    Ok(())
}

impl DeviceHeap {
    /// The published slabs: (slot, slab).
    fn published(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.slots
            .iter(self.slot_count() as usize)
            .enumerate()
            .filter_map(|(i, g)| g.peek().map(|slab| (i as u32, slab)))
    }

    /// Checks the invariants of a quiescent heap (no kernel running),
    /// reading slabs through `mem`; returns the first violation.
    pub fn check(&self, mem: &dyn SlabMemory) -> Result<(), &'static str> {
        // A mark is a generation plus one: odd, never 0 ("no mark").
        if !self
            .memory_generation
            .load(Ordering::Relaxed)
            .is_multiple_of(2)
        {
            return Err("the memory generation is odd");
        }
        let mark = self.exhausted.load(Ordering::Relaxed);
        if mark != 0 && mark.is_multiple_of(2) {
            return Err("the exhausted mark is even and not 0");
        }
        for (index, slab) in self.published() {
            // Slab memory is read only at addresses inside the region.
            let Some(granule) = self.granule_of(slab) else {
                return Err("a published slab lies outside the region");
            };
            let header = read_header(mem, slab).ok_or("a slab's header cannot be read")?;
            if header.slot != index {
                return Err("a slab's header names another slot");
            }
            if self.granules.get(granule) != (Granule::Slab { slot: index }) {
                return Err("a published slab's granule entry is not Slab(its slot)");
            }
            let Some(geo) = header_geometry(&header) else {
                return Err("a published slab has no valid class");
            };
            let (mut set, mut phantom) = (0u64, false);
            for_each_word(mem, slab, geo.words, |i, w| {
                set += u64::from(w.count_ones());
                phantom |= w & !valid_bits(i, geo.usable) != 0;
            })?;
            let seen = self.slot(index).look();
            let Some(class) = seen.class() else {
                return Err("a published slab's counter is dead");
            };
            if class as usize != class_index(geo.block) {
                return Err("a slot's counter names another class than its slab's header");
            }
            // Quiescent: every reference is a live block's reservation (no
            // lock in flight), so the count is the set bits exactly — a
            // reference a path forgot to give back shows here, not only in
            // the loom models.
            if u64::from(seen.count()) < set {
                return Err("a slab's reference count is below its set bits");
            }
            if u64::from(seen.count()) > set {
                return Err("a slab's reference count is above its set bits (a reference leaked)");
            }
            if seen.count() == 0 && !self.empties.is_marked(index) {
                return Err("an empty published slab is not marked empty");
            }
            if phantom {
                return Err("a slab has bits set beyond its usable blocks");
            }
        }
        for granule in 0..(self.region().1 >> SLAB_SHIFT) as u32 {
            if let Granule::Slab { slot } = self.granules.get(granule)
                && self.slot(slot).peek() != Some(self.granule_addr(granule))
            {
                return Err("a granule entry names a slot that does not publish its slab");
            }
        }
        if self
            .slots
            .iter(self.slot_count() as usize)
            .any(|g| g.raw_ptr() == crate::guard::SENTINEL)
        {
            return Err("a slot is left being created");
        }
        if self.empties.count() != self.empties.marked() {
            return Err("the empty-slot count is not the number of marked slots");
        }
        Ok(())
    }

    /// What is live in a quiescent heap, reading slabs through `mem`.
    pub fn census(&self, mem: &dyn SlabMemory) -> Result<Census, &'static str> {
        let mut c = Census {
            pool_slabs: self.pool_len() as u64,
            ..Census::default()
        };
        for (class, k) in self.class_census(mem)?.iter().enumerate() {
            c.empty_slabs += u64::from(k.empty_slabs);
            c.live_slabs += u64::from(k.slabs - k.empty_slabs);
            c.live_blocks += k.live_blocks;
            c.live_block_bytes +=
                k.live_blocks * u64::from(crate::size_class::geometry(class).block);
        }
        // The table is the device's, which a stray kernel write may have
        // filled: a block must end inside the region (a sum of impossible
        // sizes overflowed; a review, 2026-12-08).
        let (base, len) = self.region();
        let mut past_the_end = false;
        self.for_each_large(|addr, bytes| {
            c.large_blocks += 1;
            c.large_bytes = c.large_bytes.saturating_add(bytes);
            past_the_end |= addr.saturating_add(bytes) > base.saturating_add(len);
        });
        if past_the_end {
            return Err("a large block's granules pass the region's end");
        }
        Ok(c)
    }

    /// What each size class holds in a quiescent heap (indexed by class),
    /// reading slabs through `mem`: the class is the slab header's.
    pub fn class_census(
        &self,
        mem: &dyn SlabMemory,
    ) -> Result<[ClassCensus; CLASS_COUNT], &'static str> {
        let mut classes = [ClassCensus::default(); CLASS_COUNT];
        for (_, slab) in self.published() {
            if self.granule_of(slab).is_none() {
                return Err("a published slab lies outside the region");
            }
            let header = read_header(mem, slab).ok_or("a slab's header cannot be read")?;
            let geo = header_geometry(&header).ok_or("a published slab has no valid class")?;
            let mut set = 0u64;
            for_each_word(mem, slab, geo.words, |_, w| {
                set += u64::from(w.count_ones())
            })?;
            let k = &mut classes[class_index(geo.block)];
            k.slabs += 1;
            k.empty_slabs += u32::from(set == 0);
            k.live_blocks += set;
        }
        Ok(classes)
    }

    /// Calls `f(address, bytes)` for each large block allocated, in
    /// address order.
    pub fn for_each_large(&self, mut f: impl FnMut(u64, u64)) {
        for granule in 0..(self.region().1 >> SLAB_SHIFT) as u32 {
            if let Granule::Large { granules } = self.granules.get(granule) {
                f(
                    self.granule_addr(granule),
                    u64::from(granules) << SLAB_SHIFT,
                );
            }
        }
    }
}
