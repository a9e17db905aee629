//! The contract between the job and its sinks: what a sink does, what a run needs to open
//! one on each worker, and how its errors look.
//!
//! A sink receives the records of each completed logical time, in order, and reports the
//! frontier below which everything it received is durable. Each kind of sink (JSONL,
//! Elasticsearch, Couchbase, dead letters) is one factory that builds a [`ChangeOutput`]
//! or an [`OpenSink`] behind this contract; the job only wires them.

use std::sync::Mutex;

use dataflows::model::{PairChange, Time};

use super::auth::AuthError;
use super::tls::TlsError;
use crate::dead_letter::DeadLetter;

/// Why a sink cannot go on. Temporary failures are retried inside the sink; these end the run.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{sink}: {reason}")]
    Destination { sink: &'static str, reason: String },
    #[error("records were routed to a worker that has no {0}")]
    Misrouted(String),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// A setting the sink cannot work with.
    #[error("{0}")]
    Config(String),
    /// What the sink holds could not be read at start-up.
    #[error("cannot read what {sink} holds: {reason}")]
    HeldUnreadable { sink: String, reason: String },
}

impl SinkError {
    /// The destination did not become ready before the job gave up (a shutdown).
    pub fn unavailable(sink: &'static str, error: anyhow::Error) -> Self {
        SinkError::Destination {
            sink,
            reason: format!("{error:#}"),
        }
    }

    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SinkError {
        let what = what.into();
        move |source| SinkError::Io { what, source }
    }
}

/// A destination for the records of completed times.
pub trait Sink<R>: Send {
    /// Takes the records of one completed time, sorted; may buffer them. A large time comes
    /// in several calls, each continuing the order of the one before.
    fn write(&mut self, time: Time, records: &[R]) -> Result<(), SinkError>;

    /// Every time below `upper` (every time, if `None`) has been written. Makes progress on
    /// outstanding work and returns the frontier below which all writes are acknowledged
    /// (`None`: all of them).
    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError>;

    /// Records the destination refused for good since the last call, as dead letters at
    /// their times. Called after `flush`; a rejected record counts as acknowledged.
    fn take_rejected(&mut self) -> Vec<(Time, DeadLetter)> {
        Vec::new()
    }
}

/// Which worker writes a pair's changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Worker 0 writes everything (file outputs, which process 0 owns).
    FirstWorker,
    /// Each worker writes the pairs that hash to it (parallel sinks).
    ByPair,
}

/// The pairs a sink holds: what a resumed run reconciles with (32 bytes a pair, each
/// campaign's id once).
pub type HeldPairs = dataflows::operators::reconcile::Held;

/// Gathers [`HeldPairs`] from a sink's writes in order.
pub use dataflows::operators::reconcile::HeldFold;

/// What a sink holds, as a resumed run gets it: read already, or still being read on a
/// thread of its own while the rebuild goes on (a change log of 10M pairs takes seconds to
/// fold, which the rebuild need not wait for: only the reconcile at `live_from` does).
pub enum HeldState {
    Ready(HeldPairs),
    Reading(std::thread::JoinHandle<Result<HeldPairs, SinkError>>),
}

impl HeldState {
    /// Reads what a sink holds with `read` on a thread of its own, named so that per-thread
    /// CPU (`top -H`, `/proc`) tells it from the workers.
    pub fn read_beside(read: impl FnOnce() -> Result<HeldPairs, SinkError> + Send + 'static) -> Self {
        let reading = std::thread::Builder::new()
            .name("held-read".into())
            .spawn(read)
            // As `std::thread::spawn` does: no thread to be had is not a state to run on in.
            .expect("a thread to read the held pairs");
        HeldState::Reading(reading)
    }

    /// `f` applied to the held pairs, once they are read.
    pub fn map(self, f: impl FnOnce(HeldPairs) -> HeldPairs + Send + 'static) -> Self {
        match self {
            HeldState::Ready(held) => HeldState::Ready(f(held)),
            HeldState::Reading(reading) => HeldState::read_beside(move || Ok(f(join(reading)?))),
        }
    }

