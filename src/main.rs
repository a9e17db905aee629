//! The `eligibility` binary: parses the command line and runs one command. The edge where
//! errors become a message and an exit status.

use std::process::ExitCode;

use clap::Parser;
use eligibility::cli::{Cli, Command};
use eligibility::commands;
use eligibility::job::JobError;

// glibc's allocator hands large buffers back to the kernel and faults them in again on
// every batch; mimalloc keeps them (a quarter of the engine's time in the profile).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log);
    let result = match &cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Generate(args) => commands::generate::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Produce(args) => commands::produce::run(args),
        Command::Campaigns(args) => commands::campaigns::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            // Returning ends the process, workers that still wait included.
            match error.downcast_ref::<JobError>() {
                Some(JobError::PeersNotConnected { .. }) => ExitCode::from(2),
                Some(JobError::StopCutShort { .. }) => ExitCode::from(eligibility::shutdown::CUT_SHORT_STATUS),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
