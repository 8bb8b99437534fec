//! The device's side of the mailbox: a warp (any subset of one, all of whose
//! lanes call together) locks a port, sends one request with a buffer per
//! lane and waits for the answer (`call`). The heap's own requests are one
//! lane's: `alloc_alone` and `free_alone` follow the same protocol without
//! collectives, and a free does not wait for its answer (the port's next
//! user waits until the server has taken it).
//!
//! ```text
//!   lane_mask ─► leader: lock a port (device lock bits, fetch_or)
//!             ─► leader: wait until client == server   (acquire, sys)
//!             ─► lanes: write args;  leader: header     (relaxed)
//!             ─► release (sys);  leader: flip client
//!   call:     ─► leader: wait until server == client    (acquire, sys; nanosleep)
//!             ─► lanes: read reply
//!             ─► release (gpu);  leader: unlock the port
//! ```

use crate::guard::{
    RPC_FLIP_BEFORE_RELEASE, RPC_LOCK_WITHOUT_FENCES, RPC_LOCK_WITHOUT_WAIT, planted,
};
use crate::index::{reduce, wrap};
use crate::rpc::wire::Port;
use crate::rpc::wire::{LANE_WORDS, Reply, Request, Status};
use crate::simt::{self, Backoff, Scope};
use crate::sync::{AtomicU32, Ordering, SysAtomicU64, fence};

/// A client of one mailbox.
pub struct Client<'a> {
    ports: *mut Port,
    port_count: u32,
    locks: &'a [AtomicU32],
}

impl<'a> Client<'a> {
    /// A client of the `port_count` ports at `ports`, locking them with the
    /// bits of `locks` (bit `i % 32` of word `i / 32` for port `i`; ports
    /// beyond `locks` are not used); `None` when that leaves no port (no
    /// port, or no lock word): a client with none spun for ever looking
    /// for a free one, or used a port past the mailbox (a review,
    /// 2026-12-07).
    ///
    /// # Safety
    /// `ports` points to `port_count` ports that stay mapped while the client
    /// is used, served by one server, and locked only through `locks`.
    pub unsafe fn new(ports: *mut Port, port_count: u32, locks: &'a [AtomicU32]) -> Option<Self> {
        let usable = (locks.len() * 32).min(u32::MAX as usize) as u32;
        let port_count = port_count.min(usable);
        (port_count != 0 && !ports.is_null()).then_some(Client {
            ports,
            port_count,
            locks,
        })
    }

    fn port(&self, index: u32) -> &Port {
        // SAFETY: `index < port_count` (callers reduce modulo it), within
        // the ports the constructor's contract keeps mapped.
        unsafe { &*self.ports.add(index as usize) }
    }

    /// Locks a port for the lanes of `lane_mask`; every lane gets its index.
    fn lock(&self, lane_mask: u32) -> u32 {
        let leader = simt::leader(lane_mask);
        let mut index = 0;
        if simt::lane_id() == leader {
            index = self.lock_alone();
        }
        let index = simt::shfl_u32(lane_mask, index, leader);
        // The leader's acquires (the lock's, the server's) happen-before the
        // lanes' writes to the port: `bar.warp.sync` orders memory among
        // the lanes it synchronises, a shuffle does not (PTX ISA).
        simt::syncwarp(lane_mask);
        index
    }

