//! The same generated log through the built binary: one process, and a cluster of two
//! processes over loopback TCP. The change log and dead letters must be identical. Half
//! the campaigns are scheduled, so windows open and close on both.

mod support;

use std::process::{Command, Stdio};

use support::{binary, free_port, free_port_pair, path_str, run_ok};

#[test]
fn two_processes_write_what_one_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    run_ok(&[
        "generate",
        "--products",
        "3000",
        "--sellers",
        "60",
        "--categories",
        "40",
        "--brands",
        "30",
        "--campaigns",
        "15",
        "--updates",
        "6000",
        "--malformed",
        "0.01",
        // Half the campaigns open and close while the log is read.
        "--scheduled-campaigns",
        "0.5",
        "--seed",
        "11",
        "--output",
        path_str(&events),
    ]);

    let single_changes = dir.path().join("single.jsonl");
    let single_rejected = dir.path().join("single-rejected.jsonl");
    run_ok(&[
        "run",
        "--input",
        path_str(&events),
        "--output",
        path_str(&single_changes),
        "--dead-letter",
        path_str(&single_rejected),
        "--batch-size",
        "250",
    ]);

    let hostfile = dir.path().join("hosts.txt");
    std::fs::write(
        &hostfile,
        format!("127.0.0.1:{}\n127.0.0.1:{}\n", free_port_pair(), free_port()),
    )
    .unwrap();
    let cluster_changes = dir.path().join("cluster.jsonl");
    let cluster_rejected = dir.path().join("cluster-rejected.jsonl");
    let processes: Vec<_> = (0..2)
        .map(|process| {
            Command::new(binary())
                .args([
                    "run",
                    "--input",
                    path_str(&events),
                    "--output",
                    path_str(&cluster_changes),
                    "--dead-letter",
                    path_str(&cluster_rejected),
                    "--batch-size",
                    "250",
                    "--workers",
                    "2",
                    "--processes",
                    "2",
                    "--process",
                    &process.to_string(),
                    "--hostfile",
                    path_str(&hostfile),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in processes {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }

    let single = std::fs::read_to_string(&single_changes).unwrap();
    let cluster = std::fs::read_to_string(&cluster_changes).unwrap();
    assert!(single.lines().count() > 1000, "the log should produce many changes");
    assert!(
        single == cluster,
        "the cluster's change log differs from the single process's"
    );
    assert_eq!(
        std::fs::read_to_string(&single_rejected).unwrap(),
        std::fs::read_to_string(&cluster_rejected).unwrap()
    );
    assert!(std::fs::read_to_string(&single_rejected).unwrap().lines().count() > 10);
}

#[test]
fn output_dash_writes_the_change_log_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    std::fs::write(
        &events,
        concat!(
            r#"{"topic": "products", "key": "p-1", "value": {"seller_id": 42, "category_id": 1001, "brand_id": 7, "price": 129.9, "stock": 15}}"#,
            "\n",
            r#"{"topic": "campaigns", "key": "c-9", "value": {"category_ids": [1001], "min_stock": 1}}"#,
            "\n",
            r#"{"topic": "products", "key": "p-1", "value": null}"#,
            "\n",
        ),
    )
    .unwrap();
    let rejected = dir.path().join("rejected.jsonl");
    let output = run_ok(&[
        "run",
        "--input",
        path_str(&events),
        "--output",
        "-",
        "--dead-letter",
        path_str(&rejected),
        "--batch-size",
        "2",
    ]);
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            serde_json::json!({"op": "upsert", "id": "c-9:42", "campaign_id": "c-9", "seller_id": 42,
                               "eligible_products": 1, "eligible_stock": 15, "time": 0}),
            serde_json::json!({"op": "delete", "id": "c-9:42", "campaign_id": "c-9", "seller_id": 42, "time": 1}),
        ]
    );
    assert_eq!(std::fs::read_to_string(&rejected).unwrap(), "");
}
