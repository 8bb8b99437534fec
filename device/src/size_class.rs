//! Size classes and slab geometry: pure arithmetic, shared by every path.
//!
//! A request of `n` bytes (`n < LARGE_THRESHOLD`) is served from a block of
//! its *class*: at least 16 bytes, a multiple of 16, and of the form
//! `{4, 6, 7, 8} << k` — the sums of the three highest powers of two of an
//! octave. That is 46 classes from 16 B to 1 MiB, three per octave above 64 B,
//! with at most 1/3 internal waste on the first class of an octave and 1/7 on
//! the others. Requests of `LARGE_THRESHOLD` (half a slab) and more go to the
//! system provider, rounded up to whole slabs.
//!
//! Each class has one slab geometry (see `slab` for the layout):
//!
//! ```text
//!   words     = ceil((SLAB_SIZE / block) / 32)        bitfield words
//!   data      = align_up(HEADER + 4·words, data_align)  first block's offset
//!   data_align = min(largest power of two dividing block, 4 KiB)
//!   usable    = (SLAB_SIZE − data) / block              blocks (= usable bits)
//! ```
//!
//! so that a power-of-two class hands out blocks aligned to their size (up to
//! 4 KiB), which `aligned_alloc` relies on.

/// Bytes in a slab; slabs are aligned to their size.
pub const SLAB_SIZE: u64 = 2 << 20;
/// log2 of [`SLAB_SIZE`].
pub const SLAB_SHIFT: u32 = 21;
/// Bytes of the slab header.
pub const HEADER_BYTES: u32 = 16;
/// The smallest block.
pub const MIN_BLOCK: u32 = 16;
/// Requests of this size and more bypass slabs.
pub const LARGE_THRESHOLD: u64 = SLAB_SIZE / 2;
/// Blocks of power-of-two classes are aligned to their size up to this.
pub const MAX_DATA_ALIGN: u32 = 4096;
/// Bits per bitfield word.
pub const WORD_BITS: u32 = 32;
/// Number of size classes.
pub const CLASS_COUNT: usize = 46;

const _: () = assert!(SLAB_SIZE == 1 << SLAB_SHIFT);
const _: () = assert!(LARGE_THRESHOLD <= u32::MAX as u64);
const _: () =
    assert!(HEADER_BYTES.is_multiple_of(MIN_BLOCK) || MIN_BLOCK.is_multiple_of(HEADER_BYTES));

/// The block size for a request of `bytes` (`0 < bytes < LARGE_THRESHOLD`).
#[inline(always)]
pub const fn block_size(bytes: u32) -> u32 {
    let y = if bytes < MIN_BLOCK { MIN_BLOCK } else { bytes };
    // y in (2^(p-1), 2^p]
    let p = WORD_BITS - (y - 1).leading_zeros();
    let step = 1u32 << (p - 3);
    let candidates = [4 * step, 6 * step, 7 * step, 8 * step];
    let mut i = 0;
    while i < 3 && candidates[i] < y {
        i += 1;
    }
    (candidates[i] + 15) & !15
}

/// The class index (0..CLASS_COUNT) of a block size returned by
/// [`block_size`].
#[inline(always)]
pub const fn class_index(block: u32) -> usize {
    if block <= 64 {
        return (block / 16 - 1) as usize;
    }
    // block in (2^(p-1), 2^p], p >= 7: classes 6, 7 and 8 << (p - 3).
    let p = WORD_BITS - (block - 1).leading_zeros();
    // 6, 7 or 8 for a class's block; 4 or 5 for other sizes (a corrupt
    // header's, `Header::geometry`), which then name another class, with
    // no underflow (the sum before the subtraction: a debug build's
    // overflow check panicked on 80, a review, 2026-12-07).
    let top = block >> (p - 3);
    4 + 3 * (p as usize - 7) + top as usize - 6
}

/// The block size of class `index`.
#[inline(always)]
pub const fn class_block(index: usize) -> u32 {
    geometry(index).block
}

/// The geometry of class `index` (the largest class for an index out of
/// range: never a panic on the device).
#[inline(always)]
pub const fn geometry(index: usize) -> Geometry {
    CLASSES[if index < CLASS_COUNT {
        index
    } else {
        CLASS_COUNT - 1
    }]
}

