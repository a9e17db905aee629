//! `eligibility run`: the job on an event log (file mode) or on its configured sources.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;

use crate::cli::RunArgs;
use crate::cluster::{fingerprint, ClusterOptions};
use crate::compose::{self, EventLogRun, KafkaRun};
use crate::config::JobConfig;
use crate::job::{self, JobReport};
use crate::metrics::Metrics;
use crate::source::event_log::EventLogInput;
use crate::source::kafka::start::StartFrom;

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
    let run = EventLogRun {
        input: EventLogInput::Path(input.clone()),
        batch_size: args.batch_size,
        max_unacknowledged_records: args.max_unacknowledged_records,
        changes: &args.output,
        dead_letters: &args.dead_letter,
    };
    let job = compose::event_log_job(run, cluster.clone(), Arc::new(Metrics::new()), progress_every(args))?;
    let report = job::run(job)?;
    if cluster.process == 0 {
        print_summary(&report, &cluster);
    }
    Ok(())
}

/// Kafka mode: rebuild from the compacted topics, reconcile with the sinks, then follow.
fn run_kafka(args: &RunArgs) -> anyhow::Result<()> {
    let config_path = args.config.as_ref().expect("checked by the caller");
    let (config_text, config) = JobConfig::load(config_path)?;
    let from: StartFrom = args.from.parse()?;
    // Every process must run the same configuration and start the same way.
    let fingerprint = fingerprint(&["kafka", &config_text, &args.from, &args.stop_at_end.to_string()]);
    let cluster = args.cluster.resolve(Some(&config.cluster), fingerprint)?;
    cluster.timely_config()?;
    crate::shutdown::install()?;
    let metrics = Arc::new(Metrics::new());
    if !config.metrics.listen.is_empty() {
        crate::metrics::http::serve(&config.metrics.listen, metrics.clone())?;
    }
    let KafkaRun { job, runtime } = compose::kafka_job(
        &config,
        &from,
        args.stop_at_end,
        cluster.clone(),
        metrics,
        progress_every(args),
    )?;
    let report = job::run(job)?;
    // Whatever requests the sinks still had in flight were acknowledged before `run` returned.
    runtime.shutdown_timeout(Duration::from_secs(5));
    if cluster.process == 0 {
        print_summary(&report, &cluster);
    }
    Ok(())
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
