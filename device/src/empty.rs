//! Empty slabs: the slots whose slab a `free` took to zero references.
//!
//! An emptied slab stays published in its slot: the next malloc of its
//! class takes it as it is (a claim of its class finds it here, `find`),
//! and once the provider refuses, a claim of a new slab for any class takes
//! it over (`Guard::reclaim`). `free` only records the slot here — one
//! `fetch_or`, no disposal on the free path — so that a claim finds an
//! empty slab without scanning the slot table.
//!
//! ```text
//!   count      about how many bits are set (0: nothing to look for)
//!   hint       the word of the last mark: takes start there
//!   words[]    bit s % 32 of word s / 32: slot s's slab went empty
//!
//!   free (release → 0):  fetch_or(bit) ─ newly set? ─► count += 1
//!   claim:  count > 0 ─► from the hint, the first set bit ─► fetch_and: won?
//!           ─► count -= 1 ─► Guard::reclaim(0): the slab is ours if still empty
//! ```
//!
//! A bit is a hint, not ownership: the slab may have been taken again by its
//! class since (the reclaim's compare-and-swap of a zero count then fails,
//! and the taker moves on), and a slab may go empty again while its bit is
//! still set (one bit for both). Invariants: a bit is set by the one
//! `fetch_or` that found it clear and cleared by the one `fetch_and` that
//! found it set; `count` is incremented after the first and decremented
//! after the second, so when no one is between those steps, `count` equals
//! the set bits (checked by `DeviceHeap::check`).

use crate::guard::{
    MARK_WITHOUT_RELEASE, TAKE_CLEARS_BY_STORE, TAKE_MARK_WITHOUT_ACQUIRE, planted,
};
use crate::index::{valid_bits, wrap};
use crate::simt::Scope;
use crate::sync::{AtomicU32, Ordering, SharedArray, fence};

/// Slots whose slab went empty, as a bitmap over `WORDS · 32` slots
/// (`repr(C)`: the count, the hint, then the words).
#[repr(C)]
#[derive(Debug)]
pub struct EmptySlots<const WORDS: usize> {
    count: AtomicU32,
    hint: AtomicU32,
    words: SharedArray<AtomicU32, WORDS>,
}

impl<const WORDS: usize> EmptySlots<WORDS> {
    /// No slot marked.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        EmptySlots {
            count: AtomicU32::new(0),
            hint: AtomicU32::new(0),
            words: SharedArray::new([const { AtomicU32::new(0) }; WORDS]),
        }
    }

    /// No slot marked.
    #[cfg(loom)]
    pub fn new() -> Self {
        EmptySlots {
            count: AtomicU32::new(0),
            hint: AtomicU32::new(0),
            words: SharedArray::new(core::array::from_fn(|_| AtomicU32::new(0))),
        }
    }

    /// Records that slot `slot`'s slab went empty (its releaser calls this,
    /// after the release that took the count to zero). The guard's count,
    /// not this bit, decides who owns the slab.
    #[inline(always)]
    pub fn mark(&self, slot: u32) {
        let bit = 1u32 << (slot % 32);
        let word = slot / 32;
        if !planted(MARK_WITHOUT_RELEASE) {
            // ORDERING: release (gpu): the release that took the slab's
            // count to zero happens-before a taker's reclaim of it (pairs
            // with the acquire fence in `take`): a taker that sees this bit
            // must not find an older, non-zero count, fail, and consume
            // the mark.
            fence(Ordering::Release, Scope::Gpu);
        }
        if self.words.get(word as usize).fetch_or(bit) & bit == 0 {
            self.count.add(1);
        }
        self.hint.store(word, Ordering::Relaxed);
    }

    /// The words that hold the marks of the first `slots`; `None` when no
    /// slot is marked (the count's load).
    #[inline(always)]
    fn words_in_use(&self, slots: u32) -> Option<u32> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        Some(slots.div_ceil(32).min(WORDS as u32))
    }

    /// Where a walk of the marks of the first `slots` goes: the words to
    /// look at and the one to start from (the hint's); `None` when no slot
    /// is marked.
    #[inline(always)]
    fn walk(&self, slots: u32) -> Option<(u32, u32)> {
        let words = self.words_in_use(slots)?;
        let hint = self.hint.load(Ordering::Relaxed);
        Some((words, if hint < words { hint } else { 0 }))
    }

    /// Takes a marked slot among the first `slots`, clearing its bit: the
    /// caller then tries to reclaim its slab. `None` when none is marked.
    /// Looks at the hint's word first, then at most every word once.
    pub fn take(&self, slots: u32) -> Option<u32> {
        let (words, start) = self.walk(slots)?;
        for i in 0..words {
            let at = wrap(start, i, words);
            let word = self.words.get(at as usize);
            // Only the first `slots`: the last word in use may hold slots
            // beyond them (a table the host shrank), which no scan visits
            // (`valid_bits`: a 32-bit word's bits below a count, as for a
            // slab's blocks; a review, 2026-12-08).
            let mut seen = word.load(Ordering::Relaxed) & valid_bits(at, slots);
            while seen != 0 {
                let bit = 1u32 << seen.trailing_zeros();
                let before = if planted(TAKE_CLEARS_BY_STORE) {
                    let before = word.load(Ordering::Relaxed);
                    word.store(before & !bit, Ordering::Relaxed);
                    before
                } else {
                    word.fetch_and(!bit)
                };
                if before & bit != 0 {
                    if !planted(TAKE_MARK_WITHOUT_ACQUIRE) {
                        // ORDERING: acquire (gpu): pairs with the release
                        // fence in `mark`: the marker's zero count is
                        // visible to our reclaim.
                        fence(Ordering::Acquire, Scope::Gpu);
                    }
                    self.count.fetch_sub(1);
                    return Some(at * 32 + bit.trailing_zeros());
                }
                seen = before & !bit;
            }
        }
        None
    }

    /// A marked slot among the first `slots` for which `wanted` holds,
    /// its mark left as it is: the words from slot `near`'s on, at most
    /// `words` of them (not past the last: no wrap), and at most `checks`
    /// marked slots asked about.
    /// `None` when none of those it asked about was wanted.
    ///
    /// Bounded in words as well as in marks: each word is a load the
    /// caller waits for, and a walk of the whole bitmap when few slots are
    /// marked (1 024 words for the 32 768 slots) took 263 dependent round
    /// trips a call on average in the contention test's rising demand at
    /// 1 KiB, most of its malloc's (2026-12-05, BENCHMARKS.md "Bounded
    /// marks").
    pub fn find(
        &self,
        slots: u32,
        near: u32,
        words: u32,
        checks: u32,
        wanted: impl Fn(u32) -> bool,
    ) -> Option<u32> {
        let all = self.words_in_use(slots)?;
        let start = if near / 32 < all { near / 32 } else { 0 };
        let mut asked = 0u32;
        for at in start..(start + words).min(all) {
            // Only the first `slots`, as in `take`.
            let mut seen =
                self.words.get(at as usize).load(Ordering::Relaxed) & valid_bits(at, slots);
            while seen != 0 {
                if asked == checks {
                    return None;
                }
                asked += 1;
                let slot = at * 32 + seen.trailing_zeros();
                seen &= seen - 1;
                if wanted(slot) {
                    return Some(slot);
                }
            }
        }
        None
    }

    /// Clears slot `slot`'s mark, if set (host side: a trim gave its slab
    /// back).
    pub fn clear(&self, slot: u32) {
        let bit = 1u32 << (slot % 32);
        if self.words.get((slot / 32) as usize).fetch_and(!bit) & bit != 0 {
            self.count.fetch_sub(1);
        }
    }

    /// Whether slot `slot` is marked.
    pub fn is_marked(&self, slot: u32) -> bool {
        let bit = 1u32 << (slot % 32);
        self.words.get((slot / 32) as usize).load(Ordering::Relaxed) & bit != 0
    }

    /// The count: about the marked slots (exact when no one is marking or
    /// taking).
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// Marked slots, by counting the bits (for checks).
    pub fn marked(&self) -> u32 {
        self.words
            .iter(WORDS)
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum()
    }
}

