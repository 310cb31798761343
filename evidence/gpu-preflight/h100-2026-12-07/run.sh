#!/usr/bin/env bash
# Device call (issue 44): the health checks' levels on the lent GPU, the failing runs made
# real, nvbandwidth beside our copies. Run from the main checkout's root.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(pwd); G=$REPO/.device/gpuhealth
W=/tmp/ws; mkdir -p $W /tmp/site; R=$W/run.log
export PYTHONPATH=$G/src:/tmp/site IMAGEKIT_ROOT=$W PYTHONDONTWRITEBYTECODE=1
ms() { date +%s%N; }
run() { # NAME ARGS...: one preflight, its exit, wall time and verdict line
  local name=$1; shift; local s=$(ms)
  (cd $W && python3 -m imagekit gpu-preflight --host --json "$@" > $W/cli/$name.json 2> $W/cli/$name.err)
  local rc=$?; local e=$(( ($(ms) - s)/1000000 ))
  echo "== $name: exit $rc, wall ${e} ms: $*"
  python3 - "$W/cli/$name.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("   (no JSON: %s)" % exc); sys.exit(0)
print("   ", d.get("status"), "|", d.get("sentence"), "| seconds", d.get("seconds"))
for c in (d.get("preflight") or {}).get("checks") or []:
    print("      %-16s %-10s %s" % (c["name"], c["status"], c["reason"][:160]))
PY
  tail -3 $W/cli/$name.err | sed 's/^/    err: /'
}
{
date -u; nvidia-smi -L; python3 --version
P=H100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && P=H200; echo "GPU profile $P"
s=$(ms); python3 -m pip install -q --no-index --target /tmp/site $G/wheels/*.whl 2>&1 | tail -2; echo "deps installed in $(( ($(ms) - s)/1000000 )) ms"
mkdir -p $W/cli
python3 -c 'import imagekit, imagekit.gpu.health as h; print("imagekit from", imagekit.__file__)'
echo "== the probe alone, quick (a traceback here is the probe's)"
s=$(ms); python3 -m torch.distributed.run --nproc-per-node 1 $G/src/imagekit/gpu/probe.py --out $W/probe-quick.json --spec-json '{"level": "quick", "sizes_mib": [1], "thresholds": {"min_free_memory_fraction": 0.9, "budget_s": 5}}' > $W/probe-quick.log 2>&1; echo "probe rc $? wall $(( ($(ms) - s)/1000000 )) ms"; tail -5 $W/probe-quick.log
python3 -c "
import json; d=json.load(open('$W/probe-quick.json'))
for n,c in d['checks'].items(): print('   %-16s %-10s %s' % (n, c['status'], c['reason'][:150]))
"
run quick-1 --level quick
run quick-2 --level quick
run standard-1 --level standard --gpu-profile $P
run standard-2 --level standard --gpu-profile $P
run dcgm --level quick --dcgm 1
echo "== negative: another process holding 40 GB"
python3 -c "
import torch, time, os
x = torch.empty(40 * 1024**3, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()
open('/tmp/holder.ready', 'w').write(str(os.getpid())); time.sleep(600)" > /tmp/holder.log 2>&1 &
HOLDER=$!
for i in $(seq 1 60); do [ -f /tmp/holder.ready ] && break; sleep 0.5; done
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
run fail-memory-holder --level quick
kill $HOLDER; wait $HOLDER 2>/dev/null
run fail-h2d-floor --level standard --gpu-profile $P --threshold min_h2d_gbps=80 --threshold min_d2h_gbps=80
run fail-d2d-floor --level standard --gpu-profile $P --threshold min_d2d_gbps=3000
run fail-budget --level standard --gpu-profile $P --threshold load_seconds=32
run extended --level extended --gpu-profile $P --threshold load_seconds=45
run self-test --self-test --level standard
(cd $W && python3 -m imagekit ledger verify; python3 -m imagekit ledger lock 2>&1 | tail -5)
echo "== nvbandwidth beside"
mkdir -p /tmp/boost; for f in $REPO/.device/debs/*.deb; do dpkg -x $f /tmp/boost; done
s=$(ms); cmake -S $REPO/.device/nvbandwidth -B /tmp/nvb -DCMAKE_CUDA_ARCHITECTURES=90 -DBoost_ROOT=/tmp/boost/usr -DBoost_INCLUDE_DIR=/tmp/boost/usr/include -DBoost_NO_SYSTEM_PATHS=ON > /tmp/nvb-cmake.log 2>&1 && make -C /tmp/nvb -j16 > /tmp/nvb-make.log 2>&1; echo "nvbandwidth built rc $? in $(( ($(ms) - s)/1000000 )) ms"
[ -x /tmp/nvb/nvbandwidth ] && /tmp/nvb/nvbandwidth -t host_to_device_memcpy_ce device_to_host_memcpy_ce device_local_copy > $W/nvbandwidth.txt 2>&1; grep -E "SUM|Running" $W/nvbandwidth.txt
nvidia-smi -q -x > $W/nvidia-smi-q-after.xml
date -u
} > $R 2>&1
cd /tmp && tar -czf $OUT/ws.tar.gz ws && cp $R $OUT/run.log
