//! Snapshots of a heap at the edge of memory: what each size class held at
//! a phase's peak of mapped memory and at its first out-of-memory null, and
//! why the memory ran out — a table a user can act on.
//!
//! ```text
//!   phase "setup" ───────────── mark_phase("solve") ── phase "solve" ── …
//!      launches … the host refuses a slab (server thread: the refusal,
//!                 │                what it needed, what was mapped)
//!                 ▼
//!      the first null of the phase ─► at the host's next read of the heap
//!                                     (after the launch, `stats`,
//!                                     `snapshots`, `mark_phase`, `trim`):
//!                                     the FirstOutOfMemory snapshot, kept
//!      a new peak of mapped memory  ─► at the next read: the Peak snapshot,
//!                                     replaced while the peak grows
//! ```
//!
//! Nothing is taken on the device's hot path: the device only counts nulls
//! (per class, on the null path) and the host reads the heap when no kernel
//! runs. So a snapshot's per-class figures are those of the first read
//! after its moment: [`Heap::launch`](crate::Heap::launch) reads after each
//! launch that had a null, and a program that launches on its own streams
//! gets the state at its next `stats`, `snapshots`, `mark_phase` or `trim`
//! (call one after the launch you want to see). The refusal — its reason,
//! the bytes asked for and what was mapped then — is recorded by the RPC
//! server at the moment it refuses. Slabs stay with their class until
//! `trim` (`trim` reads the heap first), so slabs per class at a read are
//! the phase's most unless memory ran short and a class took another's
//! empty slab over, or the device gave emptied slabs back to the host for
//! a large block (`Traffic::slabs_given_back`).

use warpalloc_device::heap::ClassCensus;
use warpalloc_device::size_class::{CLASS_COUNT, SLAB_SIZE, geometry};

use crate::backing::{Refusal, RegionStats};
use crate::heap::{Shortfall, bytes};

/// When in a phase a snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// At the phase's peak: the read where its classes' slabs and live
    /// large blocks held the most.
    Peak,
    /// At the phase's first out-of-memory null (the first read after it).
    FirstOutOfMemory,
}

/// A size class in a snapshot.
///
/// `blocks_in_use ≤ usable_blocks`, `empty_slabs ≤ slabs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassSnapshot {
    /// The class's block size, in bytes.
    pub block: u32,
    /// Slabs the class holds (2 MiB each), empty ones included.
    pub slabs: u32,
    /// Of those, slabs with no live block.
    pub empty_slabs: u32,
    /// Blocks allocated.
    pub blocks_in_use: u64,
    /// Blocks the class's slabs hold: `slabs × usable blocks a slab`.
    pub usable_blocks: u64,
    /// Lanes of the phase whose malloc of the class got null.
    pub nulls: u32,
}

impl ClassSnapshot {
    /// Bytes of blocks allocated (block sizes: the sizes asked for are not
    /// kept).
    pub fn bytes_in_use(&self) -> u64 {
        self.blocks_in_use * u64::from(self.block)
    }

    /// Bytes of the class's slabs.
    pub fn bytes_mapped(&self) -> u64 {
        u64::from(self.slabs) * SLAB_SIZE
    }

    /// Blocks in use per usable block, in percent (0 with no slab).
    pub fn percent_full(&self) -> f64 {
        if self.usable_blocks == 0 {
            0.0
        } else {
            100.0 * self.blocks_in_use as f64 / self.usable_blocks as f64
        }
    }
}

/// Large blocks (≥ 1 MiB, whole granules) of one size in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LargeBlocks {
    /// Their size, in bytes (granules).
    pub bytes: u64,
    /// How many are allocated.
    pub count: u64,
}

/// A refusal of the host's, recorded by the RPC server when it refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusalRecord {
    /// Why.
    pub reason: Refusal,
    /// What the request needed, in bytes (a slab is 2 MiB).
    pub bytes: u64,
    /// Device memory the heap had mapped then.
    pub mapped_bytes: u64,
    /// The heap's limit (`HeapConfig::limit`).
    pub limit: Option<u64>,
    /// The heap's headroom (`HeapConfig::headroom`).
    pub headroom: u64,
    /// The driver's message, for a driver error.
    pub driver_error: Option<String>,
    /// Whether the heap spills (`HeapConfig::spill`): then the host's
    /// memory was at its floor too.
    pub spill: bool,
}

