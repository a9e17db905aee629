#!/usr/bin/env python3
"""End-to-end cost of writing: the job on a real Kafka broker and search node, side by side.

For each marketplace size and each variant (a job configuration):
  1. load the marketplace and wait until the index holds it;
  2. a flood of product updates in two shapes, a burst produced as fast as the broker takes
     it and the same number spread over seconds (--spread-rate): the document writes the sink
     sent, against the distinct pairs whose figures the flood changed (the index before and
     after, compared) and the changed (pair, time) rows the sink was handed;
  3. a steady stream at a fixed rate, of product updates only and then with the generator's
     campaign edits (1% of its updates): the job's CPU (utime + stime of its process);
  4. a quiet stream: one change at a time, the time until a GET by id on the index shows it.

Needs: a running broker and node (scripts/kafka.sh start, scripts/elasticsearch.sh start),
`cargo build --release`, and `pip install confluent-kafka requests`. Results go to stdout as
a Markdown table and, with --json, to a file. docs/benchmarks.md shows a run.

    scripts/measure_sink.py --products 100000,300000 --campaigns 100 --flood 100000
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "target" / "release" / "eligibility"

# name -> (workers, extra [batching] lines). "adaptive": the defaults (batches grow while
# the sink is behind, spaced by min_interval_ms). "fixed": the batching of the earlier job
# (a batch closes at max_records, max_delay_ms or when nothing more is ready; never grows).
VARIANTS = {
    "adaptive-1w": (1, ""),
    "adaptive-2w": (2, ""),
    "fixed-1w": (1, "min_interval_ms = 0\nmax_records_behind = 10000\n"),
    "fixed-2w": (2, "min_interval_ms = 0\nmax_records_behind = 10000\n"),
}

FRESH_CAMPAIGN = "measure-fresh"
FRESH_SELLER = 987_654_321


def metrics(port):
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    sums = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        name = name.split("{", 1)[0]
        try:
            sums[name] = sums.get(name, 0.0) + float(value)
        except ValueError:
            pass
    return sums


def wait(what, condition, timeout=600, every=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if condition():
                return
        except requests.RequestException:
            pass
        time.sleep(every)
    sys.exit(f"timed out waiting until {what}")


def end_offsets(brokers, topics):
    """The sum of the end offsets of every partition of `topics`, as the broker has them now."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "measure-sink"})
    total = 0
    for topic in topics:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            total += consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    consumer.close()
    return total


def caught_up(port, brokers, topics):
    """The job's progress record holds every record sent so far (the sinks acknowledged
    them all), and nothing is read and unacknowledged or unread."""
    ends = end_offsets(brokers, topics)
    wait("the job has committed every record",
         lambda: metrics(port).get("eligibility_committed_offset", 0) >= ends)

    def quiet():
        m = metrics(port)
        return m.get("eligibility_records_unacknowledged", 1) == 0 and m.get("eligibility_consumer_lag", 1) == 0
    wait("the job has caught up", quiet)
    time.sleep(2.5)  # the lag watcher publishes every 2 s
    wait("the job has caught up", quiet)


def snapshot(es, index):
    """Every pair document of the index: id -> (eligible_products, eligible_stock)."""
    pairs = {}
    # A search sees what the last refresh made visible: refresh first.
    requests.post(f"{es}/{index}/_refresh", timeout=60)
    answer = requests.post(f"{es}/{index}/_search?scroll=1m", json={"size": 10000}, timeout=60).json()
    while answer["hits"]["hits"]:
        for hit in answer["hits"]["hits"]:
            pairs[hit["_id"]] = (hit["_source"]["eligible_products"], hit["_source"]["eligible_stock"])
        answer = requests.post(f"{es}/_search/scroll", json={"scroll": "1m", "scroll_id": answer["_scroll_id"]},
                               timeout=60).json()
    return pairs


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def produce_lines(producer, topics, lines, rate=None):
    """Sends event-log lines (SPEC envelope) to their topics; at `rate` per second if given."""
    started = time.time()
    for n, line in enumerate(lines):
        record = json.loads(line)
        value = record.get("value")
        payload = None if value is None else json.dumps(value)
        producer.produce(topics[record["topic"]], key=record["key"], value=payload)
        if n % 1000 == 0:
            producer.poll(0)
        if rate:
            due = started + (n + 1) / rate
            pause = due - time.time()
            if pause > 0:
                time.sleep(pause)
    producer.flush()


