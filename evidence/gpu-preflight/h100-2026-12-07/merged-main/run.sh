#!/usr/bin/env bash
# Device call 3: main as merged (the health checks judged by imagekit inside the verdict's
# table, against the thresholds it sent), quick and standard with the GPU's profile, a floor
# above what is measured, and another machine's PASS report handed in by a stand-in --python.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(pwd); F=$REPO/.device/final; G=$REPO/.device/gpuhealth
W=/tmp/ws3; mkdir -p $W/cli /tmp/site; R=$W/run.log
export PYTHONPATH=$F/src:/tmp/site IMAGEKIT_ROOT=$W PYTHONDONTWRITEBYTECODE=1
ms() { date +%s%N; }
show() {
  python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("   (no JSON: %s)" % exc); sys.exit(0)
print("   ", d.get("status"), "|", (d.get("sentence") or "")[:300], "| seconds", d.get("seconds"))
for c in (d.get("preflight") or {}).get("checks") or []:
    print("      %-16s %-10s %s" % (c["name"], c["status"], c["reason"][:160]))
PY
}
run() { # NAME ARGS...
  local name=$1; shift; local s=$(ms)
  (cd $W && python3 -m imagekit gpu-preflight --host --json "$@" > $W/cli/$name.json 2> $W/cli/$name.err)
  echo "== $name: exit $?, wall $(( ($(ms) - s)/1000000 )) ms: $*"; show $W/cli/$name.json; tail -2 $W/cli/$name.err
}
{
date -u; nvidia-smi -L
P=H100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && P=H200; echo "GPU profile $P"
s=$(ms); python3 -m pip install -q --no-index --target /tmp/site $G/wheels/*.whl 2>&1 | tail -2; echo "deps installed in $(( ($(ms) - s)/1000000 )) ms"
run quick --level quick --gpu-profile $P
run standard --level standard --gpu-profile $P
run floor-d2d --level standard --gpu-profile $P --threshold min_d2d_gbps=5000
run stub-python --level quick --python $F/stub-python
(cd $W && python3 -m imagekit ledger verify && python3 -m imagekit ledger show)
date -u
} > $R 2>&1
cd /tmp && tar -czf $OUT/ws3.tar.gz ws3 && cp $R $OUT/run3.log
