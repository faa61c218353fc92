#!/usr/bin/env bash
# The chain of bench/gpu_zb.py under several link settings, on one machine in one go: PyTorch's
# Schedule1F1B and ScheduleZBVZeroBubble first, then the Tessel chain plans under each setting, then
# Schedule1F1B again (how far the machine drifted over the call). Results: $OUT/gpu_zb_post_*.md and
# $OUT/gpu_zb_post.tgz (every JSON).
# Usage (repository root, 4 GPUs): PYTHONPATH=. bash bench/gpu_zb_post.sh SECONDS [TAG:POST:CTAS[:STREAMS[:TRANSPORT]]] ...]
#   TAG names the setting, POST is TESSEL_RECV_POST (due, lead, ahead), CTAS is TESSEL_P2P_MAX_CTAS
#   (0: NCCL's choice), STREAMS is TESSEL_COMM_STREAMS (link, the default, or one), TRANSPORT is
#   TESSEL_TRANSPORT (nccl, the default, or copy).
#   Default settings: due0:due:0 lead0:lead:0.
# KEYS (environment) picks the Tessel rows (default chain_zb,chain_zbv), STEPS the measured iterations (3).
set -u
R=$(mktemp -d)
LIMIT=${1:-100000}; shift || true
SETTINGS=${*:-due0:due:0 lead0:lead:0}
KEYS=${KEYS:-chain_zb,chain_zbv}
STEPS=${STEPS:-3}
run() {  # tag, environment..., -- gpu_zb.py run options...
  local tag=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo "== $tag ${envs[*]}" >&2
  env "${envs[@]}" python3 bench/gpu_zb.py run --only chain --out "$R" --tag "_post_$tag" --steps "${STEPS:-3}" "$@"
}
all() {
  run torch TESSEL_RECV_POST=due -- --torch 1f1b,zbv --keys none
  for s in $SETTINGS; do
    IFS=: read -r tag post ctas streams transport <<< "$s"
    run "$tag" TESSEL_RECV_POST="$post" TESSEL_P2P_MAX_CTAS="$ctas" TESSEL_COMM_STREAMS="${streams:-link}" \
      TESSEL_TRANSPORT="${transport:-nccl}" \
      -- --no-torch --keys "$KEYS"
  done
  run torch_end TESSEL_RECV_POST=due -- --torch 1f1b --keys none
}
export -f run all
export R SETTINGS KEYS STEPS
timeout "$LIMIT" bash -c all
cp "$R"/*.md "${OUT:-.}"/ 2>/dev/null
tar czf "${OUT:-.}/gpu_zb_post.tgz" -C "$R" .
