//! Size classes and slab geometry: pure arithmetic, shared by every path.
//!
//! A request of `n` bytes (`n < LARGE_THRESHOLD`) is served from a chunk of
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
//!   words     = ceil((SLAB_SIZE / chunk) / 32)        bitfield words
//!   data      = align_up(HEADER + 4·words, data_align)  first chunk's offset
//!   data_align = min(largest power of two dividing chunk, 4 KiB)
//!   usable    = (SLAB_SIZE − data) / chunk              chunks (= usable bits)
//! ```
//!
//! so that a power-of-two class hands out chunks aligned to their size (up to
//! 4 KiB), which `aligned_alloc` relies on.

/// Bytes in a slab; slabs are aligned to their size.
pub const SLAB_SIZE: u64 = 2 << 20;
/// log2 of [`SLAB_SIZE`].
pub const SLAB_SHIFT: u32 = 21;
/// Bytes of the slab header.
pub const HEADER_BYTES: u32 = 16;
/// The smallest chunk.
pub const MIN_CHUNK: u32 = 16;
/// Requests of this size and more bypass slabs.
pub const LARGE_THRESHOLD: u64 = SLAB_SIZE / 2;
/// Chunks of power-of-two classes are aligned to their size up to this.
pub const MAX_DATA_ALIGN: u32 = 4096;
/// Bits per bitfield word.
pub const WORD_BITS: u32 = 32;
/// Number of size classes.
pub const CLASS_COUNT: usize = 46;

const _: () = assert!(SLAB_SIZE == 1 << SLAB_SHIFT);
const _: () = assert!(LARGE_THRESHOLD <= u32::MAX as u64);
const _: () =
    assert!(HEADER_BYTES.is_multiple_of(MIN_CHUNK) || MIN_CHUNK.is_multiple_of(HEADER_BYTES));

