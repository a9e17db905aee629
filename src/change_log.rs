//! Reading a JSONL change log back: for the demo, the tests and anyone checking a run.

use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context};
use dataflows::model::{PairChange, PairFigures, PairKey, Time};
use dataflows::reference::PairState;
use serde::Deserialize;

#[derive(Deserialize)]
struct ChangeLine {
    op: String,
    id: String,
    campaign_id: String,
    seller_id: u64,
    eligible_products: Option<u64>,
    eligible_stock: Option<u64>,
    time: Time,
}

/// Parses one change line; `previous` is left empty, as the log does not carry it.
pub fn parse_change(line: &str) -> anyhow::Result<PairChange> {
    let line: ChangeLine = serde_json::from_str(line).with_context(|| format!("not a change line: {line}"))?;
    let pair = PairKey {
        campaign_id: line.campaign_id,
        seller_id: line.seller_id,
    };
    if line.id != pair.document_id() {
        bail!("id {} does not match campaign_id:seller_id", line.id);
    }
    let figures = match (line.op.as_str(), line.eligible_products, line.eligible_stock) {
        ("upsert", Some(eligible_products), Some(eligible_stock)) => Some(PairFigures {
            eligible_products,
            eligible_stock,
        }),
        ("delete", None, None) => None,
        _ => bail!("change line {} has op {:?} and inconsistent figures", line.id, line.op),
    };
    Ok(PairChange {
        time: line.time,
        pair,
        figures,
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
        match change.figures {
            Some(figures) => state.insert(change.pair.clone(), figures),
            None => state.remove(&change.pair),
        };
    }
    state
}

/// Opens an existing change log for a resumed run: drops a partial last line (a write the
/// previous run did not finish) and returns the pairs the log holds. A missing log holds
/// nothing.
pub fn recover(path: &Path) -> anyhow::Result<PairState> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(PairState::new()),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |end| end + 1);
    if complete < bytes.len() {
        tracing::warn!(path = %path.display(), dropped_bytes = bytes.len() - complete, "dropping a partial last line");
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_len(complete as u64)?;
        file.sync_all()?;
    }
    let text = std::str::from_utf8(&bytes[..complete]).with_context(|| format!("{} is not UTF-8", path.display()))?;
    let mut changes = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        changes.push(parse_change(line)?);
    }
    Ok(fold_state(&changes))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            state[&PairKey {
                campaign_id: "c".into(),
                seller_id: 1
            }]
                .eligible_stock,
            3
        );
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("\"time\":1}\n"));
        assert!(recover(&dir.path().join("missing.jsonl")).unwrap().is_empty());
    }
}
