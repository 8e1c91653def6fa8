#!/usr/bin/env bash
# make bench: every benchmark, each printing figures and side-by-side ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== proxy overhead (bench/proxy_overhead.sh) =="
bench/proxy_overhead.sh
