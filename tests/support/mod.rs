//! Shared helpers of the integration tests.
#![allow(dead_code)]

pub mod dashboard_plot;
pub mod kafka;
pub mod prometheus;
pub mod query_service;
pub mod search;
pub mod search_node;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use dataflows::model::{PairChange, Time};
use eligibility::dead_letter::DeadLetter;
use eligibility::sink::contract::{Sink, SinkError};

/// The built `eligibility` binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_eligibility"))
}

/// Runs the binary with `args`, failing the test with its stderr if it fails.
pub fn run_ok(args: &[&str]) -> Output {
    let output = Command::new(binary())
        .args(args)
        .output()
        .expect("cannot start the binary");
    assert!(
        output.status.success(),
        "eligibility {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs `scripts/<service>.sh <command>` (a real broker or node), failing the test if it fails.
pub fn service_script(service: &str, command: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("scripts/{service}.sh"));
    let status = Command::new("bash")
        .arg(script)
        .arg(command)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "scripts/{service}.sh {command} failed");
}

/// A loopback port that was free a moment ago, with the next one free too (process 0 of
/// a cluster holds its rendezvous on its peer port + 1).
pub fn free_port_pair() -> u16 {
    loop {
        let port = free_port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Records a [`MemorySink`] was given, with their times.
pub type Collected<R> = Arc<Mutex<Vec<(Time, R)>>>;

/// A sink that keeps what it is given, for tests that look at the records themselves.
pub struct MemorySink<R> {
    pub records: Collected<R>,
}

impl<R> MemorySink<R> {
    pub fn new() -> (Self, Collected<R>) {
        let records = Arc::new(Mutex::new(Vec::new()));
        (
            MemorySink {
                records: records.clone(),
            },
            records,
        )
    }
}

impl<R: Clone + Send> Sink<R> for MemorySink<R> {
    fn write(&mut self, time: Time, records: &[R]) -> Result<(), SinkError> {
        let mut held = self.records.lock().unwrap();
        held.extend(records.iter().cloned().map(|record| (time, record)));
        Ok(())
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        Ok(upper)
    }
}

/// Runs the job in this process on an in-memory event log and returns what it wrote.
pub fn run_in_memory(log: Vec<u8>, batch_size: u64, workers: usize) -> (Vec<PairChange>, Vec<DeadLetter>) {
    run_in_memory_from(log, batch_size, workers, None)
}

/// [`run_in_memory`] with the job's `live_from`: the times before it are a quiet rebuild
/// into the (empty) memory sink, whose result comes out at `live_from`.
pub fn run_in_memory_from(
    log: Vec<u8>,
    batch_size: u64,
    workers: usize,
    live_from: Option<Time>,
) -> (Vec<PairChange>, Vec<DeadLetter>) {
    let (changes, letters, _report) = run_in_memory_held(log, batch_size, workers, live_from, Default::default());
    (changes, letters)
}

/// A job of `workers` workers in this process reading `log`, an event log in memory, in
/// batches of `batch_size`, writing `changes` and `letters` on worker 0.
pub fn event_log_job(
    log: Vec<u8>,
    batch_size: u64,
    workers: usize,
    live_from: Option<Time>,
    changes: eligibility::sink::contract::ChangeOutput,
    letters: Box<dyn Sink<DeadLetter>>,
    metrics: Arc<eligibility::metrics::Metrics>,
) -> eligibility::job::Job {
    use eligibility::cluster::ClusterOptions;
    use eligibility::job::Job;
    use eligibility::sink::contract::on_first_worker;
    use eligibility::source::event_log::{EventLogFactory, EventLogInput};

    Job {
        cluster: ClusterOptions {
            workers,
            ..ClusterOptions::default()
        },
        source: Arc::new(EventLogFactory {
            input: EventLogInput::Bytes(Arc::new(log)),
            batch_size,
            max_unacknowledged_records: 4 * batch_size,
        }),
        changes: vec![changes],
        dead_letters: on_first_worker(Some(letters)),
        metrics,
        live_from,
        progress: None,
        progress_every: None,
        shutdown_grace: None,
    }
}

/// [`run_in_memory_from`] into a memory sink that holds `held` (read as the state says: a
/// `HeldState::read_beside` comes in when its thread ends), with the job's report.
pub fn run_in_memory_held(
    log: Vec<u8>,
    batch_size: u64,
    workers: usize,
    live_from: Option<Time>,
    held: eligibility::sink::contract::HeldState,
) -> (Vec<PairChange>, Vec<DeadLetter>, eligibility::job::JobReport) {
    use eligibility::job;
    use eligibility::metrics::Metrics;
    use eligibility::sink::contract::ChangeOutput;

    let (changes_sink, changes) = MemorySink::<PairChange>::new();
    let (letters_sink, letters) = MemorySink::<DeadLetter>::new();
    let metrics = Arc::new(Metrics::new());
    let output = ChangeOutput::on_first_worker("memory", Some(Box::new(changes_sink)), held);
    let job = event_log_job(
        log,
        batch_size,
        workers,
        live_from,
        output,
        Box::new(letters_sink),
        metrics.clone(),
    );
    let report = job::run(job).expect("the job failed");
    // What the restart kept waiting shows on the metric as in the report.
    assert_eq!(
        metrics.reconcile_kept_waiting.get(),
        report.rebuilt_pairs_kept_waiting as i64,
        "eligibility_reconcile_kept_waiting_pairs"
    );
    let changes = changes
        .lock()
        .unwrap()
        .iter()
        .map(|(_, change)| change.clone())
        .collect();
    let letters = letters
        .lock()
        .unwrap()
        .iter()
        .map(|(_, letter)| letter.clone())
        .collect();
    (changes, letters, report)
}
