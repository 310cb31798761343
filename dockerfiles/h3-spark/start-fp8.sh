#!/bin/sh
# STAND-IN written by imagekit for the h3-spark seed plan, not the H3 report's start-fp8.sh:
# the report's launcher, installed as /usr/local/bin/start-minimax-h3 and the image's
# ENTRYPOINT. It checks the network policy (fail-closed, loopback by default) and starts
# vLLM-Omni with the report's eight settings, each a workaround for SM121 or a memory limit.
set -eu
. /usr/local/lib/minimax-h3/security-common.sh

MODEL_DIR=${MINIMAX_H3_MODEL_DIR_IN_CONTAINER:-/models/MiniMax-H3/FL2VA}
BIND_HOST=${H3_BIND_HOST:-127.0.0.1}
PORT=${H3_PORT:-8000}
ALLOW_REMOTE=${H3_ALLOW_REMOTE_API:-false}
API_KEY=${VLLM_API_KEY:-}

h3_validate_network_security "$BIND_HOST" "$ALLOW_REMOTE" "$API_KEY" "${H3_ENV_FILE:-}" \
  || { echo "start-minimax-h3: network policy rejected" >&2; exit 1; }

exec vllm serve "$MODEL_DIR" \
  --omni \
  --trust-remote-code \
  --host "$BIND_HOST" --port "$PORT" \
  --num-weight-load-threads 2 \
  --enforce-eager \
  --diffusion-attention-backend TORCH_SDPA \
  --diffusion-quantization-config /etc/minimax-h3/fp8-quant.json \
  --force-cutlass-fp8 \
  --stage-init-timeout 1800 \
  --init-timeout 2400 \
  "$@"
