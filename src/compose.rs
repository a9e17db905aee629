//! The composition root: turns a configuration into the job's source, sinks and progress
//! store. Every policy (which store, which dead-letter sink, how topics are created, how
//! often files sync) comes from the config, with defaults documented in
//! docs/configuration.md; the commands only parse arguments and report.
//!
//! Start-up work, at the binary's edge: its errors are `anyhow`, with the typed errors of
//! each contract (`SinkError`, `SourceError`, `ProgressError`) inside them.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::change_log;
use crate::cluster::ClusterOptions;
use crate::config::JobConfig;
use crate::dead_letter::DeadLetter;
use crate::job::{Job, ProgressCommit};
use crate::metrics::Metrics;
use crate::progress::file::FileProgressStore;
use crate::progress::ProgressStore;
use crate::sink::contract::{on_first_worker, ChangeOutput, HeldPairs, HeldState, Sink, SinkError};
use crate::sink::elasticsearch::progress::ElasticsearchProgressStore;
use crate::sink::file_outputs::jsonl_files;
use crate::sink::jsonl::{Durability, JsonlChangeSink, JsonlDeadLetterSink, JsonlWriter};
use crate::sink::kafka_dead_letter::KafkaDeadLetterSink;
use crate::sink::written_before::SkipWrittenDeadLetters;
use crate::source::event_log::{EventLogFactory, EventLogInput};
use crate::source::kafka::client::{admin_config, producer_config};
use crate::source::kafka::clock::live_time_now;
use crate::source::kafka::start::{self, StartFrom};
use crate::source::kafka::topics::{ensure_topics, TopicSpec};
use crate::source::kafka::{KafkaSourceFactory, HEALTH_COMPONENT};

/// File mode: one event log in; one change log and one dead-letter log out, on process 0.
pub struct EventLogRun<'a> {
    pub input: EventLogInput,
    pub batch_size: u64,
    pub max_unacknowledged_records: u64,
    pub changes: &'a Path,
    pub dead_letters: &'a Path,
}

pub fn event_log_job(
    run: EventLogRun,
    cluster: ClusterOptions,
    metrics: Arc<Metrics>,
    progress_every: Option<Duration>,
) -> anyhow::Result<Job> {
    let (changes, dead_letters) = jsonl_files(cluster.process, run.changes, run.dead_letters, &metrics)?;
    Ok(Job {
        source: Arc::new(EventLogFactory {
            input: run.input,
            batch_size: run.batch_size,
            max_unacknowledged_records: run.max_unacknowledged_records,
        }),
        changes: vec![changes],
        dead_letters,
        metrics,
        progress_every,
        live_from: None,
        progress: None,
        shutdown_grace: None,
        cluster,
    })
}

/// Kafka mode: what the run reads from and writes to, and the runtime its sinks' requests
/// run on (kept alive for the run, shut down after it).
pub struct KafkaRun {
    pub job: Job,
    pub runtime: tokio::runtime::Runtime,
}

/// Rebuild from the compacted topics, reconcile with what the sinks hold, then follow.
pub fn kafka_job(
    config: &JobConfig,
    from: &StartFrom,
    stop_at_end: bool,
    cluster: ClusterOptions,
    metrics: Arc<Metrics>,
    progress_every: Option<Duration>,
) -> anyhow::Result<KafkaRun> {
    let first_process = cluster.process == 0;
    // Requests of the search and key-value sinks run here, off the timely workers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.sinks.io_threads)
        .thread_name("sink-io")
        .enable_all()
        .build()
        .context("cannot start the sink runtime")?;
    let handle = runtime.handle().clone();

    let mut store = progress_store(config, first_process, &handle, &metrics)?;
    let committed = match store.as_mut() {
        Some(store) => store.load()?,
        None => None,
    };
    if let Some(record) = &committed {
        tracing::info!(
            time = record.time,
            partitions = record.offsets.len(),
            "found a progress record"
        );
    }
    metrics.health.set_unhealthy(HEALTH_COMPONENT, "connecting to Kafka");
    let plan = start::plan(&config.kafka, from, committed.as_ref())?;
    metrics.health.set_healthy(HEALTH_COMPONENT);
    tracing::info!(partitions = plan.partitions.len(), ?from, "start plan ready");

    // Every live time, and so every version written, lies above what any sink holds.
    let mut proposal = live_time_now().max(committed.as_ref().map_or(0, |record| record.time + 1));
    let mut changes = Vec::new();
    if config.sinks.jsonl.is_some() {
        changes.push(jsonl_output(config, &metrics, first_process)?);
    }
    if let Some(elasticsearch) = &config.sinks.elasticsearch {
        let (output, max_version) = crate::sink::elasticsearch::output(
            elasticsearch,
            &metrics,
            &handle,
            first_process,
            committed.as_ref().map(|record| record.time),
        )?;
        proposal = proposal.max(max_version + 1);
        changes.push(output);
    }
    if let Some(couchbase) = &config.sinks.couchbase {
        changes.push(crate::sink::couchbase::output(
            couchbase,
            &metrics,
            &handle,
            first_process,
        )?);
    }
    if matches!(from, StartFrom::Earliest) {
        for output in &mut changes {
            let held = output.held.get_mut().expect("poisoned").take().unwrap_or_default();
            *output.held.get_mut().expect("poisoned") = Some(held.map(forgotten));
        }
    }
    let letters = match first_process {
        true => {
            let letters = dead_letter_sink(config, &metrics)?;
            let skip: Box<dyn Sink<DeadLetter>> = Box::new(SkipWrittenDeadLetters::new(
                letters,
                plan.dead_letters_written_below.clone(),
            ));
            Some(skip)
        }
        false => None,
    };

    let job = Job {
        cluster,
        source: Arc::new(KafkaSourceFactory {
            kafka: config.kafka.clone(),
            batching: config.batching.clone(),
            plan,
            metrics: metrics.clone(),
            stop_at_end,
            siblings: Default::default(),
        }),
        changes,
        dead_letters: on_first_worker(letters),
        metrics,
        progress_every,
        live_from: Some(proposal),
        progress: Some(ProgressCommit {
            store: Mutex::new(store),
            interval: Duration::from_millis(config.progress.interval_ms),
        }),
        shutdown_grace: Some(Duration::from_millis(config.shutdown.grace_ms)),
    };
    Ok(KafkaRun { job, runtime })
}

