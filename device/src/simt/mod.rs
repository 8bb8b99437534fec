//! SIMT primitives: what the allocator and kernels need from the hardware.
//!
//! One API, two backends chosen at compile time: `nvptx` (NVVM intrinsics and
//! PTX `asm!`) when built for `nvptx64-nvidia-cuda`, `sim` (the CPU warp
//! simulator) otherwise.
//!
//! Two kinds of lane sets, never mixed up in names:
//! * `lane_mask` — *who is here*: the lanes executing this code together, as
//!   [`activemask`] returned it once per operation. Read it once and pass it
//!   down: on Volta and later, lanes do not reconverge on their own, and two
//!   reads may differ.
//! * `uniform` — *who shares a target*: the subset of `lane_mask` that agrees
//!   on a value, from [`match_any_u32`] / [`match_any_u64`].
//!
//! Every sync collective takes the `lane_mask` of the lanes that execute it;
//! each of those lanes must reach the same collective with the same mask (on
//! the GPU anything else hangs or returns garbage; the simulator reports it).

#[cfg(target_arch = "nvptx64")]
#[path = "nvptx.rs"]
mod imp;
#[cfg(not(target_arch = "nvptx64"))]
#[path = "sim.rs"]
mod imp;

/// Lanes in a warp.
pub const WARP_SIZE: u32 = 32;

/// A three-dimensional index or extent (`threadIdx`, `blockDim`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Dim3 {
    /// x
    pub x: u32,
    /// y
    pub y: u32,
    /// z
    pub z: u32,
}

impl Dim3 {
    /// The product x·y·z.
    #[inline(always)]
    pub fn volume(self) -> u64 {
        u64::from(self.x) * u64::from(self.y) * u64::from(self.z)
    }

    /// The linear index of `index` within an extent `self` (x fastest).
    #[inline(always)]
    pub fn linear(self, index: Dim3) -> u64 {
        u64::from(index.x)
            + u64::from(self.x) * (u64::from(index.y) + u64::from(self.y) * u64::from(index.z))
    }
}

/// The scope of a fence: which observers it orders memory for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every thread of the GPU (`.gpu`): device-only state, such as slabs.
    Gpu,
    /// The GPU, its peers and the host (`.sys`): state the host reads, such
    /// as the RPC mailbox.
    System,
}

/// The caller's lane index within its warp, 0..32.
#[inline(always)]
pub fn lane_id() -> u32 {
    imp::lane_id()
}

/// Lanes with an index below the caller's: `(1 << lane_id()) - 1`.
#[inline(always)]
pub fn lanemask_lt() -> u32 {
    (1u32 << lane_id()) - 1
}

/// `threadIdx`.
#[inline(always)]
pub fn thread_idx() -> Dim3 {
    imp::thread_idx()
}

/// `blockIdx`.
#[inline(always)]
pub fn block_idx() -> Dim3 {
    imp::block_idx()
}

/// `blockDim`.
#[inline(always)]
pub fn block_dim() -> Dim3 {
    imp::block_dim()
}

/// `gridDim`.
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    imp::grid_dim()
}

/// The caller's thread index within its block, linearised (x fastest).
#[inline(always)]
pub fn thread_linear() -> u32 {
    block_dim().linear(thread_idx()) as u32
}

/// The caller's block index within the grid, linearised (x fastest).
#[inline(always)]
pub fn block_linear() -> u64 {
    grid_dim().linear(block_idx())
}

/// The caller's thread index within the grid.
#[inline(always)]
pub fn global_thread_id() -> u64 {
    block_linear() * block_dim().volume() + u64::from(thread_linear())
}

/// The caller's warp index within its block.
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_linear() / WARP_SIZE
}

/// `x`, as a value the compiler cannot see through: what is computed from
/// it is computed where it is used, not hoisted out of a loop and kept live
/// across it (on the GPU an opaque register move; the identity elsewhere).
/// The allocator's slow paths pass their loop's invariants through it so
/// that their register demand stays their own.
#[inline(always)]
pub fn opaque_u32(x: u32) -> u32 {
    imp::opaque_u32(x)
}

/// [`opaque_u32`] for 64-bit values and addresses.
#[inline(always)]
pub fn opaque_u64(x: u64) -> u64 {
    imp::opaque_u64(x)
}

/// An identity of the caller's warp among the warps running now, for
/// spreading and entropy (the RPC port a warp starts from, the slab walk's
/// seed), not for indexing: on the GPU the SM's index and the warp's slot on
/// it (`%smid`, `%warpid`: two special-register reads, no arithmetic, read
/// where used rather than kept live — they may change when a warp is
/// preempted); in the simulator the warp's index in the grid.
#[inline(always)]
pub fn warp_slot() -> u32 {
    imp::warp_slot()
}