/// The geometry of one class's slabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Block bytes.
    pub block: u32,
    /// Bitfield words.
    pub words: u32,
    /// Offset of the first block from the slab's start.
    pub data: u32,
    /// Blocks (and meaningful bits) per slab.
    pub usable: u32,
    /// `index::magic(block)`: a block's index from its offset by a
    /// multiplication (`index::divide`).
    pub magic: u64,
    /// The largest alignment above [`MAX_DATA_ALIGN`] that `aligned_alloc`
    /// rounds a pointer up to inside this class's blocks ([`place`]), or 0
    /// for none: the most a pointer into a block's middle may be rounded
    /// by and still be one `free` accepts (`Slab::freeable_index_of`).
    /// 0 for every class of 4 KiB or less, and for 6 KiB, 7 KiB and 14
    /// KiB (a smaller class serves every such request first); 512 KiB for
    /// the 1 MiB class.
    pub round: u32,
}

impl Geometry {
    /// The geometry of slabs of `block`-byte blocks.
    pub const fn of(block: u32) -> Geometry {
        let blocks = (SLAB_SIZE / block as u64) as u32;
        let words = blocks.div_ceil(WORD_BITS);
        let pow2 = 1u32 << block.trailing_zeros();
        let align = if pow2 < MAX_DATA_ALIGN {
            pow2
        } else {
            MAX_DATA_ALIGN
        };
        let data = (HEADER_BYTES + 4 * words).next_multiple_of(align);
        let usable = ((SLAB_SIZE - data as u64) / block as u64) as u32;
        Geometry {
            block,
            words,
            data,
            usable,
            magic: crate::index::magic(block),
            round: 0,
        }
    }

    /// The class's alignment guarantee for block addresses.
    pub const fn block_align(&self) -> u32 {
        let pow2 = 1u32 << self.block.trailing_zeros();
        if pow2 < MAX_DATA_ALIGN {
            pow2
        } else {
            MAX_DATA_ALIGN
        }
    }
}

/// The geometry of every class, by index, but for `round` (0): what
/// [`place`] chooses from.
const SHAPES: [Geometry; CLASS_COUNT] = {
    let mut out = [Geometry {
        block: 0,
        words: 0,
        data: 0,
        usable: 0,
        magic: 0,
        round: 0,
    }; CLASS_COUNT];
    let mut n = 0;
    let mut bytes = 1u32;
    while bytes < LARGE_THRESHOLD as u32 + 1 {
        let block = block_size(bytes);
        if n == 0 || out[n - 1].block != block {
            out[n] = Geometry::of(block);
            n += 1;
        }
        bytes = block + 1;
    }
    assert!(n == CLASS_COUNT, "CLASS_COUNT must match the class rule");
    out
};

/// The geometry of every class, by index.
///
/// `round`, from [`place`] itself: a class is rounded to alignment `a`
/// (above 4 KiB) for some request iff it is for the largest request it
/// can hold so that `place` puts in a slab: `block + block_align − a`
/// bytes, and less than `LARGE_THRESHOLD − (a − 4 KiB)` (a smaller request
/// fits a smaller class at least as well, and `place` takes the first that
/// fits).
pub const CLASSES: [Geometry; CLASS_COUNT] = {
    let mut out = SHAPES;
    let mut i = 0;
    while i < CLASS_COUNT {
        let most = SHAPES[i].block + SHAPES[i].block_align();
        let mut align = 2 * MAX_DATA_ALIGN;
        while (align as u64) < LARGE_THRESHOLD {
            let slab_most = LARGE_THRESHOLD as u32 - (align - MAX_DATA_ALIGN) - 1;
            let bytes = most.saturating_sub(align);
            let bytes = if bytes < slab_most { bytes } else { slab_most };
            if bytes > 0
                && let Placement::Slab { class } = place(bytes as u64, align as u64)
                && class == i
            {
                out[i].round = align;
            }
            align *= 2;
        }
        i += 1;
    }
    out
};

