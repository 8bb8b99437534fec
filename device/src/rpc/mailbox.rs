//! The mailbox as the device heap holds it: where the host's ports are and
//! the device-side lock bits that decide which warp uses which port.
//!
//! ```text
//!   Mailbox (in the DeviceHeap, device memory)      ports (pinned host memory)
//!   ┌──────────────┬────────────┬──────────────┐     ┌────────┬────────┬───
//!   │ ports: u64   │ count: u32 │ locks[128]   │ ──► │ Port 0 │ Port 1 │ ...
//!   └──────────────┴────────────┴──────────────┘     └────────┴────────┴───
//!                                 bit i % 32 of word i / 32: port i is taken
//! ```
//!
//! The host binds the ports (`bind`) before launches; a heap without ports
//! has no client, and every request to the host fails.

use crate::rpc::Client;
use crate::rpc::wire::MAX_PORTS;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The device's side of a mailbox.
#[repr(C)]
#[derive(Debug)]
pub struct Mailbox {
    ports: AtomicU64,
    count: AtomicU32,
    locks: [AtomicU32; MAX_PORTS / 32],
}

const _: () = assert!(MAX_PORTS.is_multiple_of(32));

impl Mailbox {
    /// A mailbox with no ports.
    pub const fn new() -> Self {
        Mailbox {
            ports: AtomicU64::new(0),
            count: AtomicU32::new(0),
            locks: [const { AtomicU32::new(0) }; MAX_PORTS / 32],
        }
    }

    /// Binds `count` ports (at most [`MAX_PORTS`]) at device address
    /// `ports`, all unlocked (0 ports: none). Host side, when no kernel
    /// runs.
    pub fn bind(&self, ports: u64, count: u32) {
        let count = if ports == 0 {
            0
        } else {
            count.min(MAX_PORTS as u32)
        };
        self.ports.store(ports, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
        for word in &self.locks {
            word.store(0, Ordering::Relaxed);
        }
    }

    /// The bound ports: (device address, count).
    pub fn ports(&self) -> (u64, u32) {
        // Plain reads: the host binds the mailbox between launches only.
        (self.ports.load_config(), self.count.load_config())
    }

    /// Ports locked now (host side, between launches: 0 when every call
    /// finished).
    pub fn locked(&self) -> u32 {
        self.locks
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum()
    }

    /// A client of the bound ports, if any.
    #[inline(always)]
    pub fn client(&self) -> Option<Client<'_>> {
        let (ports, count) = self.ports();
        // SAFETY: the host binds `ports` to `count` ports of a mapped
        // mailbox that one server serves for as long as the heap is used,
        // and locks them only through these bits (the contract of binding a
        // heap's mailbox); none (0) is no client.
        unsafe {
            Client::new(
                core::ptr::with_exposed_provenance_mut(ports as usize),
                count,
                &self.locks,
            )
        }
    }
}

impl Default for Mailbox {
    fn default() -> Self {
        Self::new()
    }
}
