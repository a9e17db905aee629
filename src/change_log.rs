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
    let line: ChangeLine =
        serde_json::from_str(line).with_context(|| format!("not a change line: {line}"))?;
    let pair = PairKey {
        campaign_id: line.campaign_id,
        seller_id: line.seller_id,
    };
    if line.id != pair.document_id() {
        bail!("id {} does not match campaign_id:seller_id", line.id);
    }
    let figures = match (
        line.op.as_str(),
        line.eligible_products,
        line.eligible_stock,
    ) {
        ("upsert", Some(eligible_products), Some(eligible_stock)) => Some(PairFigures {
            eligible_products,
            eligible_stock,
        }),
        ("delete", None, None) => None,
        _ => bail!(
            "change line {} has op {:?} and inconsistent figures",
            line.id,
            line.op
        ),
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
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
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