def run_variant(name, workers, batching, lines, args, es, work):
    slug = name
    suffix = f"{slug}-{random.randrange(1 << 30)}"
    topics = {"products": f"products-{suffix}", "campaigns": f"campaigns-{suffix}"}
    index = f"measure-{suffix}"
    port = 20000 + random.randrange(10000)
    config = work / f"{slug}.toml"
    config.write_text(f"""
[kafka]
brokers = "{args.brokers}"
products_topic = "{topics['products']}"
campaigns_topic = "{topics['campaigns']}"

[batching]
{batching}

[sinks.elasticsearch]
urls = ["{es}"]
index = "{index}"
replicas = 0
job_id = "{index}"

[dead_letter]
path = "{work / (slug + '.rejected.jsonl')}"

[metrics]
listen = "127.0.0.1:{port}"
""")
    base, flood, spread_flood, steady_products, steady_mixed = lines
    base_file = work / "base.jsonl"
    base_file.write_text("\n".join(base) + "\n")
    subprocess.run([BINARY, "produce", "--input", base_file, "--config", config, "--partitions", "3"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = open(work / f"{slug}.log", "w")
    job_started = time.time()
    job = subprocess.Popen([BINARY, "run", "--config", config, "--workers", str(workers), "--progress-secs", "0"],
                           stdout=subprocess.DEVNULL, stderr=log)
    # Keys placed as `eligibility produce` and the Java clients place them (murmur2), not
    # with librdkafka's default (consistent_random, a CRC32): else an update could land on
    # another partition than its key's earlier records (docs/kafka.md).
    placed = {"bootstrap.servers": args.brokers, "partitioner": "murmur2_random"}
    producer = Producer({**placed, "linger.ms": 0, "acks": "all"})
    # The flood as a burst: batched sends, so it lands faster than the job reads it.
    bulk_producer = Producer({**placed, "linger.ms": 20, "acks": 1,
                              "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000})
    try:
        wait("the metrics endpoint answers", lambda: metrics(port) is not None)
        caught_up(port, args.brokers, topics.values())
        loaded = time.time() - job_started

        def flood_of(lines, produce):
            """Produces a flood and measures what the sink wrote for it."""
            before = metrics(port)
            held_before = snapshot(es, index)
            started = time.time()
            produce(lines)
            caught_up(port, args.brokers, topics.values())
            seconds = time.time() - started
            after = metrics(port)
            held_after = snapshot(es, index)
            moved = lambda name: after.get(name, 0) - before.get(name, 0)
            # The pairs whose figures the flood changed (created, ended or different).
            distinct = sum(1 for pair in held_before.keys() | held_after.keys()
                           if held_before.get(pair) != held_after.get(pair))
            writes = (moved("eligibility_sink_documents_written_total")
                      + moved("eligibility_sink_documents_deleted_total"))
            return {
                "updates": len(lines),
                "seconds": seconds,
                "rows": moved("eligibility_pairs_upserted_total") + moved("eligibility_pairs_deleted_total"),
                "distinct_pairs": distinct,
                "document_writes": writes,
                "writes_coalesced": moved("eligibility_sink_writes_coalesced_total"),
                "batches": moved("eligibility_batches_closed_total"),
                "writes_per_distinct_pair": writes / max(distinct, 1),
            }

        def steady_of(lines, label):
            """Produces a steady stream and measures the job's CPU over it."""
            cpu_before, wall_before = cpu_seconds(job.pid), time.time()
            batches_before = metrics(port)["eligibility_batches_closed_total"]
            profiler = None
            if args.perf:
                # A profile of the steady stream only (it costs CPU: not for the figures).
                profiler = subprocess.Popen(["perf", "record", "-g", "-F", "499", "-p", str(job.pid),
                                             "-o", str(args.perf / f"{slug}-{label}.perf.data")],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            produce_lines(producer, topics, lines, rate=args.rate)
            if profiler:
                profiler.send_signal(signal.SIGINT)
                profiler.wait()
            elapsed = time.time() - wall_before
            cores = (cpu_seconds(job.pid) - cpu_before) / elapsed
            batches = (metrics(port)["eligibility_batches_closed_total"] - batches_before) / elapsed
            caught_up(port, args.brokers, topics.values())
            return cores, batches

        burst = flood_of(flood, lambda lines: produce_lines(bulk_producer, topics, lines))
        spread = flood_of(spread_flood, lambda lines: produce_lines(bulk_producer, topics, lines, rate=args.spread_rate))
        pairs = len(snapshot(es, index))
        cores, steady_batches = steady_of(steady_products, "products")
        mixed_cores, mixed_batches = steady_of(steady_mixed, "mixed")

        # The quiet stream: one change at a time, each visible as a new eligible_stock.
        produce_lines(producer, topics, [
            json.dumps({"topic": "campaigns", "key": FRESH_CAMPAIGN, "value": {"seller_ids": [FRESH_SELLER]}}),
        ])
        document = f"{es}/{index}/_doc/{FRESH_CAMPAIGN}:{FRESH_SELLER}"
        latencies = []
        for sample in range(args.samples):
            stock = 1000 + sample
            line = json.dumps({"topic": "products", "key": "measure-fresh-product", "value": {
                "seller_id": FRESH_SELLER, "category_id": 1, "brand_id": 1, "price": 1, "stock": stock}})
            sent = time.time()
            produce_lines(producer, topics, [line])

            def visible():
                answer = requests.get(document, timeout=5)
                return answer.status_code == 200 and answer.json()["_source"]["eligible_stock"] == stock
            wait("a quiet change is visible", visible, timeout=30, every=0.002)
            latencies.append((time.time() - sent) * 1000)
            time.sleep(args.quiet_gap)
        latencies.sort()
        # Every record on its key's partition, or the job measured is not the job of a
        # consistent producer (docs/kafka.md, "When producers disagree").
        misplaced = metrics(port).get("eligibility_records_misplaced_total", 0)
        if misplaced:
            sys.exit(f"{name}: {misplaced:.0f} records on another partition than murmur2 gives their key")
        return {
            "variant": name,
            "products": args.products,
            "pairs": pairs,
            "load_seconds": loaded,
            "burst": burst,
            "spread": spread,
            "spread_rate": args.spread_rate,
            "steady_rate": args.rate,
            "steady_cores": cores,
            "steady_batches_per_second": steady_batches,
            "steady_mixed_cores": mixed_cores,
            "steady_mixed_batches_per_second": mixed_batches,
            "fresh_p50_ms": statistics.median(latencies),
            "fresh_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "fresh_slowest_ms": latencies[-5:],
        }
    finally:
        job.kill()
        job.wait()
        requests.delete(f"{es}/{index}", timeout=30)
        requests.delete(f"{es}/{index}-progress", timeout=30)
        requests.delete(f"{es}/{index}-refused", timeout=30)


def lines_for(args, products, work):
    """One marketplace of `products` and its streams: base, burst, spread, steady (products
    only), steady (with campaign edits)."""
    steady_count = int(args.rate * args.steady_seconds)
    # A few more updates than the steady stream needs, for when its campaign edits are left out.
    steady_generated = steady_count + steady_count // 20
    generated = work / f"events-{products}.jsonl"
    updates = 2 * args.flood + 2 * steady_generated
    subprocess.run([BINARY, "generate", "--products", str(products), "--campaigns", str(args.campaigns),
                    "--sellers", str(max(products // 150, 10)), "--updates", str(updates),
                    "--malformed", "0", "--tree-depth", "0", "--output", generated], check=True)
    all_lines = generated.read_text().splitlines()
    base_count = len(all_lines) - updates
    at = base_count
    burst, spread = all_lines[at:at + args.flood], all_lines[at + args.flood:at + 2 * args.flood]
    at += 2 * args.flood
    products_only = [line for line in all_lines[at:at + steady_generated] if json.loads(line)["topic"] == "products"]
    mixed = all_lines[at + steady_generated:]
    return (all_lines[:base_count], burst, spread, products_only[:steady_count], mixed[:steady_count])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--products", default="300000", help="comma-separated marketplace sizes, each measured")
    parser.add_argument("--campaigns", type=int, default=100)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--spread-rate", type=float, default=20_000,
                        help="updates per second of the spread flood (the same count as the burst)")
    parser.add_argument("--rate", type=float, default=2_000, help="steady updates per second")
    parser.add_argument("--steady-seconds", type=float, default=30)
    parser.add_argument("--samples", type=int, default=200, help="quiet changes timed")
    parser.add_argument("--quiet-gap", type=float, default=0.2, help="seconds between quiet changes")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--perf", type=Path, help="record a perf profile of the steady stream into this folder")
    args = parser.parse_args()
    es = os.environ.get("ELIGIBILITY_SEARCH_URL", "http://127.0.0.1:9200")
    work = Path(tempfile.mkdtemp(prefix="measure-sink-"))
    results = []
    for products in [int(size) for size in args.products.split(",")]:
        lines = lines_for(args, products, work)
        for name in args.variants.split(","):
            workers, batching = VARIANTS[name]
            print(f"== {products} products, {name}", file=sys.stderr)
            run_args = argparse.Namespace(**{**vars(args), "products": products})
            results.append(run_variant(name, workers, batching, lines, run_args, es, work))
    print(f"{args.campaigns} campaigns; floods of {args.flood} updates, a burst and spread at "
          f"{args.spread_rate:.0f}/s; {args.rate:.0f} updates/s for {args.steady_seconds:.0f} s, products only "
          f"and with the generator's campaign edits; {args.samples} quiet changes\n")
    print("| products | pairs | variant | burst: writes / distinct pair | spread: writes / distinct pair "
          "(rows, distinct, writes) | steady, products only: cores | steady, with campaign edits: cores | "
          "quiet change visible p50 / p99 |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        b, sp = r["burst"], r["spread"]
        print(f"| {r['products']:,} | {r['pairs']:,} | {r['variant']} | {b['writes_per_distinct_pair']:.2f} | "
              f"{sp['writes_per_distinct_pair']:.2f} ({sp['rows']:,.0f}, {sp['distinct_pairs']:,}, "
              f"{sp['document_writes']:,.0f}) | {r['steady_cores']:.2f} | {r['steady_mixed_cores']:.2f} | "
              f"{r['fresh_p50_ms']:.0f} / {r['fresh_p99_ms']:.0f} ms |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
