//! `eligibility run`: the job on an event log (file mode) or on its configured sources.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use dataflows::model::PairFigures;

use crate::change_log;
use crate::cli::RunArgs;
use crate::cluster::{fingerprint, ClusterOptions};
use crate::config::JobConfig;
use crate::dead_letter::DeadLetter;
use crate::job::{self, dead_letters_on_first_worker, ChangeOutput, HeldPairs, Job, JobReport, ProgressCommit};
use crate::metrics::Metrics;
use crate::progress::file::FileProgressStore;
use crate::progress::ProgressStore;
use crate::sink::elasticsearch::progress::ElasticsearchProgressStore;
use crate::sink::file_outputs::jsonl_files;
use crate::sink::jsonl::{Durability, JsonlChangeSink, JsonlDeadLetterSink, JsonlWriter};
use crate::sink::kafka_dead_letter::KafkaDeadLetterSink;
use crate::sink::written_before::SkipWrittenDeadLetters;
use crate::sink::Sink;
use crate::source::event_log::{EventLogFactory, EventLogInput};
use crate::source::kafka::client::{admin_config, producer_config};
use crate::source::kafka::clock::live_time_now;
use crate::source::kafka::start::{self, StartFrom};
use crate::source::kafka::topics::{ensure_topics, TopicSpec};
use crate::source::kafka::KafkaSourceFactory;

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    match (&args.input, &args.config) {
        (Some(_), _) => run_event_log(args),
        (None, Some(_)) => run_kafka(args),
        (None, None) => {
            bail!("give --input (an event log) or --config (a job config with Kafka sources)")
        }
    }
}

fn progress_every(args: &RunArgs) -> Option<Duration> {
    (args.progress_secs > 0.0).then(|| Duration::from_secs_f64(args.progress_secs))
}

/// File mode: one event log in, one change log and one dead-letter log out.
fn run_event_log(args: &RunArgs) -> anyhow::Result<()> {
    let input = args.input.as_ref().expect("checked by the caller");
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let fingerprint = fingerprint(&["event log", &input.display().to_string(), &args.batch_size.to_string()]);
    let cluster = args.cluster.resolve(None, fingerprint)?;
    // Fail on a bad layout before any file is created.
    cluster.timely_config()?;
    let metrics = Arc::new(Metrics::new());
    let (changes, dead_letters) = jsonl_files(cluster.process, &args.output, &args.dead_letter, &metrics)?;
    let job = Job {
        source: Arc::new(EventLogFactory {
            input: EventLogInput::Path(input.clone()),
            batch_size: args.batch_size,
            max_unacknowledged_records: args.max_unacknowledged_records,
        }),
        changes: vec![changes],
        dead_letters,
        metrics,
        progress_every: progress_every(args),
        live_from: None,
        progress: None,
        cluster: cluster.clone(),
    };
    let report = job::run(job)?;
    if cluster.process == 0 {
        print_summary(&report, &cluster);
    }
    Ok(())
}

