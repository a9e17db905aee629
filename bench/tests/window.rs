//! The window bench on a small marketplace: opening and activating the campaign write the
//! same pair changes, a third of the products' worth, on 1 and 2 workers.

use bench::window::{run, Step, WindowOptions};
use generate::MarketplaceSpec;

#[test]
fn opening_and_activating_write_the_same_pairs_on_one_and_two_workers() {
    let options = WindowOptions {
        marketplace: MarketplaceSpec {
            products: 6_000,
            sellers: 200,
            categories: 100,
            brands: 50,
            campaigns: 10,
            ..MarketplaceSpec::default()
        },
        share: 1.0 / 3.0,
        rounds: 2,
        workers: vec![1, 2],
    };
    let report = run(&options).unwrap();
    assert!((0.25..0.45).contains(&report.share_reached), "{}", report.share_reached);
    assert_eq!(report.runs.len(), 2);
    let written = |run: usize, step: Step| {
        report.runs[run]
            .steps
            .iter()
            .find(|figures| figures.step == step)
            .unwrap()
            .pairs_written
            .clone()
    };
    for run in 0..2 {
        let opened = written(run, Step::Open);
        assert_eq!(opened.len(), 2, "one figure a round");
        assert!(opened.iter().all(|pairs| *pairs > 0));
        // Every pair it opened with, it closes with; and the same for the `active` edits.
        assert_eq!(written(run, Step::Close), opened);
        assert_eq!(written(run, Step::Activate), opened);
        assert_eq!(written(run, Step::Deactivate), opened);
    }
    assert_eq!(written(0, Step::Open), written(1, Step::Open), "1 and 2 workers agree");
    assert!(report.to_markdown().contains("opens (clock reaches starts_at)"));
}