impl RefusalRecord {
    /// What to do about it, in words.
    pub fn fix(&self) -> String {
        let or_spill = if self.spill {
            " (spill is on, and the host's memory was at its floor: a tenth of it, at least 4 \
             GiB)"
        } else {
            ", or turn on `HeapConfig::spill`"
        };
        match self.reason {
            Refusal::Limit => format!(
                "the heap's limit ({}) was reached with {} mapped; raise `HeapConfig::limit` or \
                 free earlier{or_spill}",
                self.limit.map_or_else(|| "none".into(), bytes),
                bytes(self.mapped_bytes)
            ),
            Refusal::Headroom => format!(
                "the device would have kept less than the headroom ({}) free, with {} mapped by \
                 the heap; lower `HeapConfig::headroom` or free device memory elsewhere{or_spill}",
                bytes(self.headroom),
                bytes(self.mapped_bytes)
            ),
            Refusal::NoAddressSpace => {
                "the heap's reserved address space had no room left for it; raise \
                 `HeapConfig::reserve` (or `trim` between launches: moved granules keep their \
                 old addresses until then)"
                    .into()
            }
            Refusal::Driver => format!(
                "the driver could not map memory ({}); the device is likely full: free device \
                 memory elsewhere{or_spill}",
                self.driver_error.as_deref().unwrap_or("no message")
            ),
            Refusal::InjectedFault => "a fault injected on purpose (`Heap::fail_every`)".into(),
            Refusal::BadRequest => "a malformed request (a bug: please report it)".into(),
        }
    }
}

/// What a heap held at one moment of a phase (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The phase's name (`Heap::mark_phase`; the first is "start").
    pub phase: String,
    /// When.
    pub moment: Moment,
    /// The classes that hold a slab or had a null, smallest block first.
    pub classes: Vec<ClassSnapshot>,
    /// Large blocks allocated, by size, largest first.
    pub large: Vec<LargeBlocks>,
    /// Slabs in the pool (pool mode), none held by a class.
    pub pool_slabs: u64,
    /// The pool's size in pool mode (`None` in RPC mode).
    pub pool: Option<u32>,
    /// What the classes' slabs and the live large blocks held, in bytes
    /// (the measure of a phase's peak: the read where it was highest).
    pub held_bytes: u64,
    /// Whether a dry pool asks the host (`HeapConfig::pool_fallback`).
    pub pool_fallback: bool,
    /// Device memory the heap had mapped.
    pub mapped_bytes: u64,
    /// Of the mapped memory (device and spilled), the granules free for
    /// reuse: no slab or large block holds them.
    pub free_mapped_bytes: u64,
    /// The most device memory mapped so far in the phase, or since the
    /// last [`Heap::reset_peaks`](crate::Heap::reset_peaks) in it
    /// (`warpalloc stress` starts the peaks over for each kernel).
    pub peak_mapped_bytes: u64,
    /// Host memory the heap had mapped in place of device memory
    /// (`HeapConfig::spill`).
    pub spilled_bytes: u64,
    /// Out-of-memory nulls in the phase so far (small and large).
    pub out_of_memory: u64,
    /// The phase's first refusal by the host, if one came.
    pub refusal: Option<RefusalRecord>,
}

/// What a snapshot is made of: one read of the heap.
pub(crate) struct Reading<'a> {
    pub phase: &'a str,
    pub classes: &'a [ClassCensus; CLASS_COUNT],
    /// The device's nulls per class, since the phase began.
    pub nulls: &'a [u32; CLASS_COUNT],
    pub large: &'a [u64],
    /// Slabs in the pool.
    pub pool_slabs: u64,
    pub pool: Option<u32>,
    pub pool_fallback: bool,
    pub held_bytes: u64,
    pub region: &'a RegionStats,
    pub out_of_memory: u64,
    pub refusal: Option<RefusalRecord>,
}

