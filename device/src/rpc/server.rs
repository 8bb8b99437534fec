//! The host's side of one port: plain code without collectives, written
//! against the `sync` facade so that loom can model it with the client.

use crate::guard::{RPC_REPLY_WITHOUT_RELEASE, planted};
use crate::rpc::wire::{LANE_WORDS, Port};
use crate::simt::Scope;
use crate::sync::{Ordering, fence};

/// A request the server owns until it calls [`Request::finish`].
pub struct Request<'a> {
    port: &'a Port,
    flag: u32,
}

/// The port's pending request, if the client has sent one.
pub fn poll(port: &Port) -> Option<Request<'_>> {
    // ORDERING: acquire (sys): pairs with the client's release before it
    // flipped `client`; the request's payload is visible after this.
    let flag = port.client.load(Ordering::Acquire);
    (flag != port.server.load(Ordering::Relaxed)).then_some(Request { port, flag })
}

impl Request<'_> {
    /// The lanes that sent it.
    pub fn lane_mask(&self) -> u32 {
        self.port.lane_mask.load(Ordering::Relaxed)
    }

    /// Its opcode, raw (unknown values get a `BAD_REQUEST` answer).
    pub fn opcode(&self) -> u32 {
        self.port.opcode.load(Ordering::Relaxed)
    }

    /// Lane `lane`'s arguments.
    pub fn args(&self, lane: u32) -> [u64; LANE_WORDS] {
        let mut out = [0u64; LANE_WORDS];
        for (o, w) in out.iter_mut().zip(self.port.buffer(lane)) {
            *o = w.load(Ordering::Relaxed);
        }
        out
    }

    /// Writes lane `lane`'s reply.
    pub fn reply(&self, lane: u32, ret: [u64; LANE_WORDS]) {
        for (w, v) in self.port.buffer(lane).iter().zip(ret) {
            w.store(v, Ordering::Relaxed);
        }
    }

    /// Hands the port back to the client.
    pub fn finish(self) {
        if !planted(RPC_REPLY_WITHOUT_RELEASE) {
            // ORDERING: release (sys): the replies happen-before the client's
            // reads; pairs with the client's acquire load of `server`.
            fence(Ordering::Release, Scope::System);
        }
        self.port.server.store(self.flag, Ordering::Relaxed);
    }
}
