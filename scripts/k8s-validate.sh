#!/usr/bin/env bash
# Validates the Kubernetes manifests in k8s/ offline, with a real schema checker:
#
#   1. installs kustomize and kubeconform (pinned) with `go install` into .local/k8s/bin;
#   2. builds kubeconform's JSON schemas from the Kubernetes OpenAPI spec
#      (api/openapi-spec/swagger.json in the k8s.io/kubernetes module zip, from the Go
#      module proxy), converted by openapi2jsonschema (PyPI) in a venv: no GitHub needed;
#   3. renders k8s/base and k8s/overlays/production, validates both with kubeconform
#      -strict (unknown fields are errors), checks that a planted typo is rejected (so the
#      checker cannot silently accept everything), and asserts the settings that must agree
#      (replicas, ELIGIBILITY_PROCESSES, workers, CPU, image, job.toml).
#
# Usage: scripts/k8s-validate.sh [K8S_DIR]      (default: the repository's k8s/)
# Environment: K8S_VERSIONS="1.35.4 1.37.2"     Kubernetes versions to validate against;
#              K8S_VALIDATE_CACHE=DIR          the cache (default .local/k8s).
# Everything is cached under .local/k8s/ (git-ignored): a second run takes seconds, and
# `rm -rf .local/k8s` starts from scratch. How it works: docs/kubernetes.md.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
K8S_DIR="$(cd "${1:-$ROOT/k8s}" && pwd)"
CACHE="${K8S_VALIDATE_CACHE:-$ROOT/.local/k8s}"

KUSTOMIZE_VERSION=v5.8.2 # v5.8.3 needs Go 1.27; this machine has 1.26
KUBECONFORM_VERSION=v0.8.0
K8S_VERSIONS="${K8S_VERSIONS:-1.35.4}"
K8S_VERSIONS="$(tr -s ' ' '\n' <<<"$K8S_VERSIONS" | sed 's/^v//' | xargs)" # "v1.35.4 1.37.2" -> "1.35.4 1.37.2"
# openapi2jsonschema 0.9.1 (the converter behind kubeval's and kubeconform's published
# schemas) with the versions its metadata allows; PyYAML 5.4.1 builds from source, which
# needs Cython < 3 (PIP_CONSTRAINT below).
PY_REQUIREMENTS=(openapi2jsonschema==0.9.1 click==7.1.2 colorama==0.4.6 jsonref==0.2 PyYAML==5.4.1)

# Expected values of the production overlay.
EXPECT_REPLICAS=3
EXPECT_WORKERS=2
EXPECT_IMAGE=ghcr.io/example/eligibility:0.1.0
EXPECT_NAMESPACE=eligibility
EXPECT_BROKERS=kafka.kafka.svc:9092

started=$SECONDS
say() { printf 'k8s-validate: %s\n' "$*" >&2; }
fail() {
    printf 'k8s-validate: FAILED: %s\n' "$*" >&2
    exit 1
}
command -v go >/dev/null || fail "go is not installed (needed to install kustomize and kubeconform)"
command -v python3 >/dev/null || fail "python3 is not installed (needed to build the schemas)"

