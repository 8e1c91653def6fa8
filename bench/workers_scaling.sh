#!/usr/bin/env bash
# Workers: switchboard with `workers: 1` and `workers: 2` (and HAProxy with nbthread 1 and 2 as
# the baseline), wrk against each in one run, the ~4 KiB chat body, nginx answering fixed JSON.
# Nothing pinned: on a small machine wrk and nginx share the cores with the proxy, so the
# throughput rows say what one more loop buys there; the lock's figures (net/guard.h, read from
# /metrics after each run) say what it would buy on more cores: the share of the proxy's CPU
# time spent holding the lock bounds the speedup (Amdahl), and the contended share shows how
# often a worker waited.
# Env: RUNS (default 3), DURATION (s, default 5), CONNS (default 64), PORT_BASE (default 18201),
# PROFILE (default `default`), SB_BIN (default build/switchboard).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}; DURATION=${DURATION:-5}; CONNS=${CONNS:-64}; PROFILE=${PROFILE:-default}
SB_BIN=${SB_BIN:-build/switchboard}
work=$(mktemp -d /tmp/sb-scale.XXXXXX)
B=${PORT_BASE:-18201}
P_NGINX=$B; P_SB1=$((B + 1)); P_SB2=$((B + 3)); P_HA1=$((B + 5)); P_HA2=$((B + 6)) # admin: P_SBn + 1
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

. bench/nginx_json.sh
write_nginx_json "$work" "$P_NGINX"
for t in 1 2; do
  port=$([ $t = 1 ] && echo $P_HA1 || echo $P_HA2)
  cat > "$work/haproxy$t.cfg" <<HAP
global
  nbthread $t
  maxconn 4096
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:$port
  default_backend be
backend be
  balance roundrobin
  server n1 127.0.0.1:$P_NGINX
HAP
done
for w in 1 2; do
  port=$([ $w = 1 ] && echo $P_SB1 || echo $P_SB2)
  cat > "$work/sb$w.yaml" <<SBY
listen: "127.0.0.1:$port"
admin: { listen: "127.0.0.1:$((port + 1))" }
workers: $w
pools:
  - name: bench
    models: ["bench-model"]
    profile: $PROFILE
    endpoints: ["127.0.0.1:$P_NGINX"]
SBY
done
nginx -c "$work/nginx.conf" -p "$work" & pids+=($!)
haproxy -q -f "$work/haproxy1.cfg" & pids+=($!)
haproxy -q -f "$work/haproxy2.cfg" & pids+=($!)
"$SB_BIN" serve -q -c "$work/sb1.yaml" & pids+=($!); SB1_PID=$!
"$SB_BIN" serve -q -c "$work/sb2.yaml" & pids+=($!); SB2_PID=$!
for p in $P_NGINX $P_SB1 $P_SB2 $P_HA1 $P_HA2; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.05; done
done

