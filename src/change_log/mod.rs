//! Reading a JSONL change log back: what a restart into it holds, and every change for the
//! demo, the tests and anyone checking a run.

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::Context;
use dataflows::model::{PairChange, PairFigures, PairKey};
use dataflows::reference::PairState;

use crate::sink::contract::{HeldFold, HeldPairs};

mod line;

use line::{parse_line, parse_line_bytes};

/// Parses one change line; `previous` is left empty, as the log does not carry it.
pub fn parse_change(line: &str) -> anyhow::Result<PairChange> {
    let change = parse_line(line)?;
    Ok(PairChange {
        time: change.time,
        pair: PairKey {
            campaign_id: change.campaign_id.into_owned(),
            seller_id: change.seller_id,
        },
        figures: change.figures,
        previous: None,
    })
}

/// Reads every change of a change log, in order.
pub fn read_changes(path: &Path) -> anyhow::Result<Vec<PairChange>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut changes = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if !line.is_empty() {
            changes.push(parse_change(&line)?);
        }
    }
    Ok(changes)
}

/// Applies changes in order to get the state they describe.
pub fn fold_state(changes: &[PairChange]) -> PairState {
    let mut state = PairState::new();
    for change in changes {
        apply(&mut state, change.pair.clone(), change.figures);
    }
    state
}

fn apply(state: &mut PairState, pair: PairKey, figures: Option<PairFigures>) {
    match figures {
        Some(figures) => state.insert(pair, figures),
        None => state.remove(&pair),
    };
}

/// Cuts a partial last line (a write the previous run did not finish) off the log, so
/// that the next write starts on a line of its own. A missing log is left missing.
pub fn drop_partial_line(path: &Path) -> anyhow::Result<()> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("cannot open {}", path.display())),
    };
    let length = file.metadata()?.len();
    let complete = complete_length(&mut file, length).with_context(|| format!("cannot read {}", path.display()))?;
    if complete < length {
        tracing::warn!(path = %path.display(), dropped_bytes = length - complete, "dropping a partial last line");
        let writable = std::fs::OpenOptions::new().write(true).open(path)?;
        writable.set_len(complete)?;
        writable.sync_all()?;
    }
    Ok(())
}

/// The pairs a log of complete lines holds (nothing for a missing log), folded as it is
/// read: a log of millions of pairs is never in memory whole, as bytes or as changes (that
/// once tripled a restart's peak memory). A resumed run calls [`drop_partial_line`] first.
pub fn fold_log(path: &Path) -> anyhow::Result<HeldPairs> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(HeldPairs::new()),
        Err(error) => return Err(error).with_context(|| format!("cannot open {}", path.display())),
    };
    let mut state = HeldFold::new();
    // A log's first time holds every pair in order: room for as many pairs as lines the
    // log could hold. Address space only: what is not filled is never touched.
    let length = file.metadata().map_or(0, |metadata| metadata.len());
    state.reserve(usize::try_from(length / SHORTEST_LINE).unwrap_or(0));
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    // One buffer for every line, and the campaign id borrowed from it: no allocation per line.
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 {
            break;
        }
        let bytes = line.strip_suffix(b"\n").unwrap_or(&line);
        if bytes.is_empty() {
            continue;
        }
        let change = parse_line_bytes(bytes).with_context(|| format!("in {}", path.display()))?;
        match change.figures {
            Some(figures) => state.hold(&change.campaign_id, change.seller_id, figures),
            None => state.release(&change.campaign_id, change.seller_id),
        }
    }
    Ok(state.finish())
}

/// Fewer bytes than any line the job writes takes, newline included (a delete of
/// campaign `c` for seller 1 at time 0 takes 68).
const SHORTEST_LINE: u64 = 64;

/// The length of the file up to and including its last newline, found from the end.
fn complete_length(file: &mut std::fs::File, length: u64) -> std::io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut buffer = vec![0; CHUNK as usize];
    let mut end = length;
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buffer[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(newline) = chunk.iter().rposition(|byte| *byte == b'\n') {
            return Ok(start + newline as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a resumed run does with its log: the partial line dropped, the rest folded.
    fn recover(path: &Path) -> anyhow::Result<HeldPairs> {
        drop_partial_line(path)?;
        fold_log(path)
    }

    #[test]
    fn recovery_drops_a_partial_line_and_folds_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changes.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"op":"upsert","id":"c:1","campaign_id":"c","seller_id":1,"eligible_products":2,"eligible_stock":3,"time":0}"#,
                "\n",
                r#"{"op":"upsert","id":"c:2","campaign_id":"c","seller_id":2,"eligible_products":1,"eligible_stock":1,"time":0}"#,
                "\n",
                r#"{"op":"delete","id":"c:2","campaign_id":"c","seller_id":2,"time":1}"#,
                "\n",
                r#"{"op":"upsert","id":"c:3","campaign_id":"c","sel"#,
            ),
        )
        .unwrap();
        let state = recover(&path).unwrap();
        assert_eq!(state.len(), 1);
        let held = state
            .get(&PairKey {
                campaign_id: "c".into(),
                seller_id: 1,
            })
            .expect("held");
        assert_eq!(held.eligible_stock, 3);
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("\"time\":1}\n"));
        assert!(recover(&dir.path().join("missing.jsonl")).unwrap().is_empty());
    }

    #[test]
    fn a_partial_line_longer_than_the_search_chunk_is_found_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changes.jsonl");
        let line = r#"{"op":"upsert","id":"c:1","campaign_id":"c","seller_id":1,"eligible_products":2,"eligible_stock":3,"time":0}"#;
        std::fs::write(&path, format!("{line}\n{}", "x".repeat(200_000))).unwrap();
        assert_eq!(recover(&path).unwrap().len(), 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{line}\n"));

        std::fs::write(&path, "x".repeat(70_000)).unwrap();
        assert!(recover(&path).unwrap().is_empty());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "a log with no complete line is emptied"
        );
    }
}
