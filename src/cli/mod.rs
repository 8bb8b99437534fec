//! The `warpalloc` tool's subcommands.

pub mod bench;
pub mod common;
pub mod demo;
pub mod plot;
pub mod stress;