impl Snapshot {
    pub(crate) fn take(moment: Moment, r: &Reading<'_>) -> Snapshot {
        let classes = (0..CLASS_COUNT)
            .filter(|&c| r.classes[c].slabs != 0 || r.nulls[c] != 0)
            .map(|c| {
                let (k, geo) = (&r.classes[c], geometry(c));
                ClassSnapshot {
                    block: geo.block,
                    slabs: k.slabs,
                    empty_slabs: k.empty_slabs,
                    blocks_in_use: k.live_blocks,
                    usable_blocks: u64::from(k.slabs) * u64::from(geo.usable),
                    nulls: r.nulls[c],
                }
            })
            .collect();
        let mut large: Vec<LargeBlocks> = Vec::new();
        let mut sizes = r.large.to_vec();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        for size in sizes {
            match large.last_mut() {
                Some(l) if l.bytes == size => l.count += 1,
                _ => large.push(LargeBlocks {
                    bytes: size,
                    count: 1,
                }),
            }
        }
        Snapshot {
            phase: r.phase.to_string(),
            moment,
            classes,
            large,
            pool_slabs: r.pool_slabs,
            pool: r.pool,
            held_bytes: r.held_bytes,
            pool_fallback: r.pool_fallback,
            mapped_bytes: r.region.mapped_bytes,
            free_mapped_bytes: r.region.free_mapped_granules * SLAB_SIZE,
            peak_mapped_bytes: r.region.peak_mapped_bytes,
            spilled_bytes: r.region.spilled_bytes,
            out_of_memory: r.out_of_memory,
            refusal: r.refusal.clone(),
        }
    }

    /// The classes whose mallocs got null, with the slabs they lacked
    /// (largest first), as [`HeapStats::pool_shortfall`](crate::HeapStats::pool_shortfall).
    pub fn shortfall(&self) -> Vec<Shortfall> {
        let mut nulls = [0; CLASS_COUNT];
        // A snapshot's fields are public: a block that is no class's (a
        // snapshot made by hand, say) counts nowhere.
        for k in &self.classes {
            if let Some(class) = crate::heap::class_of_block(k.block) {
                nulls[class] = k.nulls;
            }
        }
        crate::heap::shortfall(&nulls)
    }

    /// What ran out and what to do, in one sentence.
    pub fn advice(&self) -> Option<String> {
        if self.out_of_memory == 0 {
            return None;
        }
        // A dry pool (no fallback), said beside a refusal too: a refused
        // large block hid it (a review, 2026-12-07).
        let shortfall = self.shortfall();
        let pool = match (self.pool, self.pool_fallback) {
            (Some(pool), false) if self.refusal.is_none() || !shortfall.is_empty() => {
                Some(format!(
                    "the pool ({pool} slabs) ran dry; raise it to {} slabs, turn on \
                 `HeapConfig::pool_fallback` or use `Mode::Rpc`",
                    crate::heap::raised_pool(pool, &shortfall)
                ))
            }
            _ => None,
        };
        if let Some(r) = &self.refusal {
            // In pool mode (no fallback) the host is asked for large blocks
            // only: 2 MiB is one of 1 to 2 MiB there, not a slab.
            let what = if r.bytes != SLAB_SIZE {
                format!("a block of {}", bytes(r.bytes))
            } else if self.pool.is_some() && !self.pool_fallback {
                "a large block (2.0 MiB)".to_string()
            } else {
                "a slab or a large block (2.0 MiB)".to_string()
            };
            let refused = format!("the host refused {what}: {}", r.fix());
            return Some(match pool {
                Some(pool) => format!("{refused}; and {pool}"),
                None => refused,
            });
        }
        if let Some(pool) = pool {
            return Some(pool);
        }
        Some(
            "no refusal came in this phase: the heap was out of memory since an earlier \
             refusal (memory coming back, `trim` or `forget_refusal` ends it)"
                .into(),
        )
    }
}