mkdir -p "$CACHE"
# Go builds and downloads stay under .local/k8s too; -modcacherw keeps `rm -rf` working.
export GOBIN="$CACHE/bin" GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build"
export GOFLAGS=-modcacherw GOTOOLCHAIN=local
export PIP_CACHE_DIR="$CACHE/pip-cache" PIP_DISABLE_PIP_VERSION_CHECK=1
KUSTOMIZE="$GOBIN/kustomize"
KUBECONFORM="$GOBIN/kubeconform"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# --- 1. tools ---------------------------------------------------------------------------
# The version a binary was built from, as `go version -m` reads it from the binary.
module_version() { [ -x "$1" ] && go version -m "$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'; }
install_tool() { # binary package version
    if [ "$(module_version "$1" || true)" != "$3" ]; then
        say "installing $2@$3"
        (cd "$CACHE" && go install "$2@$3") || fail "go install $2@$3 failed"
    fi
}
install_tool "$KUSTOMIZE" sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION"
install_tool "$KUBECONFORM" github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION"

# --- 2. schemas -------------------------------------------------------------------------
VENV="$CACHE/venv"
ensure_venv() {
    local stamp="$VENV/.requirements"
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "${PY_REQUIREMENTS[*]}" ]; then
        say "installing ${PY_REQUIREMENTS[*]} into $VENV"
        rm -rf "$VENV"
        python3 -m venv "$VENV" || fail "python3 -m venv failed"
        echo 'cython<3' >"$WORK/constraints.txt"
        PIP_CONSTRAINT="$WORK/constraints.txt" "$VENV/bin/pip" install -q "${PY_REQUIREMENTS[@]}" ||
            fail "pip install ${PY_REQUIREMENTS[*]} failed"
        echo "${PY_REQUIREMENTS[*]}" >"$stamp"
    fi
}

# kubeconform's layout: <dir>/v<version>-standalone-strict/<kind>-<group>-<version>.json
SCHEMAS="$CACHE/schemas"
build_schemas() { # kubernetes version, e.g. 1.35.4
    local version="v$1" name="v$1-standalone-strict"
    # Built from this spec by this converter: else build again.
    local recipe="k8s.io/kubernetes@$version api/openapi-spec/swagger.json, ${PY_REQUIREMENTS[*]}"
    [ "$(head -n 1 "$SCHEMAS/$name/.complete" 2>/dev/null || true)" = "$recipe" ] && return 0
    ensure_venv
    say "downloading the OpenAPI spec of Kubernetes $version (module k8s.io/kubernetes@$version)"
    local json dir spec
    json="$(cd "$CACHE" && go mod download -json "k8s.io/kubernetes@$version")" ||
        fail "go mod download k8s.io/kubernetes@$version failed: $json"
    dir="$(printf '%s' "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
    spec="$dir/api/openapi-spec/swagger.json"
    [ -f "$spec" ] || fail "$spec is missing from the module zip"
    say "converting it to JSON schemas (openapi2jsonschema --strict, about a minute)"
    rm -rf "$SCHEMAS/.building"
    mkdir -p "$SCHEMAS/.building"
    # openapi2jsonschema resolves $refs against <cwd>/<output>: give it a relative output.
    (cd "$SCHEMAS/.building" &&
        "$VENV/bin/openapi2jsonschema" -o "$name" --expanded --kubernetes --stand-alone --strict "$spec") \
        >"$SCHEMAS/.building/openapi2jsonschema.log" 2>&1 ||
        fail "openapi2jsonschema failed; see $SCHEMAS/.building/openapi2jsonschema.log"
    local kind
    for kind in statefulset-apps-v1 service-v1 configmap-v1 serviceaccount-v1 poddisruptionbudget-policy-v1 \
        networkpolicy-networking-v1 namespace-v1; do
        [ -s "$SCHEMAS/.building/$name/$kind.json" ] || fail "openapi2jsonschema wrote no $kind.json"
    done
    local sum
    sum="$(printf '%s' "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Sum"])')"
    printf '%s\nmodule sum %s\n' "$recipe" "$sum" >"$SCHEMAS/.building/$name/.complete"
    rm -rf "${SCHEMAS:?}/$name"
    mv "$SCHEMAS/.building/$name" "$SCHEMAS/$name"
    rm -rf "$SCHEMAS/.building"
    say "$(find "$SCHEMAS/$name" -name '*.json' | wc -l) schemas in $SCHEMAS/$name"
}
for v in $K8S_VERSIONS; do build_schemas "$v"; done
ensure_venv # the checks below parse YAML with its PyYAML

