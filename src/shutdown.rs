//! Graceful shutdown on SIGTERM and SIGINT: stop reading, drain, flush, commit, exit.
//!
//! Kubernetes sends SIGTERM before it kills a pod; finishing the batches in flight and
//! saving the progress record then saves the next start from redoing them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static REQUESTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the signal handlers once; later calls do nothing.
pub fn install() -> anyhow::Result<()> {
    let flag = REQUESTED.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, flag.clone())?;
    }
    Ok(())
}

/// Whether a shutdown was requested.
pub fn requested() -> bool {
    REQUESTED.get().is_some_and(|flag| flag.load(Ordering::Relaxed))
}
