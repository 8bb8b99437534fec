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

use crate::sync::{Ordering, SysAtomicU32, SysAtomicU64};

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
    /// [`Request::Alloc`].
    Alloc = 1,
    /// [`Request::Free`]; the client does not wait for the answer.
    Free = 2,
    /// [`Request::Ping`].
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

/// Why the host refused a request: word 0 of an `Alloc` or `Free` reply
/// (0 is success).
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Served.
    Ok = 0,
    /// The heap's memory limit would be exceeded.
    Limit = 1,
    /// The device would have less free memory than the configured headroom.
    Headroom = 2,
    /// No run of the reserved address range is free and large enough.
    NoAddressSpace = 3,
    /// The driver refused to create or map memory.
    Driver = 4,
    /// A fault injected on purpose (tests).
    InjectedFault = 5,
    /// A malformed request (unknown opcode, bad size or address).
    BadRequest = 6,
}

impl Status {
    /// The status with this number; an unknown number reads as
    /// `BadRequest` (a reply we cannot understand is no success).
    pub fn from_raw(raw: u64) -> Status {
        match raw {
            0 => Status::Ok,
            1 => Status::Limit,
            2 => Status::Headroom,
            3 => Status::NoAddressSpace,
            4 => Status::Driver,
            5 => Status::InjectedFault,
            _ => Status::BadRequest,
        }
    }

    /// Every refusal (not `Ok`), in number order.
    pub const REFUSALS: [Status; 6] = [
        Status::Limit,
        Status::Headroom,
        Status::NoAddressSpace,
        Status::Driver,
        Status::InjectedFault,
        Status::BadRequest,
    ];
}

/// One lane's request. Its words in the lane's buffer:
///
/// ```text
///   Alloc { bytes, align }   [bytes, align]     bytes: a multiple of 2 MiB
///   Free  { addr, bytes }    [addr, bytes]
///   Ping  { words }          words[0..8]
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `bytes` of device memory aligned to `align` (a power of two).
    Alloc {
        /// Bytes (a positive multiple of the slab size).
        bytes: u64,
        /// Alignment (a power of two; at least the slab size is used).
        align: u64,
    },
    /// Gives back `bytes` at `addr` (what an `Alloc` returned).
    Free {
        /// The block's address.
        addr: u64,
        /// Its size, as allocated.
        bytes: u64,
    },
    /// Asks for the bitwise complement of each word (round-trip
    /// measurements and tests: an unanswered call cannot pass for an
    /// answered one, as a plain echo could).
    Ping {
        /// The words.
        words: [u64; LANE_WORDS],
    },
}

impl Request {
    /// The request's opcode.
    #[inline(always)]
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Alloc { .. } => Opcode::Alloc,
            Request::Free { .. } => Opcode::Free,
            Request::Ping { .. } => Opcode::Ping,
        }
    }

    /// Writes the request's words into a lane's buffer (the client).
    #[inline(always)]
    pub fn write(&self, buffer: &[SysAtomicU64; LANE_WORDS]) {
        match *self {
            Request::Alloc { bytes: a, align: b } | Request::Free { addr: a, bytes: b } => {
                buffer[0].store(a, Ordering::Relaxed);
                buffer[1].store(b, Ordering::Relaxed);
            }
            Request::Ping { words } => {
                for (w, v) in buffer.iter().zip(words) {
                    w.store(v, Ordering::Relaxed);
                }
            }
        }
    }

    /// The request with opcode `opcode` in a lane's buffer (the server); an
    /// unknown opcode is a `BadRequest`.
    pub fn read(opcode: u32, buffer: &[SysAtomicU64; LANE_WORDS]) -> Result<Request, Status> {
        let word = |i: usize| buffer[i].load(Ordering::Relaxed);
        match Opcode::from_raw(opcode) {
            Some(Opcode::Alloc) => Ok(Request::Alloc {
                bytes: word(0),
                align: word(1),
            }),
            Some(Opcode::Free) => Ok(Request::Free {
                addr: word(0),
                bytes: word(1),
            }),
            Some(Opcode::Ping) => Ok(Request::Ping {
                words: core::array::from_fn(word),
            }),
            None => Err(Status::BadRequest),
        }
    }
}

