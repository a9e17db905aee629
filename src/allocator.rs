//! The allocator's tuning for the process's layout.
//!
//! A process of two or more workers that rebuilds into an exact sink (a deploy's restart)
//! peaked at ~1.97 GiB at 10M products in most runs and at 2.4-3.3 GiB in about one of
//! three: memory freed by one worker and reused by another fragments mimalloc's arenas, and
//! it reserves fresh ones. Purging freed pages after 100 ms instead of mimalloc's 1 s kept
//! every such run at ~1.95 GiB (15 of 15) without costing a 2-worker rebuild time; a
//! 1-worker rebuild lost 2-4 s to it, and did not need it. `MIMALLOC_PURGE_DELAY` in the
//! environment still decides when it is set.

use std::ffi::c_long;

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};

/// `mi_option_purge_delay` in mimalloc v3's option enum (its bindings stop before it).
const PURGE_DELAY: mi_option_t = 15;
/// mimalloc v3's default purge delay, ms: what the option reads when nothing set it.
const DEFAULT_PURGE_DELAY: c_long = 1000;
/// The purge delay for processes of two or more workers, ms.
const MULTI_WORKER_PURGE_DELAY: c_long = 100;

/// What [`tune_for_workers`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PurgeDelay {
    /// Set to this many milliseconds.
    Set(c_long),
    /// Left alone: one worker, or the environment names it.
    Kept,
    /// Left alone: the option did not read mimalloc's default, so the index may name
    /// another option (a mimalloc upgrade); better untuned than mistuned.
    Unrecognised(c_long),
}

/// Shortens the allocator's purge delay for a process of `workers` ≥ 2 workers, unless
/// `MIMALLOC_PURGE_DELAY` (or its old name `MIMALLOC_RESET_DELAY`) is set. Call it before
/// the workers start.
pub fn tune_for_workers(workers: usize) -> PurgeDelay {
    let named = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if workers < 2 || named {
        return PurgeDelay::Kept;
    }
    // SAFETY: reading and setting an option is thread-safe in mimalloc; the index is
    // checked against the option's documented default before anything is set.
    unsafe {
        let current = mi_option_get(PURGE_DELAY);
        if current != DEFAULT_PURGE_DELAY {
            return PurgeDelay::Unrecognised(current);
        }
        mi_option_set(PURGE_DELAY, MULTI_WORKER_PURGE_DELAY);
    }
    PurgeDelay::Set(MULTI_WORKER_PURGE_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for the process-wide option: tests run in parallel threads.
    #[test]
    fn two_workers_shorten_the_purge_delay_and_one_keeps_it() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() || std::env::var_os("MIMALLOC_RESET_DELAY").is_some() {
            return;
        }
        // SAFETY: as in `tune_for_workers`.
        let read = || unsafe { mi_option_get(PURGE_DELAY) };
        assert_eq!(read(), DEFAULT_PURGE_DELAY, "the index names the purge delay");
        assert_eq!(tune_for_workers(1), PurgeDelay::Kept);
        assert_eq!(read(), DEFAULT_PURGE_DELAY);
        assert_eq!(tune_for_workers(2), PurgeDelay::Set(MULTI_WORKER_PURGE_DELAY));
        assert_eq!(read(), MULTI_WORKER_PURGE_DELAY);
        // Set once: a second call sees a value that is no longer the default.
        assert_eq!(tune_for_workers(2), PurgeDelay::Unrecognised(MULTI_WORKER_PURGE_DELAY));
    }
}
