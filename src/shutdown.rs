//! Graceful shutdown on SIGTERM and SIGINT: stop reading, drain, flush, commit, exit.
//!
//! Kubernetes sends SIGTERM before it kills a pod; finishing the batches in flight and
//! saving the progress record then saves the next start from redoing them. The drain is
//! bounded: a backlog or an unreachable sink could make it outlast the pod's grace period
//! and end in a SIGKILL, so the job gives up once `grace` has passed ([`GraceWatch`]) and
//! the process exits with [`CUT_SHORT_STATUS`]. That is safe at any moment: the progress
//! record only ever holds acknowledged offsets, and each save replaces it whole (a renamed
//! file, one indexed document).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

static REQUESTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The exit status of a stop cut short by the bound (128 + SIGTERM, as for a killed process).
pub const CUT_SHORT_STATUS: u8 = 143;

/// Installs the signal handlers once; later calls do nothing.
pub fn install() -> std::io::Result<()> {
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
    Ok(())
}

/// Whether a shutdown was requested.
pub fn requested() -> bool {
    REQUESTED.get().is_some_and(|flag| flag.load(Ordering::Relaxed))
}

/// Measures a requested stop against its grace period: the job checks it while it drains,
/// and gives up (an error for the edge to exit with) once the grace has passed.
pub struct GraceWatch {
    grace: Duration,
    since: Option<Instant>,
}

impl GraceWatch {
    pub fn new(grace: Duration) -> Self {
        GraceWatch { grace, since: None }
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Whether a requested stop has outlasted its grace period.
    pub fn overrun(&mut self) -> bool {
        if !requested() {
            return false;
        }
        let since = *self.since.get_or_insert_with(|| {
            tracing::info!(
                grace_ms = self.grace.as_millis() as u64,
                "shutdown requested; stopping within the grace period"
            );
            Instant::now()
        });
        since.elapsed() >= self.grace
    }
}