# The Prometheus Operator's PrometheusRule and ServiceMonitor (k8s/components/monitoring):
# JSON schemas from the CRDs of its Go module (the module proxy), made strict like the rest
# (additionalProperties: false wherever the CRD lists the properties).
PROMETHEUS_OPERATOR_VERSION=v0.85.0
CRD_SCHEMAS="$CACHE/crd-schemas/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
if [ ! -f "$CRD_SCHEMAS/.complete" ]; then
    say "downloading the CRDs of prometheus-operator $PROMETHEUS_OPERATOR_VERSION (Go module)"
    json="$(cd "$CACHE" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")" ||
        fail "go mod download prometheus-operator@$PROMETHEUS_OPERATOR_VERSION failed: $json"
    crds="$(printf '%s' "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')/example/prometheus-operator-crd"
    rm -rf "$CRD_SCHEMAS" && mkdir -p "$CRD_SCHEMAS"
    "$VENV/bin/python" - "$CRD_SCHEMAS" "$crds/monitoring.coreos.com_prometheusrules.yaml" \
        "$crds/monitoring.coreos.com_servicemonitors.yaml" <<'PY' || fail "cannot convert the prometheus-operator CRDs"
import json
import os
import sys

import yaml


def strict(node):
    if isinstance(node, dict):
        if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)


out = sys.argv[1]
for path in sys.argv[2:]:
    with open(path) as f:
        crd = yaml.safe_load(f)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        strict(schema)
        # kubeconform's name for it: <kind>-<first label of the group>-<version>.json
        name = f"{kind.lower()}-{group.split('.')[0]}-{version['name']}.json"
        with open(os.path.join(out, name), "w") as f:
            json.dump(schema, f)
PY
    echo "prometheus-operator $PROMETHEUS_OPERATOR_VERSION" >"$CRD_SCHEMAS/.complete"
fi

# --- 3. render, validate, check ---------------------------------------------------------
SCHEMA_LOCATION="$SCHEMAS/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"
kubeconform_run() { # file kubernetes-version; only local schemas, none may be missing
    "$KUBECONFORM" -strict -summary -output text -kubernetes-version "$2" \
        -schema-location "$SCHEMA_LOCATION" \
        -schema-location "$CRD_SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$1"
}

declare -A rendered
for target in base overlays/production overlays/production-monitoring; do
    out="$WORK/$(basename "$target").yaml"
    "$KUSTOMIZE" build "$K8S_DIR/$target" >"$out" 2>"$WORK/kustomize.err" ||
        fail "kustomize build $K8S_DIR/$target: $(cat "$WORK/kustomize.err")"
    rendered[$target]="$out"
    for v in $K8S_VERSIONS; do
        if ! report="$(kubeconform_run "$out" "$v" 2>&1)"; then
            printf '%s\n' "$report" >&2
            fail "kubeconform rejects $target for Kubernetes $v (render it with: $KUSTOMIZE build $K8S_DIR/$target)"
        fi
        say "$target (Kubernetes $v): ${report##*$'\n'}"
    done
done

# Negative control: the same render with a typo at the top of the StatefulSet spec and an
# unknown field in its container must be rejected, else the schemas are not strict.
first_version="${K8S_VERSIONS%% *}"
typo="$WORK/typo.yaml"
sed -e '0,/^  replicas: /s//  replicass: /' \
    -e '0,/^        imagePullPolicy: /s//        imagePullPolicy: IfNotPresent\n        imagePullPolicyy: /' \
    "${rendered[overlays/production]}" >"$typo"
if ! grep -q 'replicass:' "$typo" || ! grep -q 'imagePullPolicyy:' "$typo"; then
    fail "could not plant the typos of the negative control"
fi
if typo_report="$(kubeconform_run "$typo" "$first_version" 2>&1)"; then
    fail "kubeconform accepted a StatefulSet with 'replicass' and 'imagePullPolicyy': the schemas are not strict"
fi
for field in replicass imagePullPolicyy; do
    grep -q "$field" <<<"$typo_report" || fail "kubeconform did not name the unknown field $field: $typo_report"
done

