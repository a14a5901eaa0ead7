//! The agent's memory allocator: mimalloc, with a small resident set when idle.
//!
//! musl's allocator maps every buffer over 128 KiB fresh from the kernel and unmaps it
//! when freed, so each 1 MiB chunk of a copy cost 256 page faults and an `munmap`.
//! Under software emulation that was most of the agent's CPU per byte: with mimalloc a
//! copy into a TCG VM runs at 55-71% of a raw vsock stream instead of 38-47%
//! (BENCHMARKS.md).
//!
//! The speed comes from reusing freed memory, so it must not go back to the kernel
//! while a transfer runs (purging at once measured no faster than musl). Two things
//! keep the agent's memory as small as it was with musl all the same:
//! - no transparent huge pages (the crate's `no_thp` feature): with them, the first
//!   allocations touched 2 MiB pages and an idle agent held 11.5 MiB instead of 4;
//! - once no call has ended for [`SETTLE`], [`trim_when_idle`] hands what is free back
//!   to the kernel: mimalloc would otherwise do so only when it next allocates, and an
//!   idle agent would keep what its last transfer used (12 MiB after a 64 MiB copy).

use std::time::Duration;

use tokio::sync::Notify;

/// How long the agent must have been idle before freed memory is trimmed.
pub const SETTLE: Duration = Duration::from_secs(1);

/// Woken each time a call ends.
static CALL_ENDED: Notify = Notify::const_new();

/// Says that a call (a command, a transfer) ended; the next trim waits for [`SETTLE`]
/// after the last one.
pub fn call_ended() {
    CALL_ENDED.notify_one();
}

/// Runs for the agent's life: after calls end and [`SETTLE`] passes with no other
/// call ending, returns every free page to the kernel.
pub async fn trim_when_idle() {
    loop {
        CALL_ENDED.notified().await;
        while tokio::time::timeout(SETTLE, CALL_ENDED.notified()).await.is_ok() {}
        // SAFETY: mi_collect may be called from any thread at any time.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
}
