//! Saves the progress record on a thread of its own, retrying with backoff.
//!
//! A save may wait on the network (the record lives in Elasticsearch); doing it on the
//! worker thread would stall the whole dataflow for an outage, and failing the job on one
//! refused save would turn a transient outage into a restart. The worker hands over the
//! newest record and carries on; this thread saves the newest record it has, retries
//! failures with a growing pause (each retry takes the newest record, which supersedes the
//! older: offsets only grow), and reports the `progress` component unhealthy meanwhile.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{ProgressRecord, ProgressStore};
use crate::metrics::Metrics;
use crate::retry::Backoff;

/// The health component of the progress record.
pub const HEALTH_COMPONENT: &str = "progress";

const BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(10),
};

#[derive(Default)]
struct State {
    /// The newest record handed over and not yet taken for a save.
    wanted: Option<ProgressRecord>,
    /// A save is under way (or waiting for its retry).
    busy: bool,
    /// Saved records not yet reported to the worker.
    saved: Vec<ProgressRecord>,
    stop: bool,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

pub struct Saver {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

impl Saver {
    pub fn start(store: Box<dyn ProgressStore>, metrics: Arc<Metrics>) -> std::io::Result<Self> {
        let shared: Shared = Arc::default();
        let thread = std::thread::Builder::new().name("progress-saver".into()).spawn({
            let shared = shared.clone();
            move || save_loop(store, &shared, &metrics)
        })?;
        Ok(Saver {
            shared,
            thread: Some(thread),
        })
    }

    /// Hands over `record` to be saved; replaces a record not yet taken.
    pub fn save(&self, record: ProgressRecord) {
        let (state, wake) = &*self.shared;
        state.lock().expect("poisoned").wanted = Some(record);
        wake.notify_all();
    }

    /// The records saved since the last call, oldest first.
    pub fn take_saved(&self) -> Vec<ProgressRecord> {
        std::mem::take(&mut self.shared.0.lock().expect("poisoned").saved)
    }

    /// Whether every record handed over has been saved.
    pub fn idle(&self) -> bool {
        let state = self.shared.0.lock().expect("poisoned");
        state.wanted.is_none() && !state.busy
    }

    /// Whether the saving thread has died (it only does by panicking).
    pub fn died(&self) -> bool {
        self.thread.as_ref().is_some_and(JoinHandle::is_finished)
    }
}

impl Drop for Saver {
    fn drop(&mut self) {
        let (state, wake) = &*self.shared;
        state.lock().expect("poisoned").stop = true;
        wake.notify_all();
        // Not joined: a save stuck on the network must not hold up the process's exit.
    }
}

fn save_loop(mut store: Box<dyn ProgressStore>, shared: &Shared, metrics: &Metrics) {
    let (state, wake) = &**shared;
    let mut rng: rand_chacha::ChaCha8Rng = rand::SeedableRng::from_os_rng();
    let mut failures = 0u32;
    loop {
        let record = {
            let mut guard = state.lock().expect("poisoned");
            while guard.wanted.is_none() && !guard.stop {
                guard = wake.wait(guard).expect("poisoned");
            }
            if guard.stop {
                return;
            }
            guard.busy = true;
            guard.wanted.take().expect("checked above")
        };
        match store.save(&record) {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(time = record.time, "progress record saved again");
                }
                failures = 0;
                metrics.health.set_healthy(HEALTH_COMPONENT);
                let mut guard = state.lock().expect("poisoned");
                guard.saved.push(record);
                guard.busy = false;
            }
            Err(error) => {
                failures += 1;
                let pause = BACKOFF.delay(failures, &mut rng);
                let reason = format!("cannot save the progress record: {error:#}");
                tracing::warn!(reason = %reason, retry_in_ms = pause.as_millis() as u64, "progress record not saved; retrying");
                metrics.health.set_unhealthy(HEALTH_COMPONENT, reason);
                let mut guard = state.lock().expect("poisoned");
                // A newer record handed over meanwhile supersedes this one.
                guard.wanted.get_or_insert(record);
                let (guard, _) = wake
                    .wait_timeout_while(guard, pause, |state| !state.stop)
                    .expect("poisoned");
                if guard.stop {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    use crate::progress::ProgressError;

    /// Fails its first `failures` saves.
    struct Flaky {
        failures: usize,
        saved: Arc<Mutex<Vec<ProgressRecord>>>,
    }

    impl ProgressStore for Flaky {
        fn load(&mut self) -> Result<Option<ProgressRecord>, ProgressError> {
            Ok(None)
        }

        fn save(&mut self, record: &ProgressRecord) -> Result<(), ProgressError> {
            if self.failures > 0 {
                self.failures -= 1;
                return Err(ProgressError::Store("cluster_block_exception".into()));
            }
            self.saved.lock().unwrap().push(record.clone());
            Ok(())
        }
    }

    #[test]
    fn failed_saves_are_retried_and_the_newest_record_wins() {
        let saved = Arc::new(Mutex::new(Vec::new()));
        let metrics = Arc::new(Metrics::new());
        let saver = Saver::start(
            Box::new(Flaky {
                failures: 3,
                saved: saved.clone(),
            }),
            metrics.clone(),
        )
        .unwrap();
        let record = |time| ProgressRecord {
            time,
            ..ProgressRecord::default()
        };
        saver.save(record(1));
        saver.save(record(2));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !saver.idle() || saved.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "never saved");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(saved.lock().unwrap().last(), Some(&record(2)));
        assert_eq!(saver.take_saved().last(), Some(&record(2)));
        assert!(metrics.health.report().0, "healthy again after the save");
    }
}
