//! A worker that fails stops the job: the other workers do not wait for it for good.
//!
//! Timely steps a worker's dataflows until they complete once the worker's closure returns,
//! and with a failed worker they never complete: the job hung instead of failing (the
//! property suite met it when a worker panicked at a rebuild's end). A sink that refuses every
//! write fails worker 0, whose sink it is, while worker 1 still holds its share of the times.

mod support;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use dataflows::model::{PairChange, Time};
use eligibility::dead_letter::DeadLetter;
use eligibility::job::{self, JobError};
use eligibility::metrics::Metrics;
use eligibility::sink::contract::{ChangeOutput, Sink, SinkError};
use support::{event_log_job, path_str, run_ok, MemorySink};

/// Refuses every write for good.
struct RefusingSink;

impl Sink<PairChange> for RefusingSink {
    fn write(&mut self, _time: Time, _records: &[PairChange]) -> Result<(), SinkError> {
        Err(SinkError::Destination {
            sink: "refusing",
            reason: "refuses every write".into(),
        })
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        Ok(upper)
    }
}

#[test]
fn a_failed_sink_on_one_worker_fails_the_job_instead_of_hanging_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    run_ok(&[
        "generate",
        "--products",
        "2000",
        "--sellers",
        "40",
        "--campaigns",
        "10",
        "--updates",
        "2000",
        "--seed",
        "3",
        "--output",
        path_str(&events),
    ]);
    let log = std::fs::read(&events).unwrap();
    let (letters_sink, _letters) = MemorySink::<DeadLetter>::new();
    let refusing = ChangeOutput::on_first_worker("refusing", Some(Box::new(RefusingSink)), Default::default());
    let job = event_log_job(
        log,
        100,
        2,
        None,
        refusing,
        Box::new(letters_sink),
        Arc::new(Metrics::new()),
    );
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(job::run(job));
    });
    let outcome = outcome
        .recv_timeout(Duration::from_secs(60))
        .expect("the job ended within a minute of its sink failing");
    let error = outcome.expect_err("a sink that refuses every write fails the job");
    assert!(
        !matches!(error, JobError::AnotherWorkerFailed),
        "the failing worker's own error is reported: {error}"
    );
    assert!(error.to_string().contains("refuses every write"), "{error}");
}