impl<const WORDS: usize> Default for EmptySlots<WORDS> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn marks_are_taken_once_each_and_counted() {
        let e = EmptySlots::<4>::new();
        assert_eq!(e.take(128), None);
        for s in [5, 77, 77, 127] {
            e.mark(s);
        }
        assert_eq!((e.count(), e.marked()), (3, 3));
        let mut taken = [e.take(128), e.take(128), e.take(128)];
        taken.sort();
        assert_eq!(taken, [Some(5), Some(77), Some(127)]);
        assert_eq!((e.take(128), e.count(), e.marked()), (None, 0, 0));
    }

    #[test]
    fn find_leaves_the_marks_as_they_are() {
        let e = EmptySlots::<4>::new();
        for s in [3, 40, 100] {
            e.mark(s);
        }
        assert_eq!(e.find(128, 0, 4, 8, |s| s == 40), Some(40));
        assert_eq!(e.find(128, 0, 4, 8, |s| s == 40), Some(40));
        assert_eq!(e.find(128, 0, 4, 8, |s| s == 41), None);
        assert!(e.find(128, 0, 4, 1, |s| s == 100 || s == 3).is_some());
        assert_eq!((e.count(), e.marked()), (3, 3));
    }

    #[test]
    fn find_reads_a_bounded_run_of_words_from_its_start() {
        let e = EmptySlots::<4>::new();
        for s in [3, 70] {
            e.mark(s);
        }
        // From slot 64's word: 70 at once; 3 is before it, never read.
        assert_eq!(e.find(128, 64, 1, 8, |_| true), Some(70));
        assert_eq!(e.find(128, 64, 4, 8, |s| s == 3), None);
        assert_eq!(e.find(128, 0, 1, 8, |s| s == 70), None);
        assert_eq!(e.find(128, 0, 3, 8, |s| s == 70), Some(70));
        // A start beyond the slots in use is the first word.
        assert_eq!(e.find(64, 100, 1, 8, |_| true), Some(3));
    }

    #[test]
    fn take_looks_only_at_the_slots_in_use_and_clear_unmarks() {
        let e = EmptySlots::<4>::new();
        e.mark(100);
        assert_eq!(e.take(64), None, "slot 100 is beyond 64 slots");
        // Beyond the slots in a word they share.
        assert_eq!(e.take(97), None, "slot 100 is beyond 97 slots");
        assert_eq!(e.find(97, 96, 1, 8, |_| true), None);
        assert_eq!(e.take(101), Some(100));
        e.mark(100);
        assert!(e.is_marked(100));
        e.clear(100);
        e.clear(100);
        assert_eq!((e.count(), e.marked(), e.is_marked(100)), (0, 0, false));
    }
}