/// Process 0 commits the progress record: beside the pairs in Elasticsearch when that sink
/// is configured, else in a file next to the change log.
fn progress_store(
    config: &JobConfig,
    first_process: bool,
    runtime: &tokio::runtime::Handle,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<Box<dyn ProgressStore>>> {
    Ok(match (first_process, &config.sinks.elasticsearch) {
        (false, _) => None,
        (true, Some(elasticsearch)) => {
            let store = ElasticsearchProgressStore::new(elasticsearch, runtime.clone(), metrics.clone())?;
            runtime.block_on(store.ensure_index())?;
            Some(Box::new(store))
        }
        (true, None) => Some(Box::new(FileProgressStore::new(config.progress_path()))),
    })
}

/// `earliest` writes every pair again: forgetting the held figures makes each differ,
/// while held pairs that no longer exist are still deleted.
fn forgotten(mut held: HeldPairs) -> HeldPairs {
    held.forget_figures();
    held
}

/// The JSONL change log of a Kafka run: appended to, reconciled with what it holds.
fn jsonl_output(config: &JobConfig, metrics: &Arc<Metrics>, first_process: bool) -> anyhow::Result<ChangeOutput> {
    let jsonl = config.sinks.jsonl.as_ref().context("no change sink is configured")?;
    if !first_process {
        return Ok(ChangeOutput::on_first_worker("jsonl", None, HeldState::default()));
    }
    // Cuts a partial last line off first: the writer below appends after it.
    change_log::drop_partial_line(&jsonl.path)?;
    let (path, live) = (
        jsonl.path.clone(),
        metrics.pairs_live.get_or_create(&Metrics::sink("jsonl")).clone(),
    );
    let held = HeldState::read_beside(move || {
        let held = change_log::fold_log(&path).map_err(|error| SinkError::HeldUnreadable {
            sink: "jsonl".into(),
            reason: format!("{error:#}"),
        })?;
        tracing::info!(pairs = held.len(), path = %path.display(), "the change log holds these pairs");
        live.inc_by(held.len() as i64);
        Ok(held)
    });
    let durability = Durability::Synced {
        interval: Duration::from_millis(jsonl.sync_interval_ms),
    };
    let writer = JsonlWriter::append(&jsonl.path, durability)?;
    Ok(ChangeOutput::on_first_worker(
        "jsonl",
        Some(Box::new(JsonlChangeSink::new(writer, metrics.clone()))),
        held,
    ))
}

/// The dead letters of a Kafka run: to a topic when one is configured, else to a file.
fn dead_letter_sink(config: &JobConfig, metrics: &Arc<Metrics>) -> anyhow::Result<Box<dyn Sink<DeadLetter>>> {
    let dead_letter = &config.dead_letter;
    match &dead_letter.topic {
        Some(topic) => {
            let properties = config.kafka.client_properties()?;
            ensure_topics(
                &admin_config(&config.kafka, &properties, "eligibility-admin"),
                &[TopicSpec {
                    name: topic,
                    partitions: dead_letter.topic_partitions,
                    replication_factor: dead_letter.topic_replication_factor,
                    compacted: false,
                }],
            )?;
            let producer = producer_config(&config.kafka, &properties, "eligibility-dead-letters");
            Ok(Box::new(KafkaDeadLetterSink::new(
                producer,
                topic.clone(),
                metrics.clone(),
            )?))
        }
        None => {
            let durability = Durability::Synced {
                interval: Duration::from_millis(dead_letter.sync_interval_ms),
            };
            let writer = JsonlWriter::append(&dead_letter.path, durability)?;
            Ok(Box::new(JsonlDeadLetterSink::new(writer, metrics.clone())))
        }
    }
}
