#!/usr/bin/env bash
# The container image of `eligibility` (Containerfile), built and tried with buildah: no
# daemon, no registry needed. See docs/kubernetes.md, "The image".
#
#   scripts/image.sh build         build the image ($ELIGIBILITY_IMAGE) from the Containerfile
#   scripts/image.sh smoke         run it: `eligibility demo`, and `eligibility run` on a
#                                  generated log compared byte for byte with the same binary
#                                  outside the image; check what the image holds; print its size
#   scripts/image.sh push DEST     copy it to DEST, any transport buildah knows, e.g.
#                                  docker://ghcr.io/ORG/eligibility:0.1.0-abc1234 (after
#                                  `buildah login ghcr.io`), docker-archive:/tmp/e.tar, oci:/tmp/e;
#                                  prints the digest to pin in the overlay
#   scripts/image.sh available     exit 0 if this machine can build (root, and buildah
#                                  installed or installable with apt-get); else say why
#
# How `build` builds. The Containerfile has a `build` stage (cargo, in ELIGIBILITY_BUILDER_IMAGE)
# and a runtime stage (ELIGIBILITY_RUNTIME_IMAGE plus CA certificates and libssl3/zlib from
# apt). The script first pulls both bases:
#   - a base that pulls is used as it is;
#   - with no runtime base, one is made from Debian's packages with mmdebstrap (Debian 12,
#     minbase, without docs, man pages and locales: about what debian:bookworm-slim holds)
#     and the Containerfile's runtime stage runs on it as written;
#   - with no builder image, the binary is compiled here (`cargo build --release --locked`,
#     so on a Debian 12 host: the binary links this machine's glibc) and handed to the
#     Containerfile as its `build` stage (buildah bud --build-context build=DIR).
# The script says which it did, and labels the image with it (eligibility.image.binary,
# eligibility.image.base). Everything else is the Containerfile's, on either path.
#
# Needs root: buildah runs with --storage-driver vfs --isolation chroot (no daemon, no
# runc), and mmdebstrap with --mode=root. buildah and mmdebstrap are installed with
# apt-get when missing. Without root, build with `podman build -f Containerfile .`.
#
# Environment:
#   ELIGIBILITY_IMAGE            image name (default localhost/eligibility:dev)
#   ELIGIBILITY_IMAGE_STORE      buildah storage, the base root filesystem and smoke files
#                                (default /var/tmp/eligibility-image; outside the repository)
#   ELIGIBILITY_IMAGE_FROM       auto (default): pull what can be pulled, make the rest here;
#                                registry: both bases must pull; local: pull nothing
#   ELIGIBILITY_BUILDER_IMAGE    default: the Containerfile's ARG BUILDER_IMAGE
#   ELIGIBILITY_RUNTIME_IMAGE    default: the Containerfile's ARG RUNTIME_IMAGE
#   ELIGIBILITY_PULL_TIMEOUT     seconds one pull may take (default 900)
#   ELIGIBILITY_BASE_MAX_AGE     days before the mmdebstrap base is made anew (default 7)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

IMAGE="${ELIGIBILITY_IMAGE:-localhost/eligibility:dev}"
STORE="${ELIGIBILITY_IMAGE_STORE:-/var/tmp/eligibility-image}"
FROM_MODE="${ELIGIBILITY_IMAGE_FROM:-auto}"
PULL_TIMEOUT="${ELIGIBILITY_PULL_TIMEOUT:-900}"
BASE_MAX_AGE="${ELIGIBILITY_BASE_MAX_AGE:-7}"
containerfile_arg() { sed -n "s/^ARG $1=//p" "$ROOT/Containerfile" | head -n 1; }
BUILDER_IMAGE="${ELIGIBILITY_BUILDER_IMAGE:-$(containerfile_arg BUILDER_IMAGE)}"
RUNTIME_IMAGE="${ELIGIBILITY_RUNTIME_IMAGE:-$(containerfile_arg RUNTIME_IMAGE)}"
LOCAL_BASE="localhost/eligibility-base:bookworm"
BASE_TAR="$STORE/debian-bookworm-minbase.tar"

export BUILDAH_ISOLATION=chroot
BUILDAH=(buildah --root "$STORE/storage" --runroot "$STORE/run" --storage-driver vfs)

say() { printf '== image: %s\n' "$*" >&2; }
die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }

# Why this machine cannot build, or nothing.
unavailable_reason() {
    if [ "$(id -u)" != 0 ]; then
        echo "not root (buildah with vfs storage and chroot isolation, and mmdebstrap, run as root here)"
    elif ! command -v buildah >/dev/null && ! command -v apt-get >/dev/null; then
        echo "no buildah, and no apt-get to install it"
    fi
}

# Installs Debian packages for the commands named, when missing.
need() {
    local missing=() command
    for command in "$@"; do command -v "$command" >/dev/null || missing+=("$command"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]}, and no apt-get to install them"
    say "installing ${missing[*]} (Debian packages)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

have_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# Pulls an image; fails (quickly, where no registry answers) when it cannot. A localhost/
# name is an image of this store, not pulled.
pull() {
    local log="$STORE/pull.log"
    if [[ "$1" == localhost/* ]]; then
        have_image "$1" && return 0
        say "no image $1 in $STORE/storage"
        return 1
    fi
    if timeout "$PULL_TIMEOUT" "${BUILDAH[@]}" pull --quiet "$1" >"$log" 2>&1; then
        return 0
    fi
    say "cannot pull $1: $(grep -m1 -i 'error' "$log" || tail -n 1 "$log")"
    return 1
}

# A Debian 12 base from Debian's packages, as an image named $LOCAL_BASE.
make_local_base() {
    if have_image "$LOCAL_BASE" && [ -f "$BASE_TAR" ] && [ -z "$(find "$BASE_TAR" -mtime "+$BASE_MAX_AGE")" ]; then
        say "runtime base: $LOCAL_BASE, made by mmdebstrap on $(date -r "$BASE_TAR" '+%F %R') (kept $BASE_MAX_AGE days)"
        return 0
    fi
    need mmdebstrap
    # The host's apt sources, so the base comes from the same mirror as the host's packages.
    local sources=()
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then sources=(/etc/apt/sources.list.d/debian.sources); fi
    say "runtime base: making Debian 12 (minbase) with mmdebstrap into $BASE_TAR"
    rm -f "$BASE_TAR.part"
    # shellcheck disable=SC2016 # $1 is the hook's argument, the root filesystem
    mmdebstrap --mode=root --variant=minbase --format=tar \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --aptopt='Acquire::Languages "none"' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
        bookworm "$BASE_TAR.part" "${sources[@]}" >"$STORE/mmdebstrap.log" 2>&1 ||
        { tail -n 30 "$STORE/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $STORE/mmdebstrap.log)"; }
    mv "$BASE_TAR.part" "$BASE_TAR"
    local ctr
    ctr="$("${BUILDAH[@]}" from scratch)"
    "${BUILDAH[@]}" add --quiet "$ctr" "$BASE_TAR" / >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd bash --label "eligibility.image.base=mmdebstrap bookworm minbase" "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$LOCAL_BASE" >/dev/null
}

build() {
    [ -z "$(unavailable_reason)" ] || die "cannot build here: $(unavailable_reason)"
    need buildah
    mkdir -p "$STORE"
    local started=$SECONDS runtime_base builder binary_from base_from
    # --pull=false: use a base that is in the store (just pulled, or made here).
    local args=(--isolation chroot --pull=false -f Containerfile)

    local pull_builder=1 pull_runtime=1
    case "$FROM_MODE" in
        auto | registry) ;;
        local) pull_builder=0 pull_runtime=0 ;;
        *) die "ELIGIBILITY_IMAGE_FROM must be auto, registry or local, not $FROM_MODE" ;;
    esac

    if [ $pull_runtime = 1 ] && pull "$RUNTIME_IMAGE"; then
        runtime_base="$RUNTIME_IMAGE" base_from="$RUNTIME_IMAGE"
        say "runtime base: $RUNTIME_IMAGE"
    else
        [ "$FROM_MODE" != registry ] || die "ELIGIBILITY_IMAGE_FROM=registry, and $RUNTIME_IMAGE does not pull"
        make_local_base
        runtime_base="$LOCAL_BASE" base_from="mmdebstrap: Debian 12 minbase from Debian's packages"
    fi
    args+=(--build-arg "RUNTIME_IMAGE=$runtime_base")

    if [ $pull_builder = 1 ] && pull "$BUILDER_IMAGE"; then
        builder="$BUILDER_IMAGE" binary_from="Containerfile build stage in $BUILDER_IMAGE"
        say "binary: the Containerfile's build stage, in $BUILDER_IMAGE"
        args+=(--build-arg "BUILDER_IMAGE=$builder")
    else
        [ "$FROM_MODE" != registry ] || die "ELIGIBILITY_IMAGE_FROM=registry, and $BUILDER_IMAGE does not pull"
        # shellcheck disable=SC1091 # the host's release file
        (. /etc/os-release && [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]) ||
            die "no builder image, and this host is not Debian 12: a binary compiled here would not match the bookworm base"
        say "binary: no builder image; compiling here with cargo build --release --locked -p eligibility"
        cargo build --release --locked -p eligibility
        local context="$STORE/build-context"
        rm -rf "$context"
        mkdir -p "$context/out"
        # What the build stage does after cargo: drop the debug line tables, keep symbols.
        objcopy --strip-debug target/release/eligibility "$context/out/eligibility"
        binary_from="cargo build --release --locked -p eligibility on this host ($(rustc --version))"
        args+=(--build-context "build=$context")
    fi

    local revision
    revision="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
    if [ -n "$(git status --porcelain -- Cargo.toml Cargo.lock src dataflows 2>/dev/null)" ]; then
        revision="$revision-dirty"
    fi
    args+=(--label "org.opencontainers.image.title=eligibility"
        --label "org.opencontainers.image.version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
        --label "org.opencontainers.image.revision=$revision"
        --label "eligibility.image.binary=$binary_from"
        --label "eligibility.image.base=$base_from")

    say "buildah bud -f Containerfile -t $IMAGE . (log: $STORE/build.log)"
    "${BUILDAH[@]}" bud "${args[@]}" -t "$IMAGE" . >"$STORE/build.log" 2>&1 ||
        { tail -n 40 "$STORE/build.log" >&2; die "buildah bud failed (log: $STORE/build.log)"; }
    # vfs keeps full copies of every layer: drop the intermediate images of older builds.
    "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
    say "built $IMAGE ($(image_size)) in $((SECONDS - started)) s"
    say "  binary: $binary_from"
    say "  base:   $base_from"
}

image_size() { "${BUILDAH[@]}" images --format '{{.Size}}' "$IMAGE" | head -n 1; }

# Runs a command in container $1 as the image's user.
in_image() {
    local ctr="$1"
    shift
    "${BUILDAH[@]}" run --isolation chroot "$ctr" -- "$@"
}

smoke() {
    [ -z "$(unavailable_reason)" ] || die "cannot run the image here: $(unavailable_reason)"
    command -v buildah >/dev/null || die "no buildah: run scripts/image.sh build first"
    have_image "$IMAGE" || die "no image $IMAGE: run scripts/image.sh build first"
    local started=$SECONDS mnt
    # Globals: the EXIT trap removes them after this function has returned.
    work="$(mktemp -d "$STORE/smoke.XXXXXX")"
    ctr=""
    # shellcheck disable=SC2317 # called by the trap
    cleanup() {
        if [ -n "$ctr" ]; then "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true; fi
        rm -rf "$work"
    }
    trap cleanup EXIT

    say "smoke of $IMAGE, revision $(label org.opencontainers.image.revision), built $("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Created}}' "$IMAGE")"
    say "  binary: $(label eligibility.image.binary)"
    say "  base:   $(label eligibility.image.base)"

    # The configuration k8s/base/statefulset.yaml relies on.
    local user entrypoint ports
    user="$("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")"
    entrypoint="$("${BUILDAH[@]}" inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$IMAGE")"
    # shellcheck disable=SC2016 # a Go template, not a shell expansion
    ports="$("${BUILDAH[@]}" inspect --type image --format '{{range $port, $_ := .OCIv1.Config.ExposedPorts}}{{$port}} {{end}}' "$IMAGE")"
    [ "$user" = 65532:65532 ] || die "the image's user is '$user', not 65532:65532"
    [ "$entrypoint" = 'eligibility ' ] || die "the image's entrypoint is '$entrypoint', not [\"eligibility\"]"
    for port in 2101 2102 9464; do
        [[ " $ports" == *" $port/tcp "* ]] || die "port $port is not exposed ($ports)"
    done
    say "config: user $user, entrypoint [${entrypoint% }], ports ${ports% }"

    ctr="$("${BUILDAH[@]}" from --pull=never --quiet -v "$work:/smoke" "$IMAGE")"
    mnt="$("${BUILDAH[@]}" mount "$ctr")"
    check_contents "$mnt"

    chown 65532:65532 "$work"
    local uid
    uid="$(in_image "$ctr" id -u)"
    [ "$uid" = 65532 ] || die "commands in the image run as uid $uid"

    say "eligibility demo (in the image, uid $uid)"
    in_image "$ctr" eligibility demo --output-dir /smoke/demo >"$work/demo.txt" 2>&1 ||
        { cat "$work/demo.txt" >&2; die "eligibility demo failed in the image"; }
    if ! grep -q '^Ran the job' "$work/demo.txt" || ! grep -q 'pairs exist' "$work/demo.txt" ||
        ! grep -q '^Seller .* can join' "$work/demo.txt"; then
        cat "$work/demo.txt" >&2
        die "eligibility demo did not get to the end"
    fi
    [ -s "$work/demo/changes.jsonl" ] || die "the demo wrote no change log"
    sed 's/^/   | /' "$work/demo.txt" | head -n 8 >&2

    say "eligibility generate + run in file mode (in the image)"
    local run=(run --input /smoke/events.jsonl --output /smoke/changes.jsonl
        --dead-letter /smoke/rejected.jsonl --batch-size 500 --workers 2 --progress-secs 0)
    in_image "$ctr" eligibility generate --products 2000 --updates 2000 --seed 16 \
        --output /smoke/events.jsonl >"$work/generate.txt" 2>&1 ||
        { cat "$work/generate.txt" >&2; die "eligibility generate failed in the image"; }
    in_image "$ctr" eligibility "${run[@]}" >"$work/run.txt" 2>&1 ||
        { cat "$work/run.txt" >&2; die "eligibility run failed in the image"; }
    [ -s "$work/changes.jsonl" ] || die "eligibility run wrote an empty change log"
    head -c 1 "$work/changes.jsonl" | grep -q '{' || die "the change log is not JSONL"
    tail -n 2 "$work/run.txt" | sed 's/^/   | /' >&2

    # The same binary outside the image, on the same log: the image's libraries, CA store
    # and user change nothing in the output. (In the local-compile path this binary is the
    # host's release build, stripped of its debug line tables.)
    say "the same run with the image's binary outside the image"
    local host="$work/host"
    mkdir -p "$host"
    cp "$mnt/usr/local/bin/eligibility" "$host/eligibility"
    "$host/eligibility" generate --products 2000 --updates 2000 --seed 16 \
        --output "$host/events.jsonl" >/dev/null 2>&1
    cmp "$work/events.jsonl" "$host/events.jsonl" || die "generate wrote another log outside the image"
    (cd "$host" && ./eligibility run --input events.jsonl --output changes.jsonl \
        --dead-letter rejected.jsonl --batch-size 500 --workers 2 --progress-secs 0 >/dev/null 2>&1)
    cmp "$work/changes.jsonl" "$host/changes.jsonl" || die "the change logs differ"
    cmp "$work/rejected.jsonl" "$host/rejected.jsonl" || die "the dead letters differ"
    say "file mode: $(wc -l <"$work/events.jsonl") events -> $(wc -l <"$work/changes.jsonl") changes, $(wc -l <"$work/rejected.jsonl") dead letters; byte for byte the same outside the image"
    # For information: this work tree's own release build, which may be another build than
    # the image's (newer sources, or the image compiled in the builder image).
    if [ -x target/release/eligibility ]; then
        (cd "$host" && "$ROOT/target/release/eligibility" run --input events.jsonl --output changes-host.jsonl \
            --dead-letter rejected-host.jsonl --batch-size 500 --workers 2 --progress-secs 0 >/dev/null 2>&1) || true
        if cmp -s "$work/changes.jsonl" "$host/changes-host.jsonl"; then
            say "target/release/eligibility on the same log: the same change log"
        else
            say "target/release/eligibility on the same log: another change log (not a failure: it is another build)"
        fi
    fi

    "${BUILDAH[@]}" umount "$ctr" >/dev/null
    say "image size: $(image_size) unpacked, $(compressed_size) compressed (what a registry stores and a node pulls)"
    say "smoke passed in $((SECONDS - started)) s"
}

label() { "${BUILDAH[@]}" inspect --type image --format "{{index .OCIv1.Config.Labels \"$1\"}}" "$IMAGE"; }

# No compiler, no sources or test data, no secrets: checked on the image's root filesystem.
check_contents() {
    local mnt="$1" found
    found="$(find "$mnt" -xdev \( -type f -perm /111 -o -type l \) \( -name cargo -o -name 'rustc*' -o -name rustup \
        -o -name 'gcc*' -o -name 'g++*' -o -name cc -o -name c++ -o -name 'cc1*' -o -name 'clang*' \
        -o -name cpp -o -name ld -o -name ld.bfd -o -name ld.gold -o -name as -o -name make \) -printf '/%P\n')"
    [ -z "$found" ] || die "a compiler in the image: $found"
    # shellcheck disable=SC2016 # a dpkg-query format, not a shell expansion
    found="$(chroot "$mnt" dpkg-query -W -f '${Package}\n' |
        grep -E '^(gcc(-[0-9]+)?|g\+\+(-[0-9]+)?|cpp(-[0-9]+)?|clang.*|binutils.*|libc6-dev|libssl-dev|make|rustc|cargo|perl)$' || true)"
    [ -z "$found" ] || die "build packages in the image: $found"

    found="$(find "$mnt" -xdev -type f \( -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock \
        -o -name '*.jsonl' -o -name '*.proptest-regressions' \) -printf '/%P\n')"
    [ -z "$found" ] || die "sources or data in the image: $found"
    found="$(find "$mnt" -xdev -type d \( -name target -o -name dataflows -o -name .git \) -printf '/%P\n')"
    [ -z "$found" ] || die "build output or a repository in the image: $found"
    found="$(find "$mnt/usr/local" -type f -printf '/usr/local/%P\n')"
    [ "$found" = /usr/local/bin/eligibility ] || die "/usr/local holds more than the binary: $found"

    # Private keys, credential files; public CA certificates are expected.
    found="$(grep -rlI --exclude-dir=proc --exclude-dir=sys -e '-----BEGIN [A-Z ]*PRIVATE KEY-----' "$mnt" 2>/dev/null |
        sed "s|^$mnt||" || true)"
    [ -z "$found" ] || die "a private key in the image: $found"
    # The Secrets' keys (docs/kubernetes.md), the mounted config, and the usual credential files.
    found="$(find "$mnt" -xdev -type f \( -name kafka-password -o -name elasticsearch-password \
        -o -name job.toml -o -name ca.crt -o -name '*.key' -o -name '*.p12' -o -name '*.pfx' \
        -o -name .env -o -name 'id_rsa*' -o -name 'id_ed25519*' -o -name .netrc -o -name auth.json \
        -o -name .git-credentials -o -name 'credentials*' \) -printf '/%P\n')"
    [ -z "$found" ] || die "files that look like secrets or config in the image: $found"
    [ -z "$(ls -A "$mnt/etc/ssl/private" 2>/dev/null)" ] || die "/etc/ssl/private is not empty"
    found="$("${BUILDAH[@]}" inspect --type image --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$IMAGE" |
        grep -iE 'pass|secret|token|key' || true)"
    [ -z "$found" ] || die "the image's environment names a secret: $found"
    say "contents: no compiler or build packages, no sources or data, no keys or credentials; /usr/local holds only the binary ($(du -h "$mnt/usr/local/bin/eligibility" | cut -f1))"
}

# The image's layers as a registry stores them: pushed to an OCI layout (gzip) and added up.
compressed_size() {
    local layout="$work/oci"
    "${BUILDAH[@]}" push --quiet "$IMAGE" "oci:$layout" >/dev/null 2>&1 || { echo "?"; return; }
    du -sb "$layout/blobs" | awk '{ printf "%.1f MB", $1 / 1e6 }'
}

push() {
    local dest="${1:-}"
    [ -n "$dest" ] || die "usage: scripts/image.sh push DEST (e.g. docker://ghcr.io/ORG/eligibility:TAG)"
    have_image "$IMAGE" || die "no image $IMAGE: run scripts/image.sh build first"
    local digestfile="$STORE/push.digest"
    "${BUILDAH[@]}" push --digestfile "$digestfile" "$IMAGE" "$dest"
    say "pushed $IMAGE to $dest, digest $(cat "$digestfile")"
}

case "${1:-}" in
    build) build ;;
    smoke) smoke ;;
    push) push "${2:-}" ;;
    available)
        reason="$(unavailable_reason)"
        if [ -n "$reason" ]; then echo "$reason"; exit 1; fi
        ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