run() { wrk -t1 -c"$2" -d"${DURATION}s" -s bench/chat4k.lua "http://127.0.0.1:$1" | grep '^{'; }
scrape() { curl -s "http://127.0.0.1:$1/metrics" | grep -E '^(switchboard_lock_|switchboard_requests_received_total|process_cpu_seconds_total)' || true; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
results="$work/results.tsv"
for port in $P_SB1 $P_SB2 $P_HA1 $P_HA2; do run "$port" 4 > /dev/null; done # warm-up
for i in $(seq "$RUNS"); do
  for target in sb1:$P_SB1:$SB1_PID sb2:$P_SB2:$SB2_PID ha1:$P_HA1: ha2:$P_HA2:; do
    IFS=: read -r name port pid <<< "$target"
    if [ -n "$pid" ]; then
      before=$(scrape $((port + 1)) | tr '\n' ';'); t0=$(cpu_ticks "$pid")
    fi
    line=$(run "$port" "$CONNS")
    if [ -n "$pid" ]; then
      t1=$(cpu_ticks "$pid"); after=$(scrape $((port + 1)) | tr '\n' ';')
      printf '%s,%s\t%s\t%s\t%s\t%s\n' "$name" "$i" "$line" "$before" "$after" "$((t1 - t0))" >> "$results"
    else
      printf '%s,%s\t%s\t\t\t0\n' "$name" "$i" "$line" >> "$results"
    fi
  done
done
python3 - "$RUNS" "$CONNS" "$results" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
runs, conns, hz = int(sys.argv[1]), sys.argv[2], float(sys.argv[4])
R = {}
for line in open(sys.argv[3]):
    k, w, before, after, ticks = line.rstrip("\n").split("\t")
    def parse(s):
        d = {}
        for l in s.split(";"):
            if l.strip():
                name, v = l.rsplit(" ", 1)
                d[name] = float(v)
        return d
    R[k] = (json.loads(w), parse(before), parse(after), int(ticks) / hz)
def med(name, f):
    return statistics.median(f(*R["%s,%d" % (name, i)]) for i in range(1, runs + 1))
print("workers scaling: %d runs each (medians), %s connections, wrk 1 thread, nothing pinned, %s cores" % (
    runs, conns, __import__("os").cpu_count()))
print("%-16s %10s %9s %9s" % ("target", "rps", "p50 us", "p99 us"))
for n, label in (("sb1", "switchboard w=1"), ("sb2", "switchboard w=2"), ("ha1", "haproxy nbt=1"), ("ha2", "haproxy nbt=2")):
    print("%-16s %10.0f %9.0f %9.0f" % (label, med(n, lambda w, b, a, c: w["rps"]), med(n, lambda w, b, a, c: w["p50_us"]),
                                        med(n, lambda w, b, a, c: w["p99_us"])))
def delta(b, a, k):
    return a.get(k, 0) - b.get(k, 0)
def lock_row(n):
    reqs = med(n, lambda w, b, a, c: delta(b, a, "switchboard_requests_received_total"))
    cpu_us = med(n, lambda w, b, a, c: c / max(1, delta(b, a, "switchboard_requests_received_total")) * 1e6)
    held = med(n, lambda w, b, a, c: delta(b, a, 'switchboard_lock_held_seconds_total{by="workers"}')
               / max(1, delta(b, a, "switchboard_requests_received_total")) * 1e6)
    acq = med(n, lambda w, b, a, c: delta(b, a, "switchboard_lock_acquisitions_total")
              / max(1, delta(b, a, "switchboard_requests_received_total")))
    cont = med(n, lambda w, b, a, c: delta(b, a, "switchboard_lock_contended_total")
               / max(1, delta(b, a, "switchboard_lock_acquisitions_total")))
    wait = med(n, lambda w, b, a, c: delta(b, a, "switchboard_lock_wait_seconds_total")
               / max(1, delta(b, a, "switchboard_requests_received_total")) * 1e6)
    return reqs, cpu_us, held, acq, cont, wait
reqs, cpu_us, held, acq, cont, wait = lock_row("sb2")
cpu1_us = med("sb1", lambda w, b, a, c: c / max(1, delta(b, a, "switchboard_requests_received_total")) * 1e6)
print("switchboard w=2/w=1 throughput: %.2fx   haproxy nbt=2/nbt=1: %.2fx   switchboard w=2/haproxy nbt=2: %.2fx" % (
    med("sb2", lambda w, b, a, c: w["rps"]) / med("sb1", lambda w, b, a, c: w["rps"]),
    med("ha2", lambda w, b, a, c: w["rps"]) / med("ha1", lambda w, b, a, c: w["rps"]),
    med("sb2", lambda w, b, a, c: w["rps"]) / med("ha2", lambda w, b, a, c: w["rps"])))
print("per request: w=1 %.1f us of CPU; w=2 %.1f us of CPU, lock held %.1f us (%.0f%% of it), %.1f acquisitions, "
      "%.1f%% contended, %.1f us waited" % (cpu1_us, cpu_us, held, 100 * held / cpu_us, acq, 100 * cont, wait))
f = held / cpu_us
for n in (2, 8, 32):
    print("  Amdahl bound with the lock's share (%.0f%%): %2d cores -> at most %.1fx one core" % (100 * f, n, 1 / (f + (1 - f) / n)))
print("  the lock itself saturates at 1/held = %.0f requests/s (%.1fx one worker's %.0f req/s of CPU)" % (
    1e6 / held, (1e6 / held) / (1e6 / cpu1_us), 1e6 / cpu1_us))
PY
