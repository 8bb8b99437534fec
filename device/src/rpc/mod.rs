//! The RPC channel between kernels and the host: the mailbox's wire format
//! and its typed requests and replies (one `no_std` module both sides
//! compile), the device's client and its mailbox binding, and the host's
//! server-side steps.
//!
//! A kernel asks the host for memory (a slab, a large block) or gives it back
//! through a port of the mailbox; the host's server thread answers. See
//! [`wire`] for the layout and the ownership protocol.

pub mod client;
#[cfg(not(loom))]
pub mod mailbox;
pub mod server;
pub mod wire;

pub use client::Client;
#[cfg(not(loom))]
pub use mailbox::Mailbox;
pub use server::{Pending, idle, poll};