/// The server's answer to one lane. Its words in the lane's buffer:
///
/// ```text
///   Alloc(Ok(addr))      [0, addr]
///   Alloc(Err(status))   [status, 0]
///   Free(result)         [status]
///   Ping(words)          words[0..8]
///   Refused(status)      [status]      (a request the server cannot read)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The answer to an `Alloc`.
    Alloc(Result<u64, Status>),
    /// The answer to a `Free`.
    Free(Result<(), Status>),
    /// The answer to a `Ping`: the complement of each word.
    Ping([u64; LANE_WORDS]),
    /// A request the server could not read.
    Refused(Status),
}

impl Reply {
    /// Writes the reply's words into a lane's buffer (the server).
    pub fn write(&self, buffer: &[SysAtomicU64; LANE_WORDS]) {
        let status = |r: Result<(), Status>| match r {
            Ok(()) => Status::Ok as u64,
            Err(s) => s as u64,
        };
        match *self {
            Reply::Alloc(Ok(addr)) => {
                buffer[0].store(Status::Ok as u64, Ordering::Relaxed);
                buffer[1].store(addr, Ordering::Relaxed);
            }
            Reply::Alloc(Err(s)) => {
                buffer[0].store(s as u64, Ordering::Relaxed);
                buffer[1].store(0, Ordering::Relaxed);
            }
            Reply::Free(r) => buffer[0].store(status(r), Ordering::Relaxed),
            Reply::Refused(s) => buffer[0].store(s as u64, Ordering::Relaxed),
            Reply::Ping(words) => {
                for (w, v) in buffer.iter().zip(words) {
                    w.store(v, Ordering::Relaxed);
                }
            }
        }
    }

    /// The answer to an `Alloc` in a lane's buffer (the client): the
    /// address, or why not. A success with address 0 is a `BadRequest`.
    #[inline(always)]
    pub fn read_alloc(buffer: &[SysAtomicU64; LANE_WORDS]) -> Result<u64, Status> {
        match Status::from_raw(buffer[0].load(Ordering::Relaxed)) {
            Status::Ok => match buffer[1].load(Ordering::Relaxed) {
                0 => Err(Status::BadRequest),
                addr => Ok(addr),
            },
            refusal => Err(refusal),
        }
    }

    /// The answer to a `Ping` in a lane's buffer (the client).
    pub fn read_ping(buffer: &[SysAtomicU64; LANE_WORDS]) -> [u64; LANE_WORDS] {
        core::array::from_fn(|i| buffer[i].load(Ordering::Relaxed))
    }
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
    pub client: SysAtomicU32,
    _pad0: [u32; 15],
    /// The host's flag.
    pub server: SysAtomicU32,
    _pad1: [u32; 15],
    /// The lanes of the request.
    pub lane_mask: SysAtomicU32,
    /// An [`Opcode`] as `u32`.
    pub opcode: SysAtomicU32,
    _pad2: [u32; 14],
    /// Each lane's arguments, then its reply.
    pub buffers: [[SysAtomicU64; LANE_WORDS]; LANES],
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
            client: SysAtomicU32::new(0),
            _pad0: [0; 15],
            server: SysAtomicU32::new(0),
            _pad1: [0; 15],
            lane_mask: SysAtomicU32::new(0),
            opcode: SysAtomicU32::new(0),
            _pad2: [0; 14],
            buffers: [const { [const { SysAtomicU64::new(0) }; LANE_WORDS] }; LANES],
        }
    }

    /// An idle port (both flags 0: the client owns it).
    #[cfg(loom)]
    pub fn new() -> Port {
        Port {
            client: SysAtomicU32::new(0),
            _pad0: [0; 15],
            server: SysAtomicU32::new(0),
            _pad1: [0; 15],
            lane_mask: SysAtomicU32::new(0),
            opcode: SysAtomicU32::new(0),
            _pad2: [0; 14],
            buffers: core::array::from_fn(|_| core::array::from_fn(|_| SysAtomicU64::new(0))),
        }
    }

    /// Lane `lane`'s buffer (lanes beyond the warp wrap: never a panic).
    #[inline(always)]
    pub fn buffer(&self, lane: u32) -> &[SysAtomicU64; LANE_WORDS] {
        &self.buffers[lane as usize % LANES]
    }
}

impl Default for Port {
    fn default() -> Self {
        Self::new()
    }
}
