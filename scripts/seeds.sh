#!/usr/bin/env bash
# `make seeds`: the field reports' three plans (m3-cu13, m3-vllm, h3-spark) end to end on
# replica bases made here from real packages (tests/support/replicas.py), one table at the end.
#
#   1. three loopback registries, their data under .seeds/ (kept between runs and reused):
#      B 127.0.0.1:5113 holds the replica bases (in place of the upstream registries),
#      R 127.0.0.1:5111 is the push target, M 127.0.0.1:5112 the mirror;
#   2. a signing key pair under .seeds/ (`imagekit keys generate .seeds/signing`, made once and
#      never committed: .seeds/ is ignored), handed to every command as IMAGEKIT_SIGNING_KEY,
#      so every stage attests beside the image it proved something about;
#   3. `python -m tests.support.seeds`: replica bases pushed to B (built when missing, cached
#      under ~/.cache/imagekit/replicas), each base audited, each plan's chain run with
#      imagekit's own commands, `imagekit ledger verify`, then the gate from the registries
#      alone (`imagekit verify` and `cosign verify-attestation` of each pushed image and of
#      its mirror, the final image), the table. m3-cu13's replica
#      carries the real CUDA 13 torch 2.11.0 from the package index (about 2.7 GB of
#      wheels, 5.5 GB installed), whose compiled arch list the audits read without a GPU.
#
# The ledger and the evidence go under .seeds/ (IMAGEKIT_LEDGER, IMAGEKIT_EVIDENCE_DIR), never
# into the project's own. `scripts/seeds.sh --stop` (make clean-seeds) stops the registries;
# `--purge` also deletes .seeds/ and untags the engine's images of those registries. The ports
# differ from `make demo`'s 5101/5102. `scripts/seeds.sh --only m3-vllm` runs one plan's part
# (--only again for another).
set -euo pipefail
script=seeds
# shellcheck source=scripts/lib/registries.sh
. "$(dirname "$0")/lib/registries.sh"
bases_port=${IMAGEKIT_SEEDS_BASES_PORT:-5113}
registry_port=${IMAGEKIT_SEEDS_REGISTRY_PORT:-5111}
mirror_port=${IMAGEKIT_SEEDS_MIRROR_PORT:-5112}
registries=("bases:$bases_port" "registry:$registry_port" "mirror:$mirror_port")

case "${1:-}" in
  --stop) stop_all; exit 0 ;;
  --purge)
    stop_all; rm -rf "$state"; log "removed $shown/"
    # What the runs left in the engine under the three registries' names (replica bases,
    # final pulls); an image another name still holds stays.
    client=/usr/bin/docker; [ -x "$client" ] || client=docker
    "$client" images --digests --format '{{.Repository}}@{{.Digest}}' \
      | grep -E "^127\.0\.0\.1:($bases_port|$registry_port|$mirror_port)/" \
      | xargs -r "$client" rmi >/dev/null 2>&1 || true
    exit 0 ;;
  "" | --only) ;;
  *) log "usage: scripts/seeds.sh [--stop|--purge|--only PLAN ...]"; exit 2 ;;
esac
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --only) [ $# -ge 2 ] || { log "--only needs a plan name"; exit 2; }; only+=(--only "$2"); shift 2 ;;
    *) log "usage: scripts/seeds.sh [--stop|--purge|--only PLAN ...]"; exit 2 ;;
  esac
done

[ -x "$root/.venv/bin/imagekit" ] || { log "run scripts/setup-host.sh first (make seeds does)"; exit 3; }
for tool in docker-registry skopeo mmdebstrap; do
  command -v "$tool" >/dev/null || { log "$tool is missing: make setup"; exit 3; }
done
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  log "no qemu-aarch64 binfmt handler: the arm64 replica cannot be made (make setup installs" \
    "qemu-user-static and binfmt-support)"
  exit 3
fi
mkdir -p "$state"
start_all

export IMAGEKIT_LEDGER=$state/ledger.jsonl
export IMAGEKIT_EVIDENCE_DIR=$state/evidence
if [ ! -f "$state/signing.key" ] || [ ! -f "$state/signing.pub" ]; then
  rm -f "$state/signing.key" "$state/signing.pub"
  "$root/.venv/bin/imagekit" keys generate "$state/signing" >&2
  log "made the seeds' signing key pair: $shown/signing.key (private, stays here), $shown/signing.pub"
fi
export IMAGEKIT_SIGNING_KEY=$state/signing.key
run=$state/runs/$(date -u +%Y%m%dT%H%M%SZ)
log "replica bases are built when missing (on a fresh machine 7 to 10 minutes, most of it the CUDA torch's root filesystem and the arm64 replica under qemu)"
set +e
"$python" -m tests.support.seeds --bases "127.0.0.1:$bases_port" \
  --registry "127.0.0.1:$registry_port" --mirror "127.0.0.1:$mirror_port" \
  --out "$run" --key "$state/signing.pub" "${only[@]}"
status=$?
set -e
cat <<INFO

== where to look ==
  this run's table and summary:   ${run#"$root"/}/table.txt, summary.json
  evidence (audits, builds, ...): $shown/evidence/
  the ledger:                     IMAGEKIT_LEDGER=$shown/ledger.jsonl .venv/bin/imagekit ledger show
  stop the registries:            make clean-seeds   (scripts/seeds.sh --purge also removes $shown/)
INFO
exit "$status"