# The settings that must agree, on the rendered objects.
checks="$("$VENV/bin/python" - "${rendered[base]}" "${rendered[overlays/production]}" \
    "$EXPECT_REPLICAS" "$EXPECT_WORKERS" "$EXPECT_IMAGE" "$EXPECT_NAMESPACE" "$EXPECT_BROKERS" <<'PY'
import re
import sys

import yaml

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

base_file, production_file, replicas, workers, image, namespace, brokers = sys.argv[1:]
failures = []
passed = 0


def check(render, condition, message):
    global passed
    if condition:
        passed += 1
    else:
        failures.append(f"{render}: {message}")


def one(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found[0] if len(found) == 1 else None


def parse_toml(text):
    if tomllib is not None:
        return tomllib.loads(text)
    # Enough for the two keys checked below.
    workers = re.search(r"^\s*workers\s*=\s*(\d+)", text, re.M)
    brokers = re.search(r'^\s*brokers\s*=\s*"([^"]*)"', text, re.M)
    return {
        "cluster": {"workers": int(workers.group(1))} if workers else {},
        "kafka": {"brokers": brokers.group(1)} if brokers else {},
    }


def cores(quantity):
    quantity = str(quantity)
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def common(render, objects):
    """Invariants of every render. Returns (replicas, ELIGIBILITY_WORKERS, image, job.toml)."""
    sts = one(objects, "StatefulSet", "eligibility")
    check(render, sts is not None, "exactly one StatefulSet named eligibility")
    if sts is None:
        return None
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    containers = [c for c in pod["containers"] if c["name"] == "eligibility"]
    check(render, len(containers) == 1, "one container named eligibility")
    if len(containers) != 1:
        return None
    container = containers[0]
    env = {e["name"]: e for e in container.get("env", [])}
    names = [e["name"] for e in container.get("env", [])]
    value = lambda name: env.get(name, {}).get("value")

    check(render, spec.get("podManagementPolicy") == "Parallel", "podManagementPolicy is Parallel")
    check(render, spec.get("serviceName") == "eligibility-peers", "serviceName is eligibility-peers")
    check(render, spec.get("updateStrategy", {}).get("type") == "OnDelete", "updateStrategy is OnDelete")
    check(render, value("ELIGIBILITY_PROCESSES") == str(spec.get("replicas")),
          f"ELIGIBILITY_PROCESSES equals spec.replicas (got {value('ELIGIBILITY_PROCESSES')!r} and {spec.get('replicas')!r})")
    peers = value("ELIGIBILITY_PEERS") or ""
    check(render, peers == "eligibility-{i}.eligibility-peers.$(POD_NAMESPACE).svc.cluster.local:2101",
          f"ELIGIBILITY_PEERS names the pods, the headless Service and port 2101 (got {peers!r})")
    check(render, "POD_NAMESPACE" in names and "ELIGIBILITY_PEERS" in names
          and names.index("POD_NAMESPACE") < names.index("ELIGIBILITY_PEERS"),
          "POD_NAMESPACE is defined before ELIGIBILITY_PEERS (else $(POD_NAMESPACE) is not expanded)")
    check(render, env.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace",
          "POD_NAMESPACE from metadata.namespace")
    check(render, env.get("ELIGIBILITY_POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
          "ELIGIBILITY_POD_NAME from metadata.name")
    for variable, key in [("KAFKA_PASSWORD", "kafka-password"), ("ELASTICSEARCH_PASSWORD", "elasticsearch-password")]:
        ref = env.get(variable, {}).get("valueFrom", {}).get("secretKeyRef", {})
        check(render, ref.get("name") == "eligibility-credentials" and ref.get("key") == key,
              f"{variable} from Secret eligibility-credentials key {key}")
    check(render, not any(o["kind"] == "Secret" for o in objects), "no Secret is rendered (credentials are created by the operator)")
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    check(render, ports == {"timely": 2101, "rendezvous": 2102, "metrics": 9464}, f"container ports timely 2101, rendezvous 2102, metrics 9464 (got {ports})")
    requests = container.get("resources", {}).get("requests", {})
    limits = container.get("resources", {}).get("limits", {})
    check(render, requests.get("cpu") == limits.get("cpu") and requests.get("memory") == limits.get("memory")
          and "cpu" in requests and "memory" in requests, "cpu and memory requests equal limits (Guaranteed QoS)")
    # The schema takes any key here (a map of quantities); the API server does not.
    for name in list(requests) + list(limits):
        check(render, name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-") or "/" in name,
              f"{name!r} is a resource name the API server knows (cpu, memory, ephemeral-storage, hugepages-*, domain/name)")
    workers_env = value("ELIGIBILITY_WORKERS")
    check(render, workers_env is not None and "cpu" in requests and cores(requests["cpu"]) == float(workers_env),
          f"CPU request equals ELIGIBILITY_WORKERS (got {requests.get('cpu')!r} and {workers_env!r})")
    # Security.
    check(render, not pod.get("hostNetwork", False), "no hostNetwork")
    check(render, pod.get("securityContext", {}).get("runAsNonRoot") is True, "runAsNonRoot")
    check(render, pod.get("securityContext", {}).get("seccompProfile", {}).get("type") == "RuntimeDefault", "seccomp RuntimeDefault")
    security = container.get("securityContext", {})
    check(render, security.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
    check(render, security.get("allowPrivilegeEscalation") is False, "no privilege escalation")
    check(render, security.get("capabilities", {}).get("drop") == ["ALL"], "all capabilities dropped")
    probes = {p: container.get(p, {}).get("httpGet", {}).get("path") for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    check(render, probes == {"startupProbe": "/health/live", "livenessProbe": "/health/live", "readinessProbe": "/health"},
          f"startup and liveness probes on /health/live, readiness on /health (got {probes})")
    check(render, pod.get("terminationGracePeriodSeconds", 30) >= 60, "terminationGracePeriodSeconds >= 60")
    # Services and budget.
    peers_svc = one(objects, "Service", "eligibility-peers")
    check(render, peers_svc is not None and peers_svc["spec"].get("clusterIP") == "None"
          and peers_svc["spec"].get("publishNotReadyAddresses") is True,
          "Service eligibility-peers is headless and publishes unready pods")
    metrics_svc = one(objects, "Service", "eligibility-metrics")
    check(render, metrics_svc is not None and metrics_svc["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true",
          "Service eligibility-metrics has the Prometheus scrape annotations")
    labels = spec["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        for o in (o for o in objects if o["kind"] == kind):
            selector = o["spec"].get("selector", {})
            selector = selector.get("matchLabels", selector)
            check(render, selector and all(labels.get(k) == v for k, v in selector.items()),
                  f"{kind} {o['metadata']['name']} selects the pods")
    pdb = one(objects, "PodDisruptionBudget")
    check(render, pdb is not None and pdb["spec"].get("maxUnavailable") == 1, "PodDisruptionBudget maxUnavailable 1")
    # The config file.
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    sources = volumes.get("config", {}).get("projected", {}).get("sources", [])
    config_names = [s["configMap"]["name"] for s in sources if "configMap" in s]
    config_map = one(objects, "ConfigMap", config_names[0]) if len(config_names) == 1 else None
    check(render, config_map is not None and "job.toml" in config_map.get("data", {}),
          f"the config volume's ConfigMap {config_names} is rendered with job.toml")
    if config_map is None:
        return None
    job = parse_toml(config_map["data"]["job.toml"])
    check(render, str(job.get("cluster", {}).get("workers")) == workers_env,
          f"job.toml [cluster] workers equals ELIGIBILITY_WORKERS (got {job.get('cluster', {}).get('workers')!r} and {workers_env!r})")
    if tomllib is not None:
        check(render, job.get("kafka", {}).get("client_env", {}).get("sasl.password") == "KAFKA_PASSWORD",
              "job.toml reads the Kafka password from KAFKA_PASSWORD")
        check(render, job.get("sinks", {}).get("elasticsearch", {}).get("auth", {}).get("password_env") == "ELASTICSEARCH_PASSWORD",
              "job.toml reads the Elasticsearch password from ELASTICSEARCH_PASSWORD")
        check(render, job.get("metrics", {}).get("listen") == "0.0.0.0:9464", "job.toml [metrics] listen = 0.0.0.0:9464")
        ca = job.get("sinks", {}).get("elasticsearch", {}).get("tls", {}).get("ca_certificate")
        check(render, ca == "/etc/eligibility/tls/ca.crt"
              and any(s.get("secret", {}).get("name") == "eligibility-ca"
                      and {"key": "ca.crt", "path": "tls/ca.crt"} in s["secret"].get("items", []) for s in sources),
              "ca_certificate /etc/eligibility/tls/ca.crt is mounted from Secret eligibility-ca")
    return spec.get("replicas"), workers_env, container.get("image"), job


def load(path):
    with open(path) as f:
        return [o for o in yaml.safe_load_all(f) if o]


common("base", load(base_file))
objects = load(production_file)
found = common("production", objects)
if found is not None:
    got_replicas, got_workers, got_image, job = found
    check("production", got_replicas == int(replicas), f"replicas {replicas} (got {got_replicas!r})")
    check("production", got_workers == workers, f"ELIGIBILITY_WORKERS {workers!r} (got {got_workers!r})")
    check("production", str(job.get("cluster", {}).get("workers")) == workers, f"job.toml [cluster] workers = {workers} (got {job.get('cluster', {}).get('workers')!r})")
    check("production", job.get("kafka", {}).get("brokers") == brokers, f"job.toml [kafka] brokers = {brokers!r} (got {job.get('kafka', {}).get('brokers')!r})")
    check("production", got_image == image, f"image {image} (got {got_image!r})")
namespaced = [o for o in objects if o["kind"] != "Namespace"]
check("production", all(o["metadata"].get("namespace") == namespace for o in namespaced),
      f"every namespaced object is in namespace {namespace}")

for failure in failures:
    print(f"check failed: {failure}", file=sys.stderr)
print(passed)
sys.exit(1 if failures else 0)
PY
)" || fail "the rendered manifests do not hold what they must (above)"

# Negative control of the Prometheus Operator's schemas: a rule with a misspelt field, and
# an unknown field in the PrometheusRule's spec, must be rejected.
monitoring_typo="$WORK/monitoring-typo.yaml"
sed -e '0,/^    - expr: /s//    - exprr: /' -e '0,/^    - alert: /s//    - alertt: /' \
    -e '0,/^  groups:$/s//  groupss: []\n  groups:/' "${rendered[overlays/production-monitoring]}" >"$monitoring_typo"
for field in exprr alertt groupss; do
    grep -q "$field:" "$monitoring_typo" || fail "could not plant $field in the monitoring render"
done
if typo_report="$(kubeconform_run "$monitoring_typo" "$first_version" 2>&1)"; then
    fail "kubeconform accepted a PrometheusRule with 'exprr', 'alertt' and 'groupss': its schema is not strict"
fi
grep -q "PrometheusRule" <<<"$typo_report" || fail "kubeconform did not name the PrometheusRule: $typo_report"
monitoring_kinds="$(grep -c -E '^kind: (PrometheusRule|ServiceMonitor)$' "${rendered[overlays/production-monitoring]}")"
[ "$monitoring_kinds" = 2 ] || fail "overlays/production-monitoring renders $monitoring_kinds PrometheusRule/ServiceMonitor objects, not 2"

kinds() { grep -c '^kind: ' "$1"; }
say "OK: base ($(kinds "${rendered[base]}") objects), production ($(kinds "${rendered[overlays/production]}") objects) and production-monitoring ($(kinds "${rendered[overlays/production-monitoring]}") objects, with the Prometheus Operator's CRDs) valid against Kubernetes ${K8S_VERSIONS// /, } schemas (kubeconform -strict), a planted typo rejected, $checks assertions hold ($((SECONDS - started)) s)"
