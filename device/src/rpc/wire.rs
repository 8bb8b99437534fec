//! The mailbox's wire format: ports in pinned host memory that the device
//! addresses directly (mapped with `cuMemHostAlloc(DEVICEMAP | PORTABLE)`, not
//! write-combined: the host polls it).
//!
//! ```text
//!   Port (2 240 bytes, 64-byte aligned)            written by
//!   0     ┌──────────────┬─────────────────────┐
//!         │ client: u32  │ pad                 │   device only
//!   64    ├──────────────┼─────────────────────┤
//!         │ server: u32  │ pad                 │   host only
//!   128   ├──────────────┼──────────┬──────────┤
//!         │ lane_mask    │ opcode   │ pad      │   device
//!   192   ├──────────────┴──────────┴──────────┤
//!         │ lane 0: 8 × u64  (args, then reply)│   device, then host
//!         │ ...                                │
//!         │ lane 31: 8 × u64                   │
//!   2240  └────────────────────────────────────┘
//! ```
//!
//! Ownership is a parity: the client (device) owns the port's header and
//! buffers while `client == server`; it sends by flipping `client`; the server
//! (host) owns them while the two differ, and answers by setting `server` to
//! `client`. Each flag has one writer, on its own cache line. The payload
//! moves with relaxed accesses, ordered by a system-scope release before each
//! flip and an acquire after seeing the other side's flip.
//!
//! Which warp uses a port is decided on the device with lock bits in device
//! memory (one bit per port, in the heap): a warp locks a port, waits until it
//! owns it (a `FREE` does not wait for its answer, so the previous user's
//! request may still be in flight), sends, and — for a call — waits for the
//! answer before unlocking.

use crate::sync::{AtomicU32, AtomicU64};

/// The most ports a mailbox has: GPUs promise no forward progress to more
/// warps than are resident, so more ports would not help.
pub const MAX_PORTS: usize = 4096;
/// Lanes of a warp, each with its own buffer.
pub const LANES: usize = if cfg!(loom) { 2 } else { 32 };
/// Words of a lane's buffer (64 bytes).
pub const LANE_WORDS: usize = 8;

/// What a request asks for.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// `args[0]` bytes (a multiple of 2 MiB) aligned to `args[1]` → reply
    /// `[address or 0, status]`.
    Alloc = 1,
    /// Give back `args[0]`, `args[1]` bytes; the client does not wait.
    Free = 2,
    /// Answer each argument word's bitwise complement (round-trip
    /// measurements, tests: an unanswered call cannot pass for an answered
    /// one, as a plain echo could).
    Ping = 3,
}

impl Opcode {
    /// The opcode with this number, if any.
    pub fn from_raw(raw: u32) -> Option<Opcode> {
        match raw {
            1 => Some(Opcode::Alloc),
            2 => Some(Opcode::Free),
            3 => Some(Opcode::Ping),
            _ => None,
        }
    }
}

/// The status word of a reply (`ret[1]` of `ALLOC`): why the host refused.
pub mod status {
    /// Served.
    pub const OK: u64 = 0;
    /// The heap's memory limit would be exceeded.
    pub const LIMIT: u64 = 1;
    /// The device would have less free memory than the configured headroom.
    pub const HEADROOM: u64 = 2;
    /// No run of the reserved address range is free and large enough.
    pub const NO_ADDRESS_SPACE: u64 = 3;
    /// The driver refused to create or map memory.
    pub const DRIVER: u64 = 4;
    /// A fault injected on purpose (tests).
    pub const INJECTED_FAULT: u64 = 5;
    /// A malformed request (unknown opcode, bad size or address).
    pub const BAD_REQUEST: u64 = 6;
}

/// The port count for a GPU with `resident_warps` resident warps: one per
/// warp that can run at once, at most [`MAX_PORTS`], at least one.
pub fn port_count_for(resident_warps: u64) -> u32 {
    resident_warps.clamp(1, MAX_PORTS as u64) as u32
}

/// One port of the mailbox.
#[repr(C, align(64))]
pub struct Port {
    /// The device's flag.
    pub client: AtomicU32,
    _pad0: [u32; 15],
    /// The host's flag.
    pub server: AtomicU32,
    _pad1: [u32; 15],
    /// The lanes of the request.
    pub lane_mask: AtomicU32,
    /// An [`Opcode`] as `u32`.
    pub opcode: AtomicU32,
    _pad2: [u32; 14],
    /// Each lane's arguments, then its reply.
    pub buffers: [[AtomicU64; LANE_WORDS]; LANES],
}

#[cfg(not(loom))]
const _: () = {
    assert!(core::mem::size_of::<Port>() == 2240);
    assert!(core::mem::align_of::<Port>() == 64);
    assert!(core::mem::offset_of!(Port, server) == 64);
    assert!(core::mem::offset_of!(Port, lane_mask) == 128);
    assert!(core::mem::offset_of!(Port, opcode) == 132);
    assert!(core::mem::offset_of!(Port, buffers) == 192);
    assert!(LANE_WORDS * 8 == 64);
};

impl Port {
    /// An idle port (both flags 0: the client owns it).
    #[cfg(not(loom))]
    pub const fn new() -> Port {
        Port {
            client: AtomicU32::new(0),
            _pad0: [0; 15],
            server: AtomicU32::new(0),
            _pad1: [0; 15],
            lane_mask: AtomicU32::new(0),
            opcode: AtomicU32::new(0),
            _pad2: [0; 14],
            buffers: [const { [const { AtomicU64::new(0) }; LANE_WORDS] }; LANES],
        }
    }

    /// An idle port (both flags 0: the client owns it).
    #[cfg(loom)]
    pub fn new() -> Port {
        Port {
            client: AtomicU32::new(0),
            _pad0: [0; 15],
            server: AtomicU32::new(0),
            _pad1: [0; 15],
            lane_mask: AtomicU32::new(0),
            opcode: AtomicU32::new(0),
            _pad2: [0; 14],
            buffers: core::array::from_fn(|_| core::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// Lane `lane`'s buffer (lanes beyond the warp wrap: never a panic).
    #[inline(always)]
    pub fn buffer(&self, lane: u32) -> &[AtomicU64; LANE_WORDS] {
        &self.buffers[lane as usize % LANES]
    }
}

impl Default for Port {
    fn default() -> Self {
        Self::new()
    }
}
