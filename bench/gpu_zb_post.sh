#!/usr/bin/env bash
# The chain of bench/gpu_zb.py with the old link settings and with receives posted when due, on one
# machine in one go: PyTorch's Schedule1F1B and ScheduleZBVZeroBubble, then the three Tessel chain
# plans under each setting. Results: $OUT/gpu_zb_post_*.md and $OUT/gpu_zb_post.tgz (every JSON).
# Usage (repository root, 4 GPUs): PYTHONPATH=. bash bench/gpu_zb_post.sh [seconds]
set -u
R=$(mktemp -d)
run() {  # tag, environment..., -- gpu_zb.py run options...
  local tag=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo "== $tag ${envs[*]}" >&2
  env "${envs[@]}" python3 bench/gpu_zb.py run --only chain --out "$R" --tag "_post_$tag" "$@"
}
all() {
  run old TESSEL_RECV_POST=ahead TESSEL_P2P_MAX_CTAS=1 -- --torch 1f1b,zbv
  run due0 TESSEL_RECV_POST=due TESSEL_P2P_MAX_CTAS=0 -- --no-torch
  run due4 TESSEL_RECV_POST=due TESSEL_P2P_MAX_CTAS=4 -- --no-torch
  run due8 TESSEL_RECV_POST=due TESSEL_P2P_MAX_CTAS=8 -- --no-torch --keys chain_1f1b,chain_zb
  run ahead0 TESSEL_RECV_POST=ahead TESSEL_P2P_MAX_CTAS=0 -- --no-torch --keys chain_1f1b
}
export -f run all
export R
timeout "${1:-100000}" bash -c all
cp "$R"/*.md "${OUT:-.}"/ 2>/dev/null
tar czf "${OUT:-.}/gpu_zb_post.tgz" -C "$R" .