/// A table a person can read: the classes, the large blocks, what ran out
/// and what to do.
impl std::fmt::Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "phase \"{}\", {} (read when no kernel ran): {} held by slabs and large blocks; {} \
             mapped (peak {}, {} of it free){}, {} out-of-memory nulls",
            self.phase,
            match self.moment {
                Moment::Peak => "at its peak",
                Moment::FirstOutOfMemory => "at its first out-of-memory null",
            },
            bytes(self.held_bytes),
            bytes(self.mapped_bytes),
            bytes(self.peak_mapped_bytes),
            bytes(self.free_mapped_bytes),
            // The free granules are device and spilled ones: said of both
            // when there are spilled ones ("0 B mapped, 4 MiB of it free"
            // read as more free than mapped: a review, 2026-12-07).
            if self.spilled_bytes != 0 {
                format!(
                    ", and {} spilled to host memory (the free counts both)",
                    bytes(self.spilled_bytes)
                )
            } else {
                String::new()
            },
            self.out_of_memory
        )?;
        for k in &self.classes {
            if k.slabs == 0 {
                writeln!(
                    f,
                    "  class {:>9}: no slab; {} nulls",
                    bytes(u64::from(k.block)),
                    k.nulls
                )?;
                continue;
            }
            writeln!(
                f,
                "  class {:>9}: {} slab{} ({}), {:.0} % full, {} empty; {} in use; {} nulls",
                bytes(u64::from(k.block)),
                k.slabs,
                if k.slabs == 1 { "" } else { "s" },
                bytes(k.bytes_mapped()),
                k.percent_full(),
                k.empty_slabs,
                bytes(k.bytes_in_use()),
                k.nulls
            )?;
        }
        if !self.large.is_empty() {
            let sizes: Vec<String> = self
                .large
                .iter()
                .map(|l| format!("{} × {}", l.count, bytes(l.bytes)))
                .collect();
            writeln!(f, "  large blocks: {}", sizes.join(", "))?;
        }
        if self.pool.is_some() {
            writeln!(f, "  pool: {} slabs left", self.pool_slabs)?;
        }
        if let Some(advice) = self.advice() {
            writeln!(f, "  {advice}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool-mode snapshot at its first out-of-memory null: 8 KiB's
    /// nulls beyond its one slab, and optionally a refused large block.
    fn dry_pool(refusal: Option<u64>) -> Snapshot {
        Snapshot {
            phase: "start".into(),
            moment: Moment::FirstOutOfMemory,
            classes: vec![ClassSnapshot {
                block: 8192,
                slabs: 1,
                empty_slabs: 0,
                blocks_in_use: 255,
                usable_blocks: 255,
                nulls: 600,
            }],
            large: Vec::new(),
            pool_slabs: 0,
            pool: Some(1),
            held_bytes: SLAB_SIZE,
            pool_fallback: false,
            mapped_bytes: SLAB_SIZE,
            free_mapped_bytes: 0,
            peak_mapped_bytes: SLAB_SIZE,
            spilled_bytes: 0,
            out_of_memory: 601,
            refusal: refusal.map(|bytes| RefusalRecord {
                reason: Refusal::Limit,
                bytes,
                mapped_bytes: SLAB_SIZE,
                limit: Some(SLAB_SIZE),
                headroom: 0,
                driver_error: None,
                spill: false,
            }),
        }
    }

    /// The pool's shortfall is said beside a refused large block (which
    /// hid it), and a refused 2 MiB in pool mode is a large block, not a
    /// slab (the host serves no slab there): a review, 2026-12-07.
    #[test]
    fn a_dry_pool_is_advised_beside_a_refused_large_block() {
        let alone = dry_pool(None).advice().expect("advice");
        assert!(
            alone.starts_with("the pool (1 slabs) ran dry; raise it to"),
            "{alone}"
        );
        let both = dry_pool(Some(SLAB_SIZE)).advice().expect("advice");
        assert!(
            both.starts_with("the host refused a large block (2.0 MiB)")
                && both.contains("; and the pool (1 slabs) ran dry"),
            "{both}"
        );
    }
}
