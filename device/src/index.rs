//! Index arithmetic without division: the device's hot paths reduce and wrap
//! indices with a multiply-high or one conditional subtraction, because a
//! division or remainder compiles to a long instruction sequence (a 64-bit
//! one to a call) whose registers count against every kernel that
//! allocates.

/// `x` mapped onto `0..n` by a multiply-high (0 when `n == 0`): for a
/// well-mixed `x`, as uniform as `x % n`.
#[inline(always)]
pub fn reduce(x: u32, n: u32) -> u32 {
    ((u64::from(x) * u64::from(n)) >> 32) as u32
}

/// The bits of 32-bit word `word` (of a bitmap) that lie below `count`:
/// a slab's blocks below its `usable`, the `empties` marks of the slots
/// below the table's count. The last word may be partial.
#[inline(always)]
pub fn valid_bits(word: u32, count: u32) -> u32 {
    match count.saturating_sub(word * 32) {
        left if left < 32 => (1u32 << left) - 1,
        _ => u32::MAX,
    }
}

/// `base + offset` wrapped into `0..n`, for `base < n` and `offset <= n`:
/// one conditional subtraction.
#[inline(always)]
pub fn wrap(base: u32, offset: u32, n: u32) -> u32 {
    let i = base + offset;
    if i >= n { i - n } else { i }
}

/// `offset / divisor` for `offset < 2^OFFSET_BITS`, by multiplying with
/// [`magic`]`(divisor)`: exact for every divisor in `1..=2^20` (see
/// [`magic`]).
#[inline(always)]
pub fn divide(offset: u32, magic: u64) -> u32 {
    ((u64::from(offset) * magic) >> MAGIC_SHIFT) as u32
}

/// Offsets [`divide`] is exact for: within a 2 MiB slab.
pub const OFFSET_BITS: u32 = 21;
/// The largest divisor [`divide`] is exact for.
pub const MAX_DIVISOR: u32 = 1 << 20;
/// The shift of [`divide`]: `OFFSET_BITS + log2(MAX_DIVISOR) + 1`.
const MAGIC_SHIFT: u32 = 42;

/// The multiplier for dividing by `divisor` (`1..=MAX_DIVISOR`):
/// `m = ceil(2^42 / d)`. Exact for `n < 2^21` because the error
/// `m·d − 2^42 < d ≤ 2^20 < 2^(42−21)` (Granlund and Montgomery's
/// condition), and `n·m < 2^21 · 2^42 = 2^63` fits in 64 bits.
pub const fn magic(divisor: u32) -> u64 {
    assert!(divisor >= 1 && divisor <= MAX_DIVISOR);
    (1u64 << MAGIC_SHIFT).div_ceil(divisor as u64)
}

// Both halves of `magic`'s proof, from the constants (not a written-out
// 20): the error `< MAX_DIVISOR ≤ 2^(MAGIC_SHIFT − OFFSET_BITS − 1)`, and
// `n·m < 2^OFFSET_BITS · 2^MAGIC_SHIFT` fits in 64 bits.
const _: () = assert!(
    (MAX_DIVISOR as u64) < 1u64 << (MAGIC_SHIFT - OFFSET_BITS) && OFFSET_BITS + MAGIC_SHIFT <= 63
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divide_is_exact_for_every_class_and_offset() {
        // Under Miri, the smallest, a middle and the largest class.
        let classes: &[usize] = if cfg!(miri) {
            &[0, 20, crate::size_class::CLASS_COUNT - 1]
        } else {
            &[]
        };
        let all = 0..crate::size_class::CLASS_COUNT;
        for class in all.filter(|c| classes.is_empty() || classes.contains(c)) {
            let geo = crate::size_class::geometry(class);
            let (d, m) = (geo.block, geo.magic);
            assert_eq!(m, magic(d));
            // Every quotient boundary and its neighbours, over the slab.
            let mut q = 0u32;
            while u64::from(q) * u64::from(d) < 1 << OFFSET_BITS {
                let n = q * d;
                for x in [n.saturating_sub(1), n, n + 1, n + d - 1] {
                    if x < 1 << OFFSET_BITS {
                        assert_eq!(divide(x, m), x / d, "{x} / {d}");
                    }
                }
                q += if cfg!(miri) { 97 } else { 1 };
            }
        }
    }

    #[test]
    fn divide_is_exact_for_small_divisors_everywhere() {
        for d in [1, 3, 7, 48, 80, 1 << 20] {
            let m = magic(d);
            for x in (0..1u32 << OFFSET_BITS).step_by(if cfg!(miri) { 4099 } else { 1 }) {
                assert_eq!(divide(x, m), x / d, "{x} / {d}");
            }
        }
    }

    #[test]
    fn wrap_and_reduce_stay_in_range() {
        for n in 1..if cfg!(miri) { 12 } else { 200u32 } {
            for base in 0..n {
                for offset in 0..=n {
                    assert_eq!(wrap(base, offset, n), (base + offset) % n);
                }
            }
            for x in [0, 1, u32::MAX / 3, u32::MAX] {
                assert!(reduce(x, n) < n);
            }
        }
    }
}
