#!/usr/bin/env bash
# Runs a fixed set of replays (every policy on the five generators and the Mooncake trace,
# fixed seeds, with flow control, adaptive weights and evictions engaged somewhere) and writes
# their outputs to OUTDIR. A restructuring must leave these byte-identical:
#   scripts/replay_fingerprint.sh build/switchboard /tmp/before   # on the old code
#   scripts/replay_fingerprint.sh build/switchboard /tmp/after    # on the new code
#   diff -r /tmp/before /tmp/after && echo identical
set -euo pipefail
bin=${1:?usage: replay_fingerprint.sh BINARY OUTDIR}
out=${2:?usage: replay_fingerprint.sh BINARY OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
trace=$root/tests/data/traces/mooncake/conversation_trace.jsonl
mkdir -p "$out"
run() { # name, then replay arguments
  local name=$1; shift
  "$bin" replay "$@" --out "$out/$name" >"$out/$name.stdout" 2>/dev/null
}
run shared-prefix --workload shared-prefix groups=16 prefix=2048 --requests 2000 --rate 20 --replicas 8 \
  --policies all --seed 1
run multi-turn --workload multi-turn --requests 1500 --rate 150 --replicas 2 --policies all --seed 2 \
  --flow-control --tenants 50 --priority-mix critical=0.2,standard=0.5,sheddable=0.3
run hot-prefix --workload hot-prefix --requests 1000 --rate 40 --replicas 8 --policies all --adaptive --seed 3
run mooncake --trace "$trace" --rate-scale 4 --requests 2000 --replicas 8 --policies all --seed 1
run lora-mix --workload lora-mix --requests 1500 --rate 30 --replicas 4 --policies all \
  --prefix-max-entries 20000 --seed 5
run no-sharing --workload no-sharing --requests 1000 --rate 30 --replicas 4 --policies all \
  --prefix-max-entries 5000 --num-gpu-blocks 2000 --seed 7
run profiles --workload shared-prefix --requests 1500 --rate 30 --replicas 8 --seed 11 \
  --config "$root/examples/replay-profiles.yaml" --policies default,default+adaptive,prefix-only,least-request
# The gnuplot scripts name the output directory; everything else is compared as written.
rm -f "$out"/*/ttft_cdf.gp
echo "replay outputs in $out"
