#!/usr/bin/env bash
# `make demo`: the whole pipeline for the demo plan on this machine, with nothing from the
# internet but the package registries.
#
#   1. two loopback registries (R: push target, M: mirror), their data under .demo/ in the
#      repository root; kept between runs and reused when they already answer;
#   2. the base image (Debian bookworm from mmdebstrap, cached) pushed to R, pinned by digest;
#   3. `imagekit pipeline demo --registry R --mirror M --base R/...@sha256:...`;
#   4. the ledger records this run added, `imagekit ledger verify`, and where the evidence is.
#
# The demo's ledger and evidence live under .demo/ too (IMAGEKIT_LEDGER, IMAGEKIT_EVIDENCE_DIR)
# so that a demo never writes loopback records into the project's own ledger.
# `scripts/demo.sh --stop` (make clean-demo) stops the registries; `--purge` also deletes .demo/.
set -euo pipefail
script=demo
# shellcheck source=scripts/lib/registries.sh
. "$(dirname "$0")/lib/registries.sh"
registry_port=${IMAGEKIT_DEMO_REGISTRY_PORT:-5101}
mirror_port=${IMAGEKIT_DEMO_MIRROR_PORT:-5102}
registries=("registry:$registry_port" "mirror:$mirror_port")
imagekit=$root/.venv/bin/imagekit

case "${1:-}" in
  --stop) stop_all; exit 0 ;;
  --purge) stop_all; rm -rf "$state"; log "removed .demo/"; exit 0 ;;
  "") ;;
  *) log "usage: scripts/demo.sh [--stop|--purge]"; exit 2 ;;
esac

[ -x "$imagekit" ] || { log "run scripts/setup-host.sh first (make demo does)"; exit 3; }
command -v docker-registry >/dev/null || { log "docker-registry is missing: make setup"; exit 3; }
mkdir -p "$state"
start_all

registry=127.0.0.1:$registry_port
mirror=127.0.0.1:$mirror_port
log "making sure the base image is in $registry (first run: mmdebstrap, about a minute)"
base=$("$python" -c '
import shutil, sys
from tests.support.base_image import push_base
client = "/usr/bin/docker" if shutil.which("/usr/bin/docker") else (shutil.which("docker") or "docker")
print(push_base(client, sys.argv[1]).reference)
' "$registry")
log "base: $base"

export IMAGEKIT_LEDGER=$state/ledger.jsonl
export IMAGEKIT_EVIDENCE_DIR=$state/evidence
before=0
if [ -s "$IMAGEKIT_LEDGER" ]; then
  before=$(wc -l <"$IMAGEKIT_LEDGER")
fi

set +e
"$imagekit" pipeline demo --registry "$registry" --mirror "$mirror" --base "$base"
status=$?
set -e

echo
echo "== ledger records this run added ($IMAGEKIT_LEDGER) =="
"$python" - "$IMAGEKIT_LEDGER" "$before" <<'EOF'
import json, sys
path, before = sys.argv[1], int(sys.argv[2])
try:
    lines = open(path, encoding="utf-8").read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines[before:]:
    r = json.loads(line)
    roles = r["images"]
    image = next((roles[k] for k in ("pushed", "destination", "image") if k in roles), "")
    print(f'#{r["seq"]:<4} {r["kind"]:<18} {r["status"]:<26} {image}')
EOF
echo
echo "== imagekit ledger verify =="
set +e
"$imagekit" ledger verify --ledger "$IMAGEKIT_LEDGER"
verify=$?
set -e
echo
cat <<EOF
== where to look ==
  evidence: build logs, doctor and audit reports in .demo/evidence/demo/,
            mirror reports in .demo/evidence/mirror/, final pulls in .demo/evidence/pull/
  the pipeline summary as JSON:   ls -t .demo/evidence/demo/pipeline/*/pipeline.json | head -1
  every record of the plan:       IMAGEKIT_LEDGER=.demo/ledger.jsonl .venv/bin/imagekit ledger show --plan demo
  run it again:                   make demo   (registries and base are reused)
  stop the registries:            make clean-demo   (data stays in .demo/; scripts/demo.sh --purge removes it)
EOF
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
exit "$verify"
