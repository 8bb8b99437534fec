//! The host's side of one port: plain code without collectives, written
//! against the `sync` facade so that loom can model it with the client.

use crate::guard::{RPC_REPLY_WITHOUT_RELEASE, planted};
use crate::rpc::wire::{Port, Reply, Request, Status};
use crate::simt::Scope;
use crate::sync::{Ordering, fence};

/// A request the server owns until it calls [`Pending::finish`].
pub struct Pending<'a> {
    port: &'a Port,
    flag: u32,
}

/// The port's pending request, if the client has sent one.
pub fn poll(port: &Port) -> Option<Pending<'_>> {
    // ORDERING: acquire (sys): pairs with the client's release before it
    // flipped `client`; the request's payload is visible after this.
    let flag = port.client.load(Ordering::Acquire);
    (flag != port.server.load(Ordering::Relaxed)).then_some(Pending { port, flag })
}

impl Pending<'_> {
    /// The lanes that sent it.
    pub fn lane_mask(&self) -> u32 {
        self.port.lane_mask.load(Ordering::Relaxed)
    }

    /// Lane `lane`'s request, or why it cannot be read.
    pub fn request(&self, lane: u32) -> Result<Request, Status> {
        Request::read(
            self.port.opcode.load(Ordering::Relaxed),
            self.port.buffer(lane),
        )
    }

    /// Writes lane `lane`'s reply.
    pub fn reply(&self, lane: u32, reply: &Reply) {
        reply.write(self.port.buffer(lane));
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

/// Whether the server has taken every request sent on `port` (the client
/// owns it again). Host side: a kernel's `Free`s do not wait for their
/// answers, so some may still be in flight when the kernel ends.
pub fn idle(port: &Port) -> bool {
    // ORDERING: acquire (sys): pairs with the server's release in `finish`
    // (and, for `client`, the client's release before its flip).
    port.client.load(Ordering::Acquire) == port.server.load(Ordering::Acquire)
}
