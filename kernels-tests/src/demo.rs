//! The demo kernel of the main job: warp-aggregated tickets, the pattern at
//! the heart of the allocator (lanes find who is here, elect a leader, the
//! leader does one atomic for the group, and shares the result).

use warpalloc_device::kernel;
use warpalloc_device::simt;
use warpalloc_device::sync::AtomicU32;

kernel! {
    /// Every thread takes a unique ticket `0..threads` from `counter`, with one
    /// `fetch_add` per group of lanes that `activemask()` puts together, and
    /// writes it to `out[global thread id]`. `groups` counts the atomics.
    pub fn warp_tickets(counter: *mut u32, groups: *mut u32, out: *mut u32) {
        // SAFETY: `counter` and `groups` are single words the host allocated
        // for this launch, accessed only atomically while it runs.
        let (counter, groups) = unsafe { (AtomicU32::from_ptr(counter), AtomicU32::from_ptr(groups)) };
        let lane_mask = simt::activemask();
        let leader = simt::leader(lane_mask);
        let rank = (lane_mask & simt::lanemask_lt()).count_ones();
        let mut base = 0;
        if simt::lane_id() == leader {
            base = counter.fetch_add(lane_mask.count_ones());
            groups.fetch_add(1);
        }
        let base = simt::shfl_u32(lane_mask, base, leader);
        let i = simt::global_thread_id() as usize;
        // SAFETY: `out` has one word per thread of the grid; this is ours.
        unsafe { out.add(i).write(base + rank) };
    }
}
