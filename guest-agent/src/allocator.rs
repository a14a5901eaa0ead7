//! The agent's memory allocator: mimalloc, with a small resident set when idle.
//!
//! musl's allocator maps every buffer over 128 KiB fresh from the kernel and unmaps it
//! when freed, so each 1 MiB chunk of a copy cost 256 page faults and an `munmap`.
//! Under software emulation that was most of the agent's CPU per byte: with mimalloc a
//! copy into a TCG VM runs at 55-71% of a raw vsock stream instead of 38-47%
//! (BENCHMARKS.md).
//!
//! The speed comes from reusing freed memory, so it must not go back to the kernel
//! while a transfer runs (purging at once measured no faster than musl); a 1 GiB
//! output flood peaks about 6 MiB above idle (musl: 1.4 MiB), whatever its size, now
//! that one worker both allocates and frees a stream's buffers (25-30 MiB with a
//! worker per CPU). Two things keep an idle agent as small as it was with musl all the
//! same:
//! - no transparent huge pages (the crate's `no_thp` feature): with them, the first
//!   allocations touched 2 MiB pages and an idle agent held 11.5 MiB instead of 4;
//! - once no command or transfer has run for [`SETTLE`], every runtime worker hands
//!   what its heap holds free back to the kernel ([`trim_when_idle`],
//!   [`on_worker_park`]). mimalloc would otherwise do so only when that thread next
//!   allocates, and an idle agent would keep what its last transfer used (20 MiB
//!   after an output flood). Never during one: a transfer trimmed half-way faults its
//!   buffers in again, which halved `atoll cp` into a TCG VM.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How long the agent must have been idle before freed memory is trimmed.
pub const SETTLE: Duration = Duration::from_secs(1);

/// Woken by the first call to end after a trim (or after the trimmer last looked).
static WOKEN: Notify = Notify::const_new();

/// Set when a call ended since the trimmer last looked; only its first setter wakes
/// the trimmer, so a call costs two atomic operations and no thread wakeup.
static DIRTY: AtomicBool = AtomicBool::new(false);

/// Commands and transfers running now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Bumped for each trim; a worker trims its heap when it parks and has not yet trimmed
/// for the latest one.
static TRIMS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last trim this thread did.
    static TRIMMED: Cell<u64> = const { Cell::new(0) };
}

/// Says that a call (a command, a transfer) started: no trim until it ends.
pub fn call_started() {
    RUNNING.fetch_add(1, Ordering::Relaxed);
}

/// Says that a call that [`call_started`] ended; a trim follows once [`SETTLE`] passes
/// with no call running or ending.
pub fn call_ended() {
    RUNNING.fetch_sub(1, Ordering::Relaxed);
    if !DIRTY.swap(true, Ordering::Relaxed) {
        WOKEN.notify_one();
    }
}

/// For the runtime's `on_thread_park`: a worker about to sleep trims its own heap if a
/// trim was asked for since its last one (one atomic load otherwise).
pub fn on_worker_park() {
    let due = TRIMS.load(Ordering::Relaxed);
    TRIMMED.with(|done| {
        if done.get() != due {
            done.set(due);
            // SAFETY: mi_collect may be called from any thread at any time; it
            // collects the calling thread's heap.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}

/// Runs for the agent's life: once calls have ended and a whole [`SETTLE`] passed with
/// none running or ending, asks every worker to trim its heap as it next parks, and
/// gives each worker a task so that it wakes up and does.
pub async fn trim_when_idle() {
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    loop {
        WOKEN.notified().await;
        loop {
            // A call that ends from here on sets the flag again (and wakes the trimmer
            // once more afterwards, which costs one more look at most).
            DIRTY.store(false, Ordering::Relaxed);
            tokio::time::sleep(SETTLE).await;
            if !DIRTY.load(Ordering::Relaxed) && RUNNING.load(Ordering::Relaxed) == 0 {
                break;
            }
        }
        TRIMS.fetch_add(1, Ordering::Relaxed);
        for _ in 0..workers {
            tokio::spawn(tokio::task::yield_now());
        }
    }
}
