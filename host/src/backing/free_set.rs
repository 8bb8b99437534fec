//! The region's free granules (mapped, in no run), and the stretches they
//! make, indexed by length: where a run goes best-fit without walking
//! every free granule on each request.
//!
//! ```text
//!   granules  0 1 2 3 4 5 6 7 8 9
//!   free        ■ ■ ■     ■   ■ ■
//!   stretches   [1,4)     [6,7) [8,10)
//!   by_len      (1,6) (2,8) (3,1)      ordered by (length, start)
//!   len_at      1→3  6→1  8→2          ordered by start
//! ```
//!
//! Invariants: `granules` is the set of free granules; the stretches are
//! its maximal runs of consecutive granules, each once in `len_at`
//! (start → length) and once in `by_len` ((length, start)); two
//! stretches never touch (`start + len < next start`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeBounds;

/// Free granules and their stretches.
#[derive(Debug, Default)]
pub(super) struct FreeSet {
    granules: BTreeSet<usize>,
    len_at: BTreeMap<usize, usize>,
    by_len: BTreeSet<(usize, usize)>,
}

impl FreeSet {
    /// Free granules.
    pub(super) fn len(&self) -> usize {
        self.granules.len()
    }

    /// The free granules, in order.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &usize> {
        self.granules.iter()
    }

    /// The free granules in `range`, in order.
    pub(super) fn range(
        &self,
        range: impl RangeBounds<usize>,
    ) -> impl DoubleEndedIterator<Item = &usize> {
        self.granules.range(range)
    }

    /// Makes `g` free (nothing if it was).
    pub(super) fn insert(&mut self, g: usize) {
        if !self.granules.insert(g) {
            return;
        }
        let (mut start, mut len) = (g, 1);
        // The stretch that ends at `g`, and the one that starts after it.
        if let Some((&s, &l)) = self.len_at.range(..g).next_back()
            && s + l == g
        {
            self.take(s, l);
            (start, len) = (s, l + 1);
        }
        if let Some(&l) = self.len_at.get(&(g + 1)) {
            self.take(g + 1, l);
            len += l;
        }
        self.put(start, len);
    }

    /// Makes `g` not free (nothing if it was not).
    pub(super) fn remove(&mut self, g: usize) {
        if !self.granules.remove(&g) {
            return;
        }
        let (&s, &l) = self
            .len_at
            .range(..=g)
            .next_back()
            .expect("a free granule lies in a stretch");
        self.take(s, l);
        if g > s {
            self.put(s, g - s);
        }
        if s + l > g + 1 {
            self.put(g + 1, s + l - g - 1);
        }
    }

    /// Where a run of `n` granules at an aligned start (`first`, then
    /// every `step`) goes in the shortest stretch that holds one (the
    /// lowest of the shortest): the run's start, or `None`. O(log) and the
    /// stretches too short once aligned.
    pub(super) fn best_fit(&self, n: usize, first: usize, step: usize) -> Option<usize> {
        self.by_len
            .range((n, 0)..)
            .map(|&(len, start)| (aligned_from(first, step, start), start + len))
            .find(|&(at, end)| at + n <= end)
            .map(|(at, _)| at)
    }

    fn put(&mut self, start: usize, len: usize) {
        self.len_at.insert(start, len);
        self.by_len.insert((len, start));
    }

    fn take(&mut self, start: usize, len: usize) {
        self.len_at.remove(&start);
        self.by_len.remove(&(len, start));
    }

    /// Checks the invariants (debug builds and tests).
    #[cfg(any(test, debug_assertions))]
    pub(super) fn check(&self) {
        let mut rebuilt = FreeSet::default();
        let mut at = self.granules.iter().copied().peekable();
        while let Some(start) = at.next() {
            let mut end = start + 1;
            while at.next_if_eq(&end).is_some() {
                end += 1;
            }
            rebuilt.put(start, end - start);
        }
        assert_eq!(self.len_at, rebuilt.len_at, "stretches by start");
        assert_eq!(self.by_len, rebuilt.by_len, "stretches by length");
    }
}

/// The first granule at or after `from` that starts a run aligned to
/// `step` granules (`first`: the first aligned granule).
pub(super) fn aligned_from(first: usize, step: usize, from: usize) -> usize {
    first + from.saturating_sub(first).div_ceil(step) * step
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stretches merge and split as granules come and go, and the best
    /// fit is the shortest stretch that holds the aligned run, the lowest
    /// of those: against a walk over every stretch, for seeded random
    /// sequences.
    #[test]
    fn stretches_follow_the_free_granules_and_fit_best() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut draw = |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        for _ in 0..200 {
            let mut set = FreeSet::default();
            for _ in 0..200 {
                let g = draw(48);
                if draw(3) == 0 {
                    set.remove(g);
                } else {
                    set.insert(g);
                }
                set.check();
                let (n, step) = (1 + draw(6), 1 << draw(3));
                let first = draw(step);
                assert_eq!(
                    set.best_fit(n, first, step),
                    by_every_stretch(&set, n, first, step),
                    "{n} from {first} by {step} in {:?}",
                    set.granules
                );
            }
        }
    }

    /// The best fit as the region found it before the index: a walk over
    /// every stretch in order, the shortest that holds the run.
    fn by_every_stretch(set: &FreeSet, n: usize, first: usize, step: usize) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        let mut free = set.granules.iter().copied().peekable();
        while let Some(start) = free.next() {
            let mut end = start + 1;
            while free.next_if_eq(&end).is_some() {
                end += 1;
            }
            let at = aligned_from(first, step, start);
            if at + n <= end && best.is_none_or(|(_, len)| end - start < len) {
                best = Some((at, end - start));
            }
        }
        best.map(|(at, _)| at)
    }
}