/// Kafka mode: rebuild from the compacted topics, reconcile with the sinks, then follow.
fn run_kafka(args: &RunArgs) -> anyhow::Result<()> {
    let config_path = args.config.as_ref().expect("checked by the caller");
    let config = JobConfig::load(config_path)?;
    let from: StartFrom = args.from.parse()?;
    // Every process must run the same configuration and start the same way.
    let config_text = std::fs::read_to_string(config_path)?;
    let fingerprint = fingerprint(&["kafka", &config_text, &args.from, &args.stop_at_end.to_string()]);
    let cluster = args.cluster.resolve(Some(&config.cluster), fingerprint)?;
    cluster.timely_config()?;
    crate::shutdown::install(Duration::from_millis(config.shutdown.grace_ms))?;
    let metrics = Arc::new(Metrics::new());
    if !config.metrics.listen.is_empty() {
        crate::metrics::http::serve(&config.metrics.listen, metrics.clone())?;
    }
    let first_process = cluster.process == 0;
    // Requests of the search and key-value sinks run here, off the timely workers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sink-io")
        .enable_all()
        .build()
        .context("cannot start the sink runtime")?;
    let handle = runtime.handle().clone();

    // Process 0 commits the progress record: beside the pairs in Elasticsearch when that
    // sink is configured, else in a file next to the change log.
    let mut store: Option<Box<dyn ProgressStore>> = match (first_process, &config.sinks.elasticsearch) {
        (false, _) => None,
        (true, Some(elasticsearch)) => {
            let store = ElasticsearchProgressStore::new(elasticsearch, handle.clone(), metrics.clone())?;
            handle.block_on(store.ensure_index())?;
            Some(Box::new(store))
        }
        (true, None) => Some(Box::new(FileProgressStore::new(config.progress_path()))),
    };
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
    metrics
        .health
        .set_unhealthy(crate::source::kafka::HEALTH_COMPONENT, "connecting to Kafka");
    let plan = start::plan(&config.kafka, &from, committed.as_ref())?;
    metrics.health.set_healthy(crate::source::kafka::HEALTH_COMPONENT);
    tracing::info!(partitions = plan.partitions.len(), from = %args.from, "start plan ready");

    // Every live time, and so every version written, lies above what any sink holds.
    let mut proposal = live_time_now().max(committed.as_ref().map_or(0, |record| record.time + 1));
    let mut changes = Vec::new();
    if config.sinks.jsonl.is_some() {
        changes.push(jsonl_output(&config, &metrics, first_process)?);
    }
    if let Some(elasticsearch) = &config.sinks.elasticsearch {
        let (output, max_version) =
            crate::sink::elasticsearch::output(elasticsearch, &metrics, &handle, first_process)?;
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
            *output.held.get_mut().expect("poisoned") = Some(forgotten(held));
        }
    }
    let letters = match first_process {
        true => {
            let letters = open_dead_letter_sink(&config, &metrics)?;
            let skip: Box<dyn Sink<DeadLetter>> = Box::new(SkipWrittenDeadLetters::new(
                letters,
                plan.dead_letters_written_below.clone(),
            ));
            Some(skip)
        }
        false => None,
    };

    let job = Job {
        cluster: cluster.clone(),
        source: Arc::new(KafkaSourceFactory {
            kafka: config.kafka.clone(),
            batching: config.batching.clone(),
            plan,
            metrics: metrics.clone(),
            stop_at_end: args.stop_at_end,
        }),
        changes,
        dead_letters: dead_letters_on_first_worker(letters),
        metrics,
        progress_every: progress_every(args),
        live_from: Some(proposal),
        progress: Some(ProgressCommit {
            store: Mutex::new(store),
            interval: Duration::from_millis(config.progress.interval_ms),
        }),
    };
    let report = job::run(job)?;
    // Whatever requests the sinks still had in flight were acknowledged before `run` returned.
    runtime.shutdown_timeout(Duration::from_secs(5));
    if first_process {
        print_summary(&report, &cluster);
    }
    Ok(())
}

/// `earliest` writes every pair again: forgetting the held figures makes each differ,
/// while held pairs that no longer exist are still deleted.
fn forgotten(held: HeldPairs) -> HeldPairs {
    let nothing = PairFigures {
        eligible_products: 0,
        eligible_stock: 0,
    };
    held.into_iter().map(|(pair, _)| (pair, nothing)).collect()
}

/// The JSONL change log of a Kafka run: appended to, reconciled with what it holds.
fn jsonl_output(config: &JobConfig, metrics: &Arc<Metrics>, first_process: bool) -> anyhow::Result<ChangeOutput> {
    let jsonl = config.sinks.jsonl.as_ref().context("no change sink is configured")?;
    if !first_process {
        return Ok(ChangeOutput::on_first_worker("jsonl", None, Vec::new()));
    }
    let held: HeldPairs = change_log::recover(&jsonl.path)?.into_iter().collect();
    tracing::info!(pairs = held.len(), path = %jsonl.path.display(), "the change log holds these pairs");
    metrics
        .pairs_live
        .get_or_create(&Metrics::sink("jsonl"))
        .inc_by(held.len() as i64);
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

fn open_dead_letter_sink(config: &JobConfig, metrics: &Arc<Metrics>) -> anyhow::Result<Box<dyn Sink<DeadLetter>>> {
    let properties = config.kafka.client_properties()?;
    match &config.dead_letter.topic {
        Some(topic) => {
            ensure_topics(
                &admin_config(&config.kafka, &properties, "eligibility-admin"),
                &[TopicSpec {
                    name: topic,
                    partitions: 1,
                    replication_factor: 1,
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
                interval: Duration::from_millis(200),
            };
            let writer = JsonlWriter::append(&config.dead_letter.path, durability)?;
            Ok(Box::new(JsonlDeadLetterSink::new(writer, metrics.clone())))
        }
    }
}

/// The end-of-run summary, on stderr so that `--output -` stays clean.
pub fn print_summary(report: &JobReport, cluster: &ClusterOptions) {
    let seconds = report.elapsed.as_secs_f64();
    let rate = report.records_read as f64 / seconds.max(1e-9);
    eprintln!(
        "done in {seconds:.2} s on {} worker(s) in {} process(es): this process read {} records ({:.0}/s), rejected {}; \
         wrote {} upserts and {} deletes; {} pairs exist; {} dead letters",
        cluster.peers(),
        cluster.processes,
        report.records_read,
        rate,
        report.records_rejected,
        report.pairs_upserted,
        report.pairs_deleted,
        report.pairs_live,
        report.dead_letters_written,
    );
}