// Every class: its blocks fit after the header and bitfield, the bitfield
// covers them, blocks are 16-byte aligned, and `class_index` inverts
// `class_block`.
const _: () = {
    let mut i = 0;
    while i < CLASS_COUNT {
        let g = CLASSES[i];
        assert!(g.usable >= 1);
        assert!(g.usable <= g.words * WORD_BITS);
        assert!(g.data >= HEADER_BYTES + 4 * g.words);
        assert!(g.data as u64 + g.usable as u64 * g.block as u64 <= SLAB_SIZE);
        assert!(g.data.is_multiple_of(MIN_BLOCK) && g.block.is_multiple_of(MIN_BLOCK));
        assert!(class_index(g.block) == i);
        assert!(i == 0 || CLASSES[i - 1].block < g.block);
        i += 1;
    }
    assert!(CLASSES[0].block == MIN_BLOCK);
    assert!(CLASSES[CLASS_COUNT - 1].block as u64 == LARGE_THRESHOLD);
};

/// What a request of `bytes` with alignment `align` is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A block of class `class`; the pointer is the block's start rounded up
    /// to `align` (which is the block's start when `align` ≤ the class's
    /// block alignment).
    Slab {
        /// Class index.
        class: usize,
    },
    /// Whole slabs from the system provider: `bytes` rounded up to
    /// [`SLAB_SIZE`], aligned to `align.max(SLAB_SIZE)`.
    Large {
        /// Bytes to ask for (a multiple of [`SLAB_SIZE`]).
        bytes: u64,
        /// Alignment to ask for (a power of two ≥ [`SLAB_SIZE`]).
        align: u64,
    },
    /// Nothing can serve it: zero bytes, a non-power-of-two alignment, or a
    /// size that overflows when rounded.
    Invalid,
}

