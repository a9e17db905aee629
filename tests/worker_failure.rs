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
use eligibility::cluster::ClusterOptions;
use eligibility::job::{self, Job, JobError};
use eligibility::metrics::Metrics;
use eligibility::sink::contract::{on_first_worker, ChangeOutput, Sink, SinkError};
use eligibility::source::event_log::{EventLogFactory, EventLogInput};
use support::{path_str, run_ok, MemorySink};

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
    let (letters_sink, _letters) = MemorySink::<eligibility::dead_letter::DeadLetter>::new();
    let job = Job {
        cluster: ClusterOptions {
            workers: 2,
            ..ClusterOptions::default()
        },
        source: Arc::new(EventLogFactory {
            input: EventLogInput::Bytes(Arc::new(log)),
            batch_size: 100,
            max_unacknowledged_records: 400,
        }),
        changes: vec![ChangeOutput::on_first_worker(
            "refusing",
            Some(Box::new(RefusingSink)),
            Default::default(),
        )],
        dead_letters: on_first_worker(Some(Box::new(letters_sink))),
        metrics: Arc::new(Metrics::new()),
        live_from: None,
        progress: None,
        progress_every: None,
        shutdown_grace: None,
    };
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