    /// Locks a port (one lane, no collectives) and waits until the server
    /// has taken the port's previous request; returns the port's index.
    fn lock_alone(&self) -> u32 {
        let count = self.port_count;
        // Warps spread over the ports by Fibonacci hashing of the
        // warp's slot: warps running at once land far apart and
        // evenly, with no division. A lane goes round the ports from
        // there, and pauses each time it passes port 0, longer each round.
        let warp = simt::warp_slot();
        let mut at = reduce(warp.wrapping_mul(0x9e37_79b9), count);
        let mut rounds = 0u32;
        let index = loop {
            let bit = 1u32 << (at % 32);
            if let Some(word) = self.locks.get((at / 32) as usize)
                && word.load(Ordering::Relaxed) & bit == 0
                && word.fetch_or(bit) & bit == 0
            {
                break at;
            }
            at = wrap(at, 1, count);
            if at == 0 {
                simt::snooze_after(rounds);
                rounds = rounds.saturating_add(1);
            }
        };
        if !planted(RPC_LOCK_WITHOUT_FENCES) {
            // ORDERING: acquire (gpu): pairs with the release fence in
            // `unlock_alone`: the previous holder's use of the port
            // happens-before ours.
            fence(Ordering::Acquire, Scope::Gpu);
        }
        // Wait until the server has taken the previous request.
        let port = self.port(index);
        let mut backoff = Backoff::new();
        // ORDERING: acquire (sys): pairs with the server's release
        // before it set `server`; the port's payload is ours after this.
        while port.server.load(Ordering::Acquire) != port.client.load(Ordering::Relaxed)
            && !planted(RPC_LOCK_WITHOUT_WAIT)
        {
            backoff.snooze();
        }
        index
    }

    fn unlock(&self, lane_mask: u32, index: u32) {
        simt::syncwarp(lane_mask);
        if simt::is_leader(lane_mask) {
            self.unlock_alone(index);
        }
    }

    /// Unlocks port `index` (the lane that locked it).
    fn unlock_alone(&self, index: u32) {
        if !planted(RPC_LOCK_WITHOUT_FENCES) {
            // ORDERING: release (gpu): our use of the port happens-before
            // the next holder's; pairs with the acquire fence in
            // `lock_alone`.
            fence(Ordering::Release, Scope::Gpu);
        }
        if let Some(word) = self.locks.get((index / 32) as usize) {
            word.fetch_and(!(1u32 << (index % 32)));
        }
    }

    /// Writes the request and hands the port to the server; returns the
    /// flag value that the server's answer will show.
    #[inline(always)]
    fn send_on(&self, lane_mask: u32, index: u32, request: &Request) -> u32 {
        let port = self.port(index);
        request.write(port.buffer(simt::lane_id()));
        // ORDERING: release (sys): this lane's arguments are ordered before
        // the syncwarp, after which the leader's own release publishes the
        // whole request to the host.
        fence(Ordering::Release, Scope::System);
        simt::syncwarp(lane_mask);
        let mut flip = 0;
        if simt::is_leader(lane_mask) {
            flip = self.hand_over(port, lane_mask, request);
        }
        simt::shfl_u32(lane_mask, flip, simt::leader(lane_mask))
    }

    /// The leader's part of a send: names the lanes and the opcode and
    /// flips the client flag, after a release that publishes the lanes'
    /// arguments (each ordered before it by the caller). Returns the flag.
    #[inline(always)]
    fn hand_over(&self, port: &Port, lane_mask: u32, request: &Request) -> u32 {
        port.lane_mask.store(lane_mask, Ordering::Relaxed);
        port.opcode
            .store(request.opcode() as u32, Ordering::Relaxed);
        let flip = port.client.load(Ordering::Relaxed) ^ 1;
        if planted(RPC_FLIP_BEFORE_RELEASE) {
            port.client.store(flip, Ordering::Relaxed);
        }
        // ORDERING: release (sys): the request happens-before the
        // server's read; pairs with the acquire load of `client` in
        // `server::poll`.
        fence(Ordering::Release, Scope::System);
        port.client.store(flip, Ordering::Relaxed);
        flip
    }

    /// Waits (one lane) until the server has answered the request that
    /// flipped the client flag to `flip`.
    #[inline(always)]
    fn wait_answer(port: &Port, flip: u32) {
        // The simulator counts this wait's sleep as the host's latency
        // (`LaunchStats::host_wait_ns`), apart from the allocator's own.
        #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
        warpalloc_sim::wait_on_host(true);
        let mut backoff = Backoff::with_limits(64, 4096);
        // ORDERING: acquire (sys): pairs with the server's release before
        // it answered; the replies are visible after this.
        while port.server.load(Ordering::Acquire) != flip {
            backoff.snooze();
        }
        #[cfg(all(not(target_arch = "nvptx64"), not(loom)))]
        warpalloc_sim::wait_on_host(false);
    }

