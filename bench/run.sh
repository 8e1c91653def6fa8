#!/usr/bin/env bash
# make bench: every benchmark, each printing figures and side-by-side ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== scheduling decision time (bench/bench_sched.c) =="
build/bench/bench_sched
echo
echo "== prefix index and decision time vs prompt length (bench/bench_prefix.c) =="
build/bench/bench_prefix
echo
echo "== hash flooding: crafted colliding block hashes, unkeyed vs keyed slots (bench/bench_collide.c) =="
build/bench/bench_collide
echo
echo "== consistent hashing with bounded load (bench/bench_chash.c) =="
build/bench/bench_chash
echo
echo "== probe cycle: parse of a real vLLM /metrics capture (bench/bench_prom.c) =="
build/bench/bench_prom
echo
echo "== proxy overhead (bench/proxy_overhead.sh) =="
bench/proxy_overhead.sh
