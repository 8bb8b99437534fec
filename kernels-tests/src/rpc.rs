//! RPC kernels: lanes of many warps calling the host through the mailbox
//! directly (not through the allocator), to test the channel itself at scale.

use warpalloc_device::kernel;
use warpalloc_device::rpc::Client;
use warpalloc_device::rpc::wire::{LANE_WORDS, Port, Reply, Request, Status};
use warpalloc_device::simt;
use warpalloc_device::sync::{AtomicU32, AtomicU64, Ordering};

/// The RPC kernels' client over `port_count` ports at `ports`, locked with
/// the bits of `locks` (`port_count.div_ceil(32)` words), and their two
/// counters: `stats[0]` mismatches, `stats[1]` calls. `None` (a mismatch
/// counted) when no port is usable: a broken expectation, not a hang.
///
/// # Safety
/// The ports are served by the host's server for the whole launch and
/// locked only through `locks`; the host gave `locks` its words, used only
/// atomically, and `stats` two words.
unsafe fn channel<'a>(
    ports: *mut Port,
    port_count: u32,
    locks: *mut u32,
    stats: *mut u64,
) -> Option<(Client<'a>, &'a AtomicU64, &'a AtomicU64)> {
    let words = port_count.div_ceil(32) as usize;
    // SAFETY: the caller's contract.
    let (client, bad, calls) = unsafe {
        let locks = core::slice::from_raw_parts(locks as *const AtomicU32, words);
        (
            Client::new(ports, port_count, locks),
            AtomicU64::from_ptr(stats),
            AtomicU64::from_ptr(stats.wrapping_add(1)),
        )
    };
    let Some(client) = client else {
        bad.fetch_add(1);
        return None;
    };
    Some((client, bad, calls))
}

kernel! {
    /// Each thread makes `rounds` PING calls with payloads unique to it and
    /// the round, checks every answered word (the complement), and counts mismatches in
    /// `stats[0]` and calls in `stats[1]`. `locks` holds one bit per port
    /// (`ports.div_ceil(32)` words).
    pub fn rpc_ping(ports: *mut Port, port_count: u32, locks: *mut u32, stats: *mut u64, rounds: u32) {
        // SAFETY: the kernel's parameters, as `channel` asks.
        let Some((client, bad, calls)) = (unsafe { channel(ports, port_count, locks, stats) }) else {
            return;
        };
        let me = simt::global_thread_id();
        for round in 0..u64::from(rounds) {
            let mut args = [0u64; LANE_WORDS];
            for (i, a) in args.iter_mut().enumerate() {
                *a = (me << 24) ^ (round << 8) ^ i as u64;
            }
            let lane_mask = simt::activemask();
            let reply = client.call(lane_mask, &Request::Ping { words: args }, Reply::read_ping);
            if reply != args.map(|w| !w) {
                bad.fetch_add(1);
            }
            calls.fetch_add(1);
        }
    }
}

kernel! {
    /// Lanes of one call with different requests: even lanes PING (their
    /// answer checked, as in `rpc_ping`), odd lanes free an address the
    /// host never gave out (8, 8 bytes: its answer must be `BadRequest`).
    /// Mismatches in `stats[0]`, calls in `stats[1]`.
    pub fn rpc_mixed(ports: *mut Port, port_count: u32, locks: *mut u32, stats: *mut u64) {
        // SAFETY: the kernel's parameters, as `channel` asks.
        let Some((client, bad, calls)) = (unsafe { channel(ports, port_count, locks, stats) }) else {
            return;
        };
        let me = simt::global_thread_id();
        let args: [u64; LANE_WORDS] = core::array::from_fn(|i| (me << 24) ^ i as u64);
        let ping = simt::lane_id().is_multiple_of(2);
        let request = if ping {
            Request::Ping { words: args }
        } else {
            Request::Free { addr: 8, bytes: 8 }
        };
        let (words, status) = client.call(simt::activemask(), &request, |buffer| {
            (Reply::read_ping(buffer), Status::from_raw(buffer[0].load(Ordering::Relaxed)))
        });
        let right = if ping {
            words == args.map(|w| !w)
        } else {
            status == Status::BadRequest
        };
        if !right {
            bad.fetch_add(1);
        }
        calls.fetch_add(1);
    }
}
