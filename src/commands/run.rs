//! `eligibility run`: the job on an event log (file mode) or on its configured sources.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;

use crate::cli::RunArgs;
use crate::cluster::ClusterOptions;
use crate::job::{self, Job, JobReport};
use crate::metrics::JobMetrics;
use crate::sink::file_outputs::FirstWorkerSinks;
use crate::source::event_log::{EventLogFactory, EventLogInput};

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let Some(input) = &args.input else {
        bail!("`run` without --input reads Kafka sources from --config, which this build does not support yet");
    };
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let cluster = ClusterOptions::from(&args.cluster);
    // Fail on a bad layout before any file is created.
    cluster.timely_config()?;
    let metrics = Arc::new(JobMetrics::default());
    let sinks =
        FirstWorkerSinks::jsonl_files(cluster.process, &args.output, &args.dead_letter, &metrics)?;
    let job = Job {
        source: Arc::new(EventLogFactory {
            input: EventLogInput::Path(input.clone()),
            batch_size: args.batch_size,
        }),
        sinks: Arc::new(sinks),
        metrics,
        max_inflight_times: args.max_inflight_batches.max(1),
        progress_every: (args.progress_secs > 0.0)
            .then(|| Duration::from_secs_f64(args.progress_secs)),
        cluster: cluster.clone(),
    };
    let report = job::run(job)?;
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