/// The caller's launch: `%gridid` on the GPU (a grid identifier that no
/// other grid of the context shares while the context lives), in the
/// simulator the launch's number in the process (1, 2, 3…).
#[inline(always)]
pub fn grid_id() -> u64 {
    imp::grid_id()
}

/// The multiprocessor the caller's warp runs on, for spreading warps over
/// several copies of a hot word (the heap's per-class hints): on the GPU
/// `%smid` (read where used; it may change when a warp is preempted, which
/// only moves the warp to another copy); in the simulator the block's
/// index, since a block runs on one SM.
#[inline(always)]
pub fn sm_id() -> u32 {
    imp::sm_id()
}

/// The lanes of the caller's warp that exist: all 32, except in a block whose
/// size is not a multiple of 32, where the last warp is partial. (Which of
/// them are *here* is [`activemask`]'s question.)
#[inline(always)]
pub fn warp_mask() -> u32 {
    let threads = block_dim().volume();
    let first = u64::from(warp_id()) * u64::from(WARP_SIZE);
    let count = (threads - first).min(u64::from(WARP_SIZE)) as u32;
    if count == WARP_SIZE {
        u32::MAX
    } else {
        (1u32 << count) - 1
    }
}

/// The lanes of the caller's warp executing this call together. Any subset of
/// the warp's live lanes that includes the caller is possible (Volta's
/// independent thread scheduling); read it once per operation and pass it
/// down.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn activemask() -> u32 {
    imp::activemask()
}

/// Bit `i` set iff lane `i` of `lane_mask` passes `pred == true`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn ballot(lane_mask: u32, pred: bool) -> u32 {
    imp::ballot(lane_mask, pred)
}

/// The lanes of `lane_mask` whose `key` equals the caller's: the caller's
/// `uniform` set.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn match_any_u32(lane_mask: u32, key: u32) -> u32 {
    imp::match_any_u32(lane_mask, key)
}

/// The lanes of `lane_mask` whose 64-bit `key` equals the caller's.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn match_any_u64(lane_mask: u32, key: u64) -> u32 {
    imp::match_any_u64(lane_mask, key)
}

/// `value` as held by lane `src_lane`, which must be in `lane_mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_u32(lane_mask: u32, value: u32, src_lane: u32) -> u32 {
    imp::shfl_u32(lane_mask, value, src_lane)
}

/// 64-bit [`shfl_u32`].
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_u64(lane_mask: u32, value: u64, src_lane: u32) -> u64 {
    imp::shfl_u64(lane_mask, value, src_lane)
}

/// A pointer as held by lane `src_lane`, which must be in `lane_mask`.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn shfl_ptr<T>(lane_mask: u32, ptr: *mut T, src_lane: u32) -> *mut T {
    // Pointers are 64-bit on nvptx64 and on every supported host.
    let addr = shfl_u64(lane_mask, ptr as usize as u64, src_lane);
    ptr.with_addr(addr as usize)
}

/// Whether [`reduce_or`] is one instruction (`redux.sync`, sm_80 and
/// later) rather than shuffles. A constant on the GPU (the module's target);
/// in the simulator, the launch's compute capability, so that both sides of
/// every branch on it run in tests.
#[inline(always)]
pub fn has_redux() -> bool {
    imp::has_redux()
}

/// The OR of `value` over the lanes of `lane_mask`, to each of them. All
/// lanes of `lane_mask` call together, with the same mask; other lanes of
/// the warp may call at the same time with masks of their own (the groups
/// of a `match_any`). One `redux.sync` on sm_80 and later; shuffles before
/// (and in the simulator).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn reduce_or(lane_mask: u32, value: u32) -> u32 {
    imp::reduce_or(lane_mask, value)
}

/// [`reduce_or`] by shuffles: none for a lane alone, a butterfly of five
/// for the whole warp, else one shuffle per lane of the mask (every lane
/// of the mask takes part in each, so they agree).
#[allow(dead_code)] // not on nvptx with sm_80 and later
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
fn reduce_or_by_shuffles(lane_mask: u32, value: u32) -> u32 {
    if lane_mask & lane_mask.wrapping_sub(1) == 0 {
        return value;
    }
    let mut combined = value;
    if lane_mask == u32::MAX {
        let me = lane_id();
        let mut width = 1;
        while width < WARP_SIZE {
            combined |= shfl_u32(lane_mask, combined, me ^ width);
            width *= 2;
        }
    } else {
        let mut rest = lane_mask;
        while rest != 0 {
            let source = rest.trailing_zeros();
            rest &= rest - 1;
            combined |= shfl_u32(lane_mask, value, source);
        }
    }
    combined
}

