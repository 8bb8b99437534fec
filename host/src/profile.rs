//! What a run needed, to size a pool for the next: a [`HeapProfile`].
//!
//! A heap in RPC mode maps slabs as its kernels ask for them, one host round
//! trip each; a pool maps them before the launch and hands them out on the
//! device (`Mode::Pool`), but must be sized. The device counts, per size
//! class, the slabs the class holds now and at most (`ClassCounts`: changed
//! only where a slab is published or taken over, never on a malloc's path
//! that finds room) and the most bytes of large blocks live at once;
//! [`Heap::profile`](crate::Heap::profile) reads them, and
//! [`HeapConfig::pool_from`](crate::HeapConfig::pool_from) turns the peaks
//! into a pool: the sum of the classes' peaks, as slabs are not tied to a
//! class until one publishes them. Large blocks still go to the host in
//! pool mode; their peak says how much more the heap's `limit` must allow.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};
use warpalloc_device::ClassCounts;
use warpalloc_device::size_class::{CLASS_COUNT, SLAB_SIZE, geometry};

use crate::heap::{HeapConfig, Mode};

/// The slabs a class needed in a run: those it held after it (its most at
/// once, unless slabs were taken over: see the module docs), and as many
/// more as its mallocs that got null would have filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct ClassPeak {
    /// The class's block size, in bytes.
    pub block: u32,
    /// Its slabs.
    pub slabs: u32,
}

/// What a heap's launches needed at most: slabs per size class (only the
/// classes that held one) and bytes of large blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct HeapProfile {
    /// The classes' slabs, smallest block first.
    pub classes: Vec<ClassPeak>,
    /// The most bytes of large blocks live at once.
    pub peak_large_bytes: u64,
    /// Slabs that left their class during the run under memory pressure:
    /// taken over by another class, or given back to the host by the
    /// device to make room for a large block (`Traffic::slabs_given_back`).
    /// When not 0, memory ran short and a class's slabs may be fewer than
    /// its peak (a pool sized from it may run dry: its report says by how
    /// much).
    pub takeovers: u64,
}

impl HeapProfile {
    /// The profile in the device's counts, after `takeovers` slabs were
    /// taken over. A class whose mallocs got null (a limit, a dry pool)
    /// needed more than it held: the slabs its nulls would have filled are
    /// added, `nulls / usable` rounded up (a lane that retried counts each
    /// time: more, never less). A profile of a run under a limit named only
    /// what the limit let it have, and a pool sized from it ran dry the
    /// same way (a review, 2026-12-07).
    pub fn from_counts(counts: &ClassCounts, takeovers: u64) -> HeapProfile {
        HeapProfile {
            classes: (0..CLASS_COUNT)
                .filter(|&c| counts.slabs[c] != 0 || counts.nulls[c] != 0)
                .map(|c| {
                    let geo = geometry(c);
                    ClassPeak {
                        block: geo.block,
                        slabs: counts.slabs[c]
                            .saturating_add(counts.nulls[c].div_ceil(geo.usable.max(1))),
                    }
                })
                .collect(),
            peak_large_bytes: counts.peak_large_bytes,
            takeovers,
        }
    }

    /// Slabs a pool needs to hold every class at its peak at once.
    /// Saturating: a profile read back from a file (the `serde` feature)
    /// may hold any counts.
    pub fn slabs(&self) -> u32 {
        crate::heap::saturating_sum(self.classes.iter().map(|c| c.slabs))
    }

    /// Bytes the heap maps at most for this profile: the pool's slabs and
    /// the large blocks' peak.
    pub fn bytes(&self) -> u64 {
        (u64::from(self.slabs()) * SLAB_SIZE).saturating_add(self.peak_large_bytes)
    }
}

impl HeapConfig {
    /// A pool-mode configuration that serves the run `profile` was taken
    /// from with no RPC for a slab: as many slabs as the classes' peaks
    /// together (at least one); everything else as the default.
    pub fn pool_from(profile: &HeapProfile) -> HeapConfig {
        HeapConfig {
            mode: Mode::Pool {
                slabs: profile.slabs().max(1),
            },
            ..HeapConfig::default()
        }
    }
}
