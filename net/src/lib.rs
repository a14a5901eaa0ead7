//! sbx-net: a sandbox's network, run by its host-side helper process.
//!
//! - [`policy`]: egress rules (domain, pattern, IP, CIDR, port) and the one function
//!   that decides every connection, with its precedence written down.
//!
//! The design and its reasons are in docs/network.md.

pub mod policy;
