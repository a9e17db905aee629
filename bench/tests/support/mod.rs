//! What the bench's test files share: the binaries, and the file-mode agreement check.
#![allow(dead_code)] // each test file uses its own share of these

use std::path::{Path, PathBuf};
use std::process::Command;

use bench::baselines::incremental::Incremental;
use bench::baselines::recompute::{Recompute, Strategy};
use bench::baselines::Implementation;

/// The binary every implementation runs in, re-executed as the bench does.
pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_eligibility-bench"))
}

/// The job's binary, which the file mode measures (built by `cargo test --workspace`).
pub fn engine() -> PathBuf {
    bench::args::engine_binary().unwrap()
}

/// Runs the hand-written baseline and the engine in file mode on `log` (batches of 7, which
/// split its updates, malformed lines and repeated keys many ways) and asserts that they
/// write the same bytes. Returns the change log and the dead letters.
pub fn file_modes_agree(log: &Path, dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let outputs = |name: &str, binary: PathBuf, command: &[&str]| {
        let (changes, letters) = (dir.join(format!("{name}.changes")), dir.join(format!("{name}.dead")));
        let status = Command::new(binary)
            .args(command)
            .args(["--batch-size", "7", "--input"])
            .arg(log)
            .arg("--output")
            .arg(&changes)
            .arg("--dead-letter")
            .arg(&letters)
            .status()
            .unwrap();
        assert!(status.success(), "{name}");
        (std::fs::read(changes).unwrap(), std::fs::read(letters).unwrap())
    };
    let (base_changes, base_letters) = outputs("hand-written", exe(), &["file-baseline"]);
    let (engine_changes, engine_letters) =
        outputs("engine", engine(), &["run", "--log", "warn", "--progress-secs", "0"]);
    assert!(base_changes.len() > 10_000 && !base_letters.is_empty());
    assert!(base_changes == engine_changes, "the change logs differ");
    assert!(base_letters == engine_letters, "the dead letters differ");
    (base_changes, base_letters)
}

/// Every baseline implementation, fresh.
pub fn baselines() -> Vec<Box<dyn Implementation>> {
    vec![
        Box::new(Incremental::new()),
        Box::new(Recompute::new(Strategy::PerCampaign)),
        Box::new(Recompute::new(Strategy::PerPair)),
    ]
}
