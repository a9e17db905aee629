//! `eligibility generate`: write a synthetic marketplace event log.

use std::io::Write;
use std::time::Instant;

use anyhow::Context;

use crate::cli::GenerateArgs;
use generate::{generate, MarketplaceSpec};

pub fn run(args: &GenerateArgs) -> anyhow::Result<()> {
    let spec = MarketplaceSpec::from(&args.marketplace);
    let started = Instant::now();
    let mut out: Box<dyn Write> = if args.output.as_os_str() == "-" {
        Box::new(std::io::BufWriter::new(std::io::stdout().lock()))
    } else {
        let file =
            std::fs::File::create(&args.output).with_context(|| format!("cannot create {}", args.output.display()))?;
        Box::new(std::io::BufWriter::with_capacity(1 << 20, file))
    };
    let stats = generate(&spec, &mut out).context("cannot write the event log")?;
    tracing::info!(
        lines = stats.lines,
        product_records = stats.product_records,
        campaign_records = stats.campaign_records,
        malformed = stats.malformed,
        scheduled_campaigns = stats.scheduled_campaigns,
        first_timestamp_ms = stats.first_timestamp_ms,
        last_timestamp_ms = stats.last_timestamp_ms,
        seconds = started.elapsed().as_secs_f64(),
        "event log written"
    );
    Ok(())
}
