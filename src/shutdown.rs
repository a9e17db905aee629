//! Graceful shutdown on SIGTERM and SIGINT: stop reading, drain, flush, commit, exit.
//!
//! Kubernetes sends SIGTERM before it kills a pod; finishing the batches in flight and
//! saving the progress record then saves the next start from redoing them. The drain is
//! bounded: a backlog or an unreachable sink could make it outlast the pod's grace period
//! and end in a SIGKILL, so a watchdog exits the process once `grace` has passed. That is
//! safe at any moment: the progress record only ever holds acknowledged offsets, and each
//! save replaces it whole (a renamed file, one indexed document).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

static REQUESTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The exit status of a stop cut short by the bound (128 + SIGTERM, as for a killed process).
pub const CUT_SHORT_STATUS: i32 = 143;

/// Installs the signal handlers and the watchdog once; later calls do nothing.
pub fn install(grace: Duration) -> anyhow::Result<()> {
    let mut first = false;
    let flag = REQUESTED.get_or_init(|| {
        first = true;
        Arc::new(AtomicBool::new(false))
    });
    if !first {
        return Ok(());
    }
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, flag.clone())?;
    }
    let flag = flag.clone();
    std::thread::Builder::new()
        .name("shutdown-watchdog".into())
        .spawn(move || watchdog(&flag, grace))?;
    Ok(())
}

fn watchdog(flag: &AtomicBool, grace: Duration) {
    while !flag.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "shutdown requested; stopping within the grace period"
    );
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    tracing::warn!(
        grace_ms = grace.as_millis() as u64,
        "the graceful stop did not finish in time; exiting now (the progress record holds the last acknowledged offsets, the next start redoes the rest)"
    );
    std::process::exit(CUT_SHORT_STATUS);
}

/// Whether a shutdown was requested.
pub fn requested() -> bool {
    REQUESTED.get().is_some_and(|flag| flag.load(Ordering::Relaxed))
}