/// The chunk size for a request of `bytes` (`0 < bytes < LARGE_THRESHOLD`).
#[inline(always)]
pub const fn chunk_size(bytes: u32) -> u32 {
    let y = if bytes < MIN_CHUNK { MIN_CHUNK } else { bytes };
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

/// The class index (0..CLASS_COUNT) of a chunk size returned by
/// [`chunk_size`].
#[inline(always)]
pub const fn class_index(chunk: u32) -> usize {
    if chunk <= 64 {
        return (chunk / 16 - 1) as usize;
    }
    // chunk in (2^(p-1), 2^p], p >= 7: classes 6, 7 and 8 << (p - 3).
    let p = WORD_BITS - (chunk - 1).leading_zeros();
    let top = chunk >> (p - 3); // 6, 7 or 8
    4 + 3 * (p as usize - 7) + (top as usize - 6)
}

/// The chunk size of class `index`.
#[inline(always)]
pub const fn class_chunk(index: usize) -> u32 {
    geometry(index).chunk
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
    /// Chunk bytes.
    pub chunk: u32,
    /// Bitfield words.
    pub words: u32,
    /// Offset of the first chunk from the slab's start.
    pub data: u32,
    /// Chunks (and meaningful bits) per slab.
    pub usable: u32,
}

impl Geometry {
    /// The geometry of slabs of `chunk`-byte chunks.
    pub const fn of(chunk: u32) -> Geometry {
        let chunks = (SLAB_SIZE / chunk as u64) as u32;
        let words = chunks.div_ceil(WORD_BITS);
        let pow2 = 1u32 << chunk.trailing_zeros();
        let align = if pow2 < MAX_DATA_ALIGN {
            pow2
        } else {
            MAX_DATA_ALIGN
        };
        let data = (HEADER_BYTES + 4 * words).next_multiple_of(align);
        let usable = ((SLAB_SIZE - data as u64) / chunk as u64) as u32;
        Geometry {
            chunk,
            words,
            data,
            usable,
        }
    }

    /// The class's alignment guarantee for chunk addresses.
    pub const fn chunk_align(&self) -> u32 {
        let pow2 = 1u32 << self.chunk.trailing_zeros();
        if pow2 < MAX_DATA_ALIGN {
            pow2
        } else {
            MAX_DATA_ALIGN
        }
    }
}

/// The geometry of every class, by index.
pub const CLASSES: [Geometry; CLASS_COUNT] = {
    let mut out = [Geometry {
        chunk: 0,
        words: 0,
        data: 0,
        usable: 0,
    }; CLASS_COUNT];
    let mut n = 0;
    let mut bytes = 1u32;
    while bytes < LARGE_THRESHOLD as u32 + 1 {
        let chunk = chunk_size(bytes);
        if n == 0 || out[n - 1].chunk != chunk {
            out[n] = Geometry::of(chunk);
            n += 1;
        }
        bytes = chunk + 1;
    }
    assert!(n == CLASS_COUNT, "CLASS_COUNT must match the class rule");
    out
};

// Every class: its chunks fit after the header and bitfield, the bitfield
// covers them, chunks are 16-byte aligned, and `class_index` inverts
// `class_chunk`.
const _: () = {
    let mut i = 0;
    while i < CLASS_COUNT {
        let g = CLASSES[i];
        assert!(g.usable >= 1);
        assert!(g.usable <= g.words * WORD_BITS);
        assert!(g.data >= HEADER_BYTES + 4 * g.words);
        assert!(g.data as u64 + g.usable as u64 * g.chunk as u64 <= SLAB_SIZE);
        assert!(g.data.is_multiple_of(MIN_CHUNK) && g.chunk.is_multiple_of(MIN_CHUNK));
        assert!(class_index(g.chunk) == i);
        assert!(i == 0 || CLASSES[i - 1].chunk < g.chunk);
        i += 1;
    }
    assert!(CLASSES[0].chunk == MIN_CHUNK);
    assert!(CLASSES[CLASS_COUNT - 1].chunk as u64 == LARGE_THRESHOLD);
};

/// What a request of `bytes` with alignment `align` is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A chunk of class `class`; the pointer is the chunk's start rounded up
    /// to `align` (which is the chunk's start when `align` ≤ the class's
    /// chunk alignment).
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
        let mut chunk = chunk_size(want as u32);
        if (1u64 << chunk.trailing_zeros()) < align {
            chunk = want.next_power_of_two() as u32;
        }
        if (chunk as u64) <= LARGE_THRESHOLD {
            return Placement::Slab {
                class: class_index(chunk),
            };
        }
    } else if align < LARGE_THRESHOLD {
        // Chunks are at most 4 KiB aligned: over-allocate and round the
        // pointer up inside the chunk, by at most `align - chunk_align`.
        let guess = bytes + (align - MAX_DATA_ALIGN as u64);
        if guess < LARGE_THRESHOLD {
            let mut class = class_index(chunk_size(guess as u32));
            while class < CLASS_COUNT {
                let g = CLASSES[class];
                if g.chunk as u64 >= bytes + (align - g.chunk_align() as u64) {
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
        assert_eq!(CLASSES[0].chunk, 16);
        assert_eq!(CLASSES[45].chunk, 1 << 20);
        let first: Vec<u32> = CLASSES[..10].iter().map(|g| g.chunk).collect();
        assert_eq!(first, [16, 32, 48, 64, 96, 112, 128, 192, 224, 256]);
    }

    proptest! {
        #[test]
        fn a_class_fits_its_request_with_bounded_waste(bytes in 1u32..(1 << 20)) {
            let chunk = chunk_size(bytes);
            prop_assert!(chunk >= bytes);
            prop_assert!(chunk.is_multiple_of(16));
            let class = class_index(chunk);
            prop_assert_eq!(class_chunk(class), chunk);
            // The previous class is too small: the class is the tightest.
            if class > 0 {
                prop_assert!(class_chunk(class - 1) < bytes.max(16));
            }
            // At most a third of the chunk wasted above 64 bytes.
            if bytes > 64 {
                prop_assert!(u64::from(chunk) * 2 <= u64::from(bytes) * 3);
            }
        }

        #[test]
        fn placement_honours_alignment(bytes in 1u64..(3 << 20), shift in 0u32..24) {
            let align = 1u64 << shift;
            match place(bytes, align) {
                Placement::Slab { class } => {
                    let g = CLASSES[class];
                    // A chunk holds the request at any offset the pointer
                    // can be rounded to.
                    let slack = align.saturating_sub(u64::from(g.chunk_align()));
                    prop_assert!(u64::from(g.chunk) >= bytes + slack);
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
        fn geometry_chunks_fit_and_bits_cover_them(class in 0usize..CLASS_COUNT) {
            let g = CLASSES[class];
            prop_assert_eq!(g, Geometry::of(g.chunk));
            prop_assert!(g.usable * WORD_BITS >= g.usable);
            prop_assert!(g.usable <= g.words * WORD_BITS);
            prop_assert!(u64::from(g.data) + u64::from(g.usable) * u64::from(g.chunk) <= SLAB_SIZE);
            prop_assert!(u64::from(g.data) + u64::from(g.usable + 1) * u64::from(g.chunk) > SLAB_SIZE,
                "a whole chunk more would fit");
            prop_assert!(g.data.is_multiple_of(g.chunk_align()));
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