/// Where a request of `bytes` aligned to `align` goes.
#[inline(always)]
pub const fn place(bytes: u64, align: u64) -> Placement {
    if bytes == 0 || align == 0 || !align.is_power_of_two() {
        return Placement::Invalid;
    }
    if bytes >= LARGE_THRESHOLD {
        // Whole slabs below.
    } else if align <= MAX_DATA_ALIGN as u64 {
        // A power-of-two class at least `align` is aligned to `align`.
        let want = if bytes < align { align } else { bytes };
        let mut block = block_size(want as u32);
        if (1u64 << block.trailing_zeros()) < align {
            block = want.next_power_of_two() as u32;
        }
        if (block as u64) <= LARGE_THRESHOLD {
            return Placement::Slab {
                class: class_index(block),
            };
        }
    } else if align < LARGE_THRESHOLD {
        // Blocks are at most 4 KiB aligned: over-allocate and round the
        // pointer up inside the block, by at most `align - block_align`.
        let guess = bytes + (align - MAX_DATA_ALIGN as u64);
        if guess < LARGE_THRESHOLD {
            let mut class = class_index(block_size(guess as u32));
            while class < CLASS_COUNT {
                let g = SHAPES[class];
                if g.block as u64 >= bytes + (align - g.block_align() as u64) {
                    return Placement::Slab { class };
                }
                class += 1;
            }
        }
    }
    let Some(rounded) = bytes.checked_next_multiple_of(SLAB_SIZE) else {
        return Placement::Invalid;
    };
    Placement::Large {
        bytes: rounded,
        align: if align > SLAB_SIZE { align } else { SLAB_SIZE },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    #[test]
    fn there_are_46_classes_from_16_bytes_to_1_mib() {
        assert_eq!(CLASSES.len(), 46);
        assert_eq!(CLASSES[0].block, 16);
        assert_eq!(CLASSES[45].block, 1 << 20);
        let first: Vec<u32> = CLASSES[..10].iter().map(|g| g.block).collect();
        assert_eq!(first, [16, 32, 48, 64, 96, 112, 128, 192, 224, 256]);
    }

    /// `round` is the largest alignment above 4 KiB that `place` rounds a
    /// pointer up to in the class, over every request (in steps of 16
    /// bytes, and each class's largest at each alignment).
    #[test]
    #[cfg_attr(miri, ignore = "half a million placements: minutes under Miri")]
    fn round_is_the_most_place_rounds_up_in_each_class() {
        let mut most = [0u32; CLASS_COUNT];
        let mut align = 2 * MAX_DATA_ALIGN as u64;
        while align < LARGE_THRESHOLD {
            let sizes = (1..LARGE_THRESHOLD)
                .step_by(16)
                .chain(CLASSES.iter().map(|g| u64::from(g.block + g.block_align())));
            for bytes in sizes.filter(|&b| b >= 1) {
                if let Placement::Slab { class } = place(bytes.saturating_sub(align).max(1), align)
                {
                    most[class] = most[class].max(align as u32);
                }
                if let Placement::Slab { class } = place(bytes, align) {
                    most[class] = most[class].max(align as u32);
                }
            }
            align *= 2;
        }
        let blocks: Vec<u32> = CLASSES.iter().map(|g| g.block).collect();
        let got: Vec<u32> = CLASSES.iter().map(|g| g.round).collect();
        assert_eq!(got, most, "blocks {blocks:?}");
        for block in [6144, 7168, 14336, 4096, 48] {
            assert_eq!(CLASSES[class_index(block)].round, 0, "{block}");
        }
        assert_eq!(CLASSES[class_index(8192)].round, 8192);
        assert_eq!(CLASSES[class_index(12288)].round, 8192);
        assert_eq!(CLASSES[CLASS_COUNT - 1].round, 512 << 10);
    }

    proptest! {
        #[test]
        fn a_class_fits_its_request_with_bounded_waste(bytes in 1u32..(1 << 20)) {
            let block = block_size(bytes);
            prop_assert!(block >= bytes);
            prop_assert!(block.is_multiple_of(16));
            let class = class_index(block);
            prop_assert_eq!(class_block(class), block);
            // The previous class is too small: the class is the tightest.
            if class > 0 {
                prop_assert!(class_block(class - 1) < bytes.max(16));
            }
            // At most a third of the block wasted above 64 bytes.
            if bytes > 64 {
                prop_assert!(u64::from(block) * 2 <= u64::from(bytes) * 3);
            }
        }

        #[test]
        fn placement_honours_alignment(bytes in 1u64..(3 << 20), shift in 0u32..24) {
            let align = 1u64 << shift;
            match place(bytes, align) {
                Placement::Slab { class } => {
                    let g = CLASSES[class];
                    // A block holds the request at any offset the pointer
                    // can be rounded to.
                    let slack = align.saturating_sub(u64::from(g.block_align()));
                    prop_assert!(u64::from(g.block) >= bytes + slack);
                    // A rounding `free` accepts (`Geometry::round`).
                    prop_assert!(align <= u64::from(MAX_DATA_ALIGN) || align <= u64::from(g.round));
                    prop_assert!(bytes < LARGE_THRESHOLD);
                }
                Placement::Large { bytes: b, align: a } => {
                    prop_assert!(b >= bytes && b.is_multiple_of(SLAB_SIZE));
                    prop_assert!(a >= align && a >= SLAB_SIZE && a.is_power_of_two());
                }
                Placement::Invalid => prop_assert!(false, "valid request refused"),
            }
        }

        #[test]
        fn geometry_blocks_fit_and_bits_cover_them(class in 0usize..CLASS_COUNT) {
            let g = CLASSES[class];
            prop_assert_eq!(Geometry { round: 0, ..g }, Geometry::of(g.block));
            prop_assert!(g.usable * WORD_BITS >= g.usable);
            prop_assert!(g.usable <= g.words * WORD_BITS);
            prop_assert!(u64::from(g.data) + u64::from(g.usable) * u64::from(g.block) <= SLAB_SIZE);
            prop_assert!(u64::from(g.data) + u64::from(g.usable + 1) * u64::from(g.block) > SLAB_SIZE,
                "a whole block more would fit");
            prop_assert!(g.data.is_multiple_of(g.block_align()));
        }
    }

    #[test]
    fn bad_requests_are_invalid() {
        assert_eq!(place(0, 16), Placement::Invalid);
        assert_eq!(place(16, 3), Placement::Invalid);
        assert_eq!(place(16, 0), Placement::Invalid);
        assert_eq!(place(u64::MAX, 16), Placement::Invalid);
        assert_eq!(place(u64::MAX - SLAB_SIZE + 2, 16), Placement::Invalid);
    }
}