    /// The held pairs if read by now, else the state back (the worker asks again as it steps).
    pub fn take(self) -> Result<Result<HeldPairs, HeldState>, SinkError> {
        match self {
            HeldState::Ready(held) => Ok(Ok(held)),
            HeldState::Reading(reading) if reading.is_finished() => join(reading).map(Ok),
            reading => Ok(Err(reading)),
        }
    }
}

impl Default for HeldState {
    fn default() -> Self {
        HeldState::Ready(HeldPairs::default())
    }
}

fn join(reading: std::thread::JoinHandle<Result<HeldPairs, SinkError>>) -> Result<HeldPairs, SinkError> {
    reading.join().unwrap_or_else(|_| {
        Err(SinkError::HeldUnreadable {
            sink: "a sink".into(),
            reason: "the reading thread panicked".into(),
        })
    })
}

/// Opens the sink of a worker, or `None` on a worker without one.
pub type OpenSink<R> = Box<dyn Fn(usize) -> Result<Option<Box<dyn Sink<R>>>, SinkError> + Send + Sync>;

/// One destination of the pair changes. With several, each gets its own reconciliation
/// and a time is acknowledged once every one of them has acknowledged it.
pub struct ChangeOutput {
    pub name: String,
    pub route: Route,
    pub open: OpenSink<PairChange>,
    /// What the sink holds, for a resumed run; fed in by worker 0.
    pub held: Mutex<Option<HeldState>>,
}

impl ChangeOutput {
    /// An output whose one sink, opened already, belongs to worker 0.
    pub fn on_first_worker(name: &str, sink: Option<Box<dyn Sink<PairChange>>>, held: HeldState) -> Self {
        ChangeOutput {
            name: name.to_owned(),
            route: Route::FirstWorker,
            open: on_first_worker(sink),
            held: Mutex::new(Some(held)),
        }
    }
}

/// Opens a sink on worker 0 (and nowhere else) from one already opened.
pub fn on_first_worker<R: 'static>(sink: Option<Box<dyn Sink<R>>>) -> OpenSink<R> {
    let slot = Mutex::new(sink);
    Box::new(move |worker| {
        Ok(if worker == 0 {
            slot.lock().expect("poisoned").take()
        } else {
            None
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use dataflows::model::{PairFigures, PairKey};

    use super::*;

    fn one_pair(stock: u64) -> HeldPairs {
        let pair = PairKey {
            seller_id: 1,
            campaign_id: "c".into(),
        };
        let figures = PairFigures {
            eligible_products: 1,
            eligible_stock: stock,
        };
        [(pair, figures)].into_iter().collect()
    }

    /// Asks `state` until it is read, as the worker does between its steps.
    fn taken(mut state: HeldState) -> Result<HeldPairs, SinkError> {
        loop {
            match state.take()? {
                Ok(held) => return Ok(held),
                Err(reading) => state = reading,
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn held_pairs_read_beside_are_taken_once_read() {
        let (release, released) = mpsc::channel::<()>();
        let reading = HeldState::read_beside(move || {
            released.recv().expect("released");
            Ok(one_pair(3))
        })
        .map(|mut held| {
            held.forget_figures();
            held
        });
        // Not read yet: the state comes back, to be asked again later.
        let reading = match reading.take().expect("no error") {
            Err(state) => state,
            Ok(_) => panic!("taken before it was read"),
        };
        release.send(()).expect("reader waits");
        let held = taken(reading).expect("no error");
        assert_eq!(held.len(), 1);
        let (_, figures) = held.pairs().next().expect("one pair");
        assert_eq!(figures.eligible_stock, 0, "mapped once read");
    }

    #[test]
    fn a_failed_read_is_a_sink_error() {
        let failing = HeldState::read_beside(|| {
            Err(SinkError::HeldUnreadable {
                sink: "jsonl".into(),
                reason: "not JSON".into(),
            })
        });
        let error = taken(failing).expect_err("an error");
        assert!(error.to_string().contains("not JSON"), "{error}");
        assert!(matches!(HeldState::Ready(one_pair(1)).take(), Ok(Ok(_))));
    }
}