    /// Sends each lane's `request` and waits for the answer; every lane of
    /// `lane_mask` calls together and reads its own reply with `read`
    /// before the port is given up. A port carries one opcode (its
    /// header's), so the lanes of each opcode send on a port of their own:
    /// a lane's `Free` sent beside another's `Alloc` was read as an
    /// `Alloc` of its address (a review, 2026-12-07).
    pub fn call<R>(
        &self,
        lane_mask: u32,
        request: &Request,
        read: impl FnOnce(&[SysAtomicU64; LANE_WORDS]) -> R,
    ) -> R {
        let lane_mask = simt::match_any_u32(lane_mask, request.opcode() as u32);
        let index = self.lock(lane_mask);
        let flip = self.send_on(lane_mask, index, request);
        let port = self.port(index);
        if simt::is_leader(lane_mask) {
            Self::wait_answer(port, flip);
        }
        simt::syncwarp(lane_mask);
        // ORDERING: acquire (sys): this lane's view of its reply follows the
        // leader's acquire (the syncwarp orders the lanes).
        fence(Ordering::Acquire, Scope::System);
        let reply = read(port.buffer(simt::lane_id()));
        self.unlock(lane_mask, index);
        reply
    }

    /// `bytes` aligned to `align` from the host, for each lane of
    /// `lane_mask`: the address, or why the host refused.
    #[inline(always)]
    pub fn alloc(&self, lane_mask: u32, bytes: u64, align: u64) -> Result<u64, Status> {
        self.call(
            lane_mask,
            &Request::Alloc { bytes, align },
            Reply::read_alloc,
        )
    }

    /// [`Client::call`] for the calling lane alone: the same port protocol
    /// without collectives (a one-lane mask makes them no-ops, but on sm_7x
    /// ptxas cannot know it and adds divergent-warp fallbacks that cost the
    /// caller registers).
    fn call_alone<R>(
        &self,
        request: &Request,
        read: impl FnOnce(&[SysAtomicU64; LANE_WORDS]) -> R,
    ) -> R {
        let index = self.lock_alone();
        let port = self.port(index);
        let lane = simt::lane_id();
        request.write(port.buffer(lane));
        // (`hand_over`'s release publishes our arguments: one lane.)
        let flip = self.hand_over(port, 1 << lane, request);
        Self::wait_answer(port, flip);
        let reply = read(port.buffer(lane));
        self.unlock_alone(index);
        reply
    }

    /// [`Client::alloc`] for the calling lane alone (no collectives).
    pub fn alloc_alone(&self, bytes: u64, align: u64) -> Result<u64, Status> {
        self.call_alone(&Request::Alloc { bytes, align }, Reply::read_alloc)
    }

    /// Gives `bytes` at `addr` back to the host, for the calling lane alone
    /// (no collectives), without waiting: the next user of the port waits
    /// until the server has taken it.
    pub fn free_alone(&self, addr: u64, bytes: u64) {
        let index = self.lock_alone();
        let port = self.port(index);
        let lane = simt::lane_id();
        Request::Free { addr, bytes }.write(port.buffer(lane));
        // (`hand_over`'s release publishes our arguments: one lane.)
        self.hand_over(port, 1 << lane, &Request::Free { addr, bytes });
        self.unlock_alone(index);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// No port to lock is no client (it spun for ever, or used a port past
    /// the mailbox); a port that a lock bit covers is one.
    #[test]
    fn a_client_needs_a_port_and_a_lock_bit() {
        let mut ports: Vec<Port> = (0..2).map(|_| Port::new()).collect();
        let locks = [AtomicU32::new(0)];
        let at = ports.as_mut_ptr();
        // SAFETY: two ports, alive here, served by no one: no call is made.
        unsafe {
            assert!(Client::new(at, 0, &locks).is_none());
            assert!(Client::new(at, 2, &[]).is_none());
            assert!(Client::new(core::ptr::null_mut(), 2, &locks).is_none());
            let client = Client::new(at, 2, &locks).expect("two ports");
            assert_eq!(client.port_count, 2);
        }
    }
}
