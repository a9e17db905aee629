//! `eligibility demo`, the embedded default: it runs, and shows its scheduled campaign
//! opening in the batch whose clock reaches the start and closing in the one that reaches
//! the end, with as many pairs deleted as it ended with.

mod support;

use std::process::Command;

use support::binary;

/// The number before `word` in `text`.
fn number_before(text: &str, word: &str) -> u64 {
    let head = &text[..text.find(word).unwrap_or_else(|| panic!("no {word:?} in {text}"))];
    head.split_whitespace().last().unwrap().parse().unwrap()
}

/// The batch named after `phrase` (`opened in batch 3 (…`).
fn batch_after(text: &str, phrase: &str) -> u64 {
    let tail = &text[text.find(phrase).unwrap_or_else(|| panic!("no {phrase:?} in {text}")) + phrase.len()..];
    tail.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_demo_shows_its_flash_sale_opening_and_closing() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(binary())
        .args(["demo", "--products", "6000", "--updates", "6000", "--campaigns", "10"])
        .args(["--batch-size", "1000", "--workers", "2", "--output-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let flash = &stdout[stdout
        .find("Scheduled campaign flash-sale")
        .expect("the flash sale is shown")..];
    // 12,000+ lines a millisecond apart: open from 40% to 70% of them, so the start is in
    // batch 4 or 5 and the end in batch 8 (the load's categories and campaigns add lines).
    let (opened, closed) = (
        batch_after(flash, "opened in batch"),
        batch_after(flash, "closed in batch"),
    );
    assert!((4..=5).contains(&opened), "{flash}");
    assert!((8..=9).contains(&closed), "{flash}");
    let (upserted, deleted) = (
        number_before(flash, "pairs upserted"),
        number_before(flash, "pairs deleted"),
    );
    assert!(upserted > 0, "{flash}");
    // What closes is every pair it had: those it opened with, moved by updates in between.
    let changes = std::fs::read_to_string(dir.path().join("changes.jsonl")).unwrap();
    let mut live = std::collections::BTreeSet::new();
    let lines: Vec<&str> = changes
        .lines()
        .filter(|line| line.contains(r#""campaign_id":"flash-sale""#))
        .collect();
    assert!(lines.len() as u64 >= upserted + deleted, "{flash}");
    for line in lines {
        let id = line
            .split(r#""id":""#)
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_owned();
        match line.contains(r#""op":"delete""#) {
            true => assert!(live.remove(&id), "{line}"),
            false => {
                live.insert(id);
            }
        }
    }
    assert!(live.is_empty(), "the flash sale has pairs after it closed: {live:?}");
    assert!(
        deleted > 0 && deleted <= upserted + number_before(flash, "times"),
        "{flash}"
    );
}
