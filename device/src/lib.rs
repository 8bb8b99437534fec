#![no_std]
//! skeleton
