#!/usr/bin/env bash
# Device call 2 (issue 44): the extended level after the H100 profile's floor fix, and the
# kernel log unreadable for real (the preflight run as an unprivileged user).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(pwd); G=$REPO/.device/gpuhealth
W=/tmp/ws2; mkdir -p $W/cli /tmp/site; chmod 777 $W $W/cli; R=$W/run.log
export PYTHONPATH=$G/src:/tmp/site IMAGEKIT_ROOT=$W PYTHONDONTWRITEBYTECODE=1
ms() { date +%s%N; }
show() {
  python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("   (no JSON: %s)" % exc); sys.exit(0)
print("   ", d.get("status"), "|", d.get("sentence"), "| seconds", d.get("seconds"))
for c in (d.get("preflight") or {}).get("checks") or []:
    print("      %-16s %-10s %s" % (c["name"], c["status"], c["reason"][:200]))
PY
}
run() { # NAME ARGS...
  local name=$1; shift; local s=$(ms)
  (cd $W && python3 -m imagekit gpu-preflight --host --json "$@" > $W/cli/$name.json 2> $W/cli/$name.err)
  echo "== $name: exit $?, wall $(( ($(ms) - s)/1000000 )) ms: $*"; show $W/cli/$name.json
}
{
date -u; nvidia-smi -L
P=H100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && P=H200; echo "GPU profile $P"
s=$(ms); python3 -m pip install -q --no-index --target /tmp/site $G/wheels/*.whl 2>&1 | tail -2; echo "deps installed in $(( ($(ms) - s)/1000000 )) ms"
chmod -R a+rX /tmp/site $G
run standard --level standard --gpu-profile $P
run extended --level extended --gpu-profile $P --threshold load_seconds=30
echo "== as an unprivileged user (nobody): the kernel log cannot be read"
chmod -R a+rwX $W; cat /proc/sys/kernel/dmesg_restrict; ls -l /dev/kmsg
for name in nobody-quick nobody-require-log; do
  extra=""; [ $name = nobody-require-log ] && extra="--threshold require_kernel_log=true"
  s=$(ms)
  (cd $W && setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp PATH=$PATH PYTHONPATH=$PYTHONPATH IMAGEKIT_ROOT=$W NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python3 -m imagekit gpu-preflight --host --level quick --json $extra > $W/cli/$name.json 2> $W/cli/$name.err)
  echo "== $name: exit $?, wall $(( ($(ms) - s)/1000000 )) ms: --level quick $extra (as uid 65534)"; show $W/cli/$name.json; tail -3 $W/cli/$name.err
done
(cd $W && python3 -m imagekit ledger verify)
date -u
} > $R 2>&1
cd /tmp && tar -czf $OUT/ws2.tar.gz ws2 && cp $R $OUT/run2.log
