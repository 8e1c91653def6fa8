#!/usr/bin/env bash
# make bench: every benchmark, each printing figures and side-by-side ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== scheduling decision time (bench/bench_sched.c) =="
build/bench/bench_sched
echo
echo "== keeping each decision: the ring of recent decisions, per request and per admin read (bench/bench_decisions.c) =="
build/bench/bench_decisions
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
echo "== KV-event batch decode: ns per event, MB/s, against msgpack-c's unpacker (bench/bench_kv_decode.c) =="
build/bench/bench_kv_decode
echo
echo "== ext_proc codec: a 62,000-byte body chunk decoded and echoed, against memcpy; headers and the destination answer (bench/bench_extproc.c) =="
build/bench/bench_extproc
echo
echo "== hostile JSON nesting: 1 MiB bodies refused or parsed vs an ordinary prompt (bench/bench_nesting.c) =="
build/bench/bench_nesting
echo
echo "== latency of a small request while 1 MiB nested bodies arrive (bench/hostile_latency.py) =="
python3 bench/hostile_latency.py
echo
echo "== proxy overhead (bench/proxy_overhead.sh) =="
bench/proxy_overhead.sh
echo
echo "== hostile connections: memory per promised body, early answers, connection limit, body budget (bench/hostile_conn.py) =="
bench/hostile_conn.py
echo
echo "== precise KV index: bytes per entry, BlockStored rate, match of a 32k-token prompt over 64 endpoints (bench/bench_kv_index.c) =="
build/bench/bench_kv_index
echo
echo "== cache truth, live: the engines' hit ratio behind approximate and precise (KV events) gateways (bench/live_cache_truth.py) =="
python3 bench/live_cache_truth.py --requests 1500
echo
echo "== endpoint picker: decisions/s and added latency over ext_proc streams vs the HTTP proxy (bench/extproc.py) =="
python3 bench/extproc.py