/// Lane `leader`'s `value` to every lane of `lane_mask`: a [`shfl_u32`] from
/// the lane that did the work for the group.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn broadcast_u32(lane_mask: u32, value: u32, leader: u32) -> u32 {
    shfl_u32(lane_mask, value, leader)
}

/// The lowest lane of a non-empty mask: the conventional leader of a group.
#[inline(always)]
pub fn leader(mask: u32) -> u32 {
    mask.trailing_zeros()
}

/// Whether the caller is the lowest lane of `mask`.
#[inline(always)]
pub fn is_leader(mask: u32) -> bool {
    leader(mask) == lane_id()
}

/// Waits until every lane of `lane_mask` has reached a `syncwarp` with the
/// same mask, and orders their memory accesses around it.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn syncwarp(lane_mask: u32) {
    imp::syncwarp(lane_mask)
}

/// Suspends the lane for about `nanoseconds` (at most ~1 ms on the GPU).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn nanosleep(nanoseconds: u32) {
    imp::nanosleep(nanoseconds)
}

/// A nanosecond clock (`%globaltimer` on the GPU; virtual in deterministic
/// simulator launches). A source of entropy and of timeouts, not of ordering.
#[inline(always)]
pub fn clock() -> u64 {
    imp::clock()
}

/// An acquire-release fence of the given scope. Pairs a relaxed
/// read-modify-write with the accesses around it (LLVM drops the ordering of
/// read-modify-writes on nvptx64, so the `sync` facade makes them relaxed and
/// code orders them with fences; see `sync`).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn fence_acq_rel(scope: Scope) {
    crate::sync::fence(core::sync::atomic::Ordering::AcqRel, scope)
}

/// Exponential backoff for spin-waits: `nanosleep` from `min` doubling to
/// `max` nanoseconds. Under loom it yields the model thread; in the simulator
/// it is a switch point.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    current: u32,
    max: u32,
}

impl Backoff {
    /// Backoff from [`BACKOFF_MIN`] up to [`BACKOFF_MAX`] nanoseconds.
    pub const fn new() -> Self {
        Self::with_limits(BACKOFF_MIN, BACKOFF_MAX)
    }

    /// Backoff from `min` up to `max` nanoseconds.
    pub const fn with_limits(min: u32, max: u32) -> Self {
        Backoff { current: min, max }
    }

    /// Waits once, then doubles the next wait.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn snooze(&mut self) {
        crate::sync::snooze(self.current);
        self.current = (self.current.saturating_mul(2)).min(self.max);
    }
}

/// The first wait of [`Backoff::new`], in nanoseconds.
pub const BACKOFF_MIN: u32 = 32;
/// The longest wait of [`Backoff::new`], in nanoseconds.
pub const BACKOFF_MAX: u32 = 1024;
const _: () = assert!(BACKOFF_MAX.is_power_of_two() && BACKOFF_MIN.is_power_of_two());

/// The `tries`-th wait of [`Backoff::new`] (from [`BACKOFF_MIN`] doubling up
/// to [`BACKOFF_MAX`]), for a loop that counts its tries anyway: no backoff
/// state to keep live.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn snooze_after(tries: u32) {
    const DOUBLINGS: u32 = (BACKOFF_MAX / BACKOFF_MIN).trailing_zeros();
    crate::sync::snooze(BACKOFF_MIN << tries.min(DOUBLINGS));
}

/// A wait drawn, not grown: one of [`Backoff::new`]'s waits chosen by the
/// top three bits of `random` (32 ns to 1 µs, 1 µs for three of the eight),
/// for a retry loop that keeps no backoff state live across its rounds.
/// Where a loop's registers add to the caller's (the allocator's slow
/// paths), that state cost a register on every kernel (BENCHMARKS.md).
/// `random` should be [`draw`]'s or a generator's, not a raw clock (whose
/// low bits may not move).
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
pub fn snooze_drawn(random: u32) {
    snooze_after(random >> 29);
}

/// 32 random-looking bits, each depending on the clock, the warp's slot and
/// the lane (the clock alone will not do: `%globaltimer` may advance in
/// steps of 32 ns or of a microsecond, and the simulator's in steps of 32,
/// so its low bits can be constant). Never 0.
#[inline(always)]
pub fn draw() -> u32 {
    let mixed = (clock() as u32
        ^ warp_slot().wrapping_mul(0x8515_7af5)
        ^ lane_id().wrapping_mul(0x632b_e59b))
    .wrapping_mul(0x9e37_79bb);
    if mixed == 0 { 0x9e37_79bb } else { mixed }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}
