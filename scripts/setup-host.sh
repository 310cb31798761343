#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (as root) for imagekit's tests and demo, idempotently:
#   - Debian's docker.io, docker-registry, skopeo, mmdebstrap, apache2-utils, umoci, tinyproxy
#     (a real HTTPS_PROXY in front of the TLS registry), time (the benchmarks' peak RSS) and qemu-user-static + binfmt-support + arch-test
#     (foreign-architecture images), containernetworking-plugins (the test cluster's CNI
#     loopback), only when missing; qemu's binfmt_misc handlers
#     registered when the kernel has none;
#   - the Docker engine, started without the default bridge when no engine answers;
#   - crane, regctl, oras, cosign, buildctl, buildkitd, the docker buildx plugin, Kyverno's
#     CLI and the policy-controller's tester, built from the Go module proxy at pinned
#     versions into .tools/bin (scripts/lib/go-tools.sh);
#   - the test cluster's Kubernetes (etcd, kube-apiserver, kube-controller-manager,
#     kube-scheduler, kubelet, kubectl: one binary) and its pause binary, likewise
#     (scripts/lib/kube.sh);
#   - .venv with imagekit and its test extras, reinstalled only when its inputs changed.
# Every step is skipped when already done, so a warm run takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup-host: %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# 1. Debian packages. Where an engine already answers (a CI runner with Docker's own
# packages, say), Debian's docker.io is not installed over it: the two conflict.
packages=(docker-registry skopeo mmdebstrap apache2-utils umoci qemu-user-static binfmt-support arch-test time golang-docker-credential-helpers pass tinyproxy containernetworking-plugins)
if ! docker info >/dev/null 2>&1 && ! /usr/bin/docker info >/dev/null 2>&1; then
  packages=(docker.io "${packages[@]}")
fi
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
# qemu's binfmt handlers (flag F) let mmdebstrap and the engine run arm64 binaries here; they
# need binfmt_misc mounted, which a container-like VM may not have done.
if [ -d /proc/sys/fs/binfmt_misc ] && [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
  as_root mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && command -v update-binfmts >/dev/null; then
  as_root update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi
# Debian's package enables its own registry on :5000 with htpasswd auth; the tests start their
# own registries on free loopback ports, so the packaged service is not needed.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
  as_root systemctl stop docker-registry || true
fi
# tinyproxy's packaged service (:8888) likewise: the tests start their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet tinyproxy 2>/dev/null; then
  as_root systemctl stop tinyproxy || true
fi

# qemu-user-static's binfmt handlers (flag F: the interpreter is opened at registration, so
# it works inside containers) let the engine run linux/arm64 images here, for the assertions
# and audits of images `imagekit build --builder registry` assembles for another architecture.
# Where binfmt_misc is not mounted (some containers and VMs), mount it first; a machine that
# refuses either step simply cannot emulate, and imagekit then says NOT RUN, never a pass.
if [ -d /proc/sys/fs/binfmt_misc ] && [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  as_root mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
fi
if [ -e /proc/sys/fs/binfmt_misc/register ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] \
  && command -v update-binfmts >/dev/null 2>&1; then
  for handler in /var/lib/binfmts/qemu-*; do  # qemu's handlers only, nothing else's
    [ -e "$handler" ] && as_root update-binfmts --enable "$(basename "$handler")" >/dev/null 2>&1 || true
  done
fi

# 2. The engine. Debian's client (/usr/bin/docker) is used to ask when it is there.
client=/usr/bin/docker
[ -x "$client" ] || client=$(command -v docker)
if ! "$client" info >/dev/null 2>&1; then
  log "starting dockerd (no default bridge, no iptables)"
  # No container may reach private address ranges here: no bridge at all, builds use
  # --network host and audits --network none.
  # Its BuildKit keeps at most 10 GB of build cache: without a limit the replica builds of
  # the seed tests (5.5 GB layers) pile up run after run until the disk is full. A machine
  # with its own /etc/docker/daemon.json keeps that file's settings instead.
  config_args=""
  if [ ! -e /etc/docker/daemon.json ]; then
    engine_config="${XDG_CACHE_HOME:-$HOME/.cache}/imagekit/dockerd.json"
    mkdir -p "$(dirname "$engine_config")"
    printf '%s\n' '{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "10GB"}}}' \
      >"$engine_config"
    config_args="--config-file $engine_config"
  fi
  as_root sh -c "nohup dockerd --bridge=none --iptables=false --ip-masq=false $config_args \
    >/var/log/imagekit-dockerd.log 2>&1 &"
  for _ in $(seq 1 60); do
    "$client" info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! "$client" info >/dev/null 2>&1; then
    log "dockerd did not answer within 60 s; its log is /var/log/imagekit-dockerd.log"
    tail -n 20 /var/log/imagekit-dockerd.log >&2 || true
    exit 3
  fi
fi

# 3. The Go tools (crane, regctl, oras, cosign, buildctl, buildkitd, docker buildx, kyverno,
# policy-tester), built from the Go module proxy into a cache keyed by version:
# scripts/lib/go-tools.sh.
root=$(pwd)
# shellcheck source=lib/go-tools.sh
source scripts/lib/go-tools.sh
install_go_tools || exit 3
# The test cluster's Kubernetes, from the same proxy into the same cache: scripts/lib/kube.sh.
# shellcheck source=lib/kube.sh
source scripts/lib/kube.sh
install_kube || exit 3

# 4. The virtual environment, keyed by the files that decide its content.
python=${PYTHON:-python3}
stamp_inputs=$(cat pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-16)
stamp=.venv/.imagekit-installed-$stamp_inputs
if [ ! -f "$stamp" ]; then
  log "creating .venv and installing imagekit[test]"
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade "pip>=24" >/dev/null
  constraint_args=()
  [ -f constraints.txt ] && constraint_args=(-c constraints.txt)
  .venv/bin/python -m pip install -q "${constraint_args[@]}" -e '.[test]'
  rm -f .venv/.imagekit-installed-*
  touch "$stamp"
fi
# 5. Disk. A `make test` with warm caches and an emptied engine took about 19 GB at its peak
# (measured 2026-12-05: 55.7 GB free before, 37.1 GB at the lowest, 47 GB after, the rest
# the engine's images and build cache): the replicas loaded into the engine, the tests'
# registries and BuildKit daemons. With less the doctor's disk check says no in the middle
# of the run, rightly (a CI run failed so, 2.3 GiB free); say it here, once, before the tests.
seen_devices=" "
for dir in "$("$client" info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)" \
  "${TMPDIR:-/tmp}"; do
  read -r free_gb device < <(df -P -BG "$dir" 2>/dev/null | awk 'NR == 2 {sub("G", "", $4); print $4, $1}') || continue
  case "$seen_devices" in *" $device "*) continue ;; esac  # one line per device
  seen_devices="$seen_devices$device "
  if [ -n "$free_gb" ] && [ "$free_gb" -lt 25 ]; then
    log "warning: ${free_gb} GB free under $dir; the test suite needs about 25 GB there at its peak (remove images you no longer need with \`docker image prune\`, or old folders under ${TMPDIR:-/tmp})"
  fi
done
log "ready: $("$client" version --format 'engine {{.Server.Version}}'), $(.venv/bin/python --version)"
