#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS over its committed corpus (tests/fuzz/corpus/<name>,
# read only: new inputs go to build/fuzz/corpus/<name>). Fails on the first target that
# finds a crash, a leak, a sanitizer report or a broken property; the reproducer is left in
# build/fuzz/ (libFuzzer's crash-*, leak-*, timeout-* files).
#   scripts/fuzz.sh SECONDS build/fuzz/fuzz_inspect ...
set -euo pipefail
secs=${1:?usage: fuzz.sh SECONDS TARGET...}
shift
cd "$(dirname "$0")/.."
for bin in "$@"; do
  name=$(basename "$bin")
  name=${name#fuzz_}
  seed=tests/fuzz/corpus/$name
  [ -d "$seed" ] || seed=tests/fuzz/corpus/${name%_parse} # fuzz_prom_parse reads corpus/prom
  [ -d "$seed" ] || { echo "fuzz: no corpus for $bin under tests/fuzz/corpus" >&2; exit 1; }
  work=build/fuzz/corpus/$name
  mkdir -p "$work"
  echo "== $bin: ${secs}s over $seed"
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=build/fuzz/"$name"- "$work" "$seed" 2>"build/fuzz/$name.log" ||
    { tail -40 "build/fuzz/$name.log" >&2; echo "fuzz: $bin failed (log: build/fuzz/$name.log)" >&2; exit 1; }
  grep -E '^stat::number_of_executed_units|^Done ' "build/fuzz/$name.log" || true
done
echo "fuzz: all targets clean"
