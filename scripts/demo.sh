#!/usr/bin/env bash
# `make demo`: the whole pipeline for the demo plan on this machine, with nothing from the
# internet but the package registries.
#
#   1. two loopback registries (R: push target, M: mirror), their data under .demo/ in the
#      repository root (IMAGEKIT_DEMO_STATE moves the whole folder: key pair, ledger,
#      evidence and all); kept between runs and reused when they already answer;
#   2. the base image (Debian bookworm from mmdebstrap, cached) pushed to R, pinned by digest;
#   3. a signing key pair under .demo/ (`imagekit keys generate .demo/signing`, made once and
#      never committed: .demo/ is ignored);
#   4. `imagekit pipeline demo --registry R --mirror M --base R/...@sha256:... --sign-key KEY`:
#      every stage attests beside the image (provenance and audit on the pushed digest, the
#      mirror's binding, the final pull);
#   5. the ledger records this run added, `imagekit ledger verify`;
#   6. the gate from the registry alone: `imagekit verify` of the pushed image and of its
#      mirror (the final image), with the default policy and with .demo/policy.yaml (which
#      also requires provenance from plan demo on this base), then cosign's
#      `verify-attestation` on the final image; and where the evidence is.
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
  --purge) stop_all; rm -rf "$state"; log "removed $shown/"; exit 0 ;;
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
key=$state/signing.key
public=$state/signing.pub
if [ ! -f "$key" ] || [ ! -f "$public" ]; then
  rm -f "$key" "$public"
  "$imagekit" keys generate "$state/signing" >&2
  log "made the demo's signing key pair: $shown/signing.key (private, stays here), $shown/signing.pub"
fi
before=0
if [ -s "$IMAGEKIT_LEDGER" ]; then
  before=$(wc -l <"$IMAGEKIT_LEDGER")
fi

set +e
"$imagekit" pipeline demo --registry "$registry" --mirror "$mirror" --base "$base" \
  --sign-key "$key"
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

gate=0
summary=$(ls -t "$IMAGEKIT_EVIDENCE_DIR"/demo/pipeline/*/pipeline.json 2>/dev/null | head -1)
if [ "$status" -eq 0 ] && [ -n "$summary" ]; then
  read -r pushed final < <("$python" - "$summary" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1], encoding="utf-8"))
push = next(s for s in doc["stages"] if s["stage"] == "push")
print(push["data"]["pushed"], doc["final_reference"])
PY
)
  policy=$state/policy.yaml
  cat >"$policy" <<POLICY
# Written by scripts/demo.sh: the demo's gate, beyond the default audit requirement.
version: 1
audit:
  status: [CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED]
provenance:
  plan: demo
  base: ${base#*@}
POLICY
  for ref in "$pushed" "$final"; do
    for with_policy in no yes; do
      args=(verify "$ref" --key "$public")
      label="imagekit verify $ref --key $shown/signing.pub"
      if [ "$with_policy" = yes ]; then
        args+=(--policy "$policy")
        label+=" --policy $shown/policy.yaml"
      fi
      echo
      echo "== $label =="
      set +e
      "$imagekit" "${args[@]}"
      code=$?
      set -e
      [ "$code" -eq 0 ] || gate=$code
    done
  done
  cosign=$root/.tools/bin/cosign
  echo
  echo "== the same proof, read by cosign (key pairs: no transparency log; loopback: plain HTTP) =="
  for type in https://imagekit.dev/attestation/audit/v1 slsaprovenance1 \
    https://imagekit.dev/attestation/final-pull/v1; do
    echo "cosign verify-attestation --key $shown/signing.pub --insecure-ignore-tlog --allow-http-registry \\"
    echo "  --type $type $final"
    if [ -x "$cosign" ]; then
      set +e
      "$cosign" verify-attestation --key "$public" --insecure-ignore-tlog --allow-http-registry \
        --type "$type" "$final" >/dev/null 2>"$state/cosign.err"
      code=$?
      set -e
      if [ "$code" -eq 0 ]; then
        echo "  -> verified"
      else
        echo "  -> refused (exit $code): $(tail -1 "$state/cosign.err")"
        gate=$code
      fi
    fi
  done
fi
echo
cat <<EOF
== where to look ==
  evidence: build logs, doctor and audit reports in $shown/evidence/demo/,
            mirror reports in $shown/evidence/mirror/, final pulls in $shown/evidence/pull/
  the pipeline summary as JSON:   ls -t $shown/evidence/demo/pipeline/*/pipeline.json | head -1
  every record of the plan:       IMAGEKIT_LEDGER=$shown/ledger.jsonl .venv/bin/imagekit ledger show --plan demo
  the attestations, as oras lists them: .tools/bin/oras discover --plain-http ${final:-M/imagekit/demo@sha256:...}
  run it again:                   make demo   (registries and base are reused)
  stop the registries:            make clean-demo   (data stays in $shown/; scripts/demo.sh --purge removes it)
EOF
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ "$verify" -ne 0 ]; then
  exit "$verify"
fi
exit "$gate"
