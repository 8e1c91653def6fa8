#!/usr/bin/env bash
# Proxy overhead: wrk against nginx (a fixed JSON answer) directly, through switchboard, and
# through HAProxy (HTTP mode, round robin, keep-alive), all in one run, with a ~4 KiB chat body.
# Prints requests/s and latency percentiles (medians of RUNS runs) and the ratios. With TLS
# (default on), the same over HTTPS: switchboard's client listener and an HAProxy ssl bind with
# the same certificate (P-256, made here), keep-alive throughput and handshakes per second (each
# request on a new connection).
# Pinned as issue 17 measures: wrk on CPU 1, each proxy on CPU 0, nginx left to the scheduler
# (PIN=0: nothing pinned).
# Env: RUNS (default 3), DURATION (s, default 5), CONNS (default 32), TLS (1/0, default 1),
# PORT_BASE (default 18101), PROFILE (the pool's routing profile, default `default`: every body
# parsed and its blocks hashed), SB_BIN (the switchboard under test, default build/switchboard),
# SB_BASE_BIN (another build, e.g. main's, run as a "base" row beside it in the same
# invocation, runs alternated with the others), WORKERS (switchboard's `workers:`, default 1: the
# per-core comparison with HAProxy's one thread; bench/workers_scaling.sh measures more).
# With H2 (default on), HTTP/2 with prior knowledge (h2c) by h2load: switchboard's client listener
# (the same port as HTTP/1.1) and an HAProxy `proto h2` bind, H2_CONNS connections of H2_STREAMS
# concurrent streams each, the same body. Env: H2 (1/0), H2_CONNS (default 4), H2_STREAMS (default 8).
# With both H2 and TLS, h2 over TLS too (ALPN h2): switchboard's TLS listener and an HAProxy ssl bind
# with `alpn h2`, same certificate.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}; DURATION=${DURATION:-5}; CONNS=${CONNS:-32}; TLS=${TLS:-1}; PROFILE=${PROFILE:-default}
H2=${H2:-1}; H2_CONNS=${H2_CONNS:-4}; H2_STREAMS=${H2_STREAMS:-8}
SB_BIN=${SB_BIN:-build/switchboard}; SB_BASE_BIN=${SB_BASE_BIN:-}; PIN=${PIN:-1}; WORKERS=${WORKERS:-1}
if [ "$PIN" = 1 ]; then PROXY_CPU="taskset -c 0"; LOAD_CPU="taskset -c 1"; else PROXY_CPU=""; LOAD_CPU=""; fi
work=$(mktemp -d /tmp/sb-bench.XXXXXX)
B=${PORT_BASE:-18101}  # B..B+2, B+4, B+5, B+7, B+8; B+3, B+6 and B+9 for the admin listeners
P_NGINX=$B; P_SB=$((B + 1)); P_HA=$((B + 2)); P_SBT=$((B + 4)); P_HAT=$((B + 5)); P_BASE=$((B + 7))
P_HA2=$((B + 8)); P_HAT2=$((B + 10))
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

. bench/nginx_json.sh
write_nginx_json "$work" "$P_NGINX"
cat > "$work/haproxy.cfg" <<HAP
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:$P_HA
  default_backend be
HAP
if [ "$TLS" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
    -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 2>/dev/null
  cat "$work/cert.pem" "$work/key.pem" > "$work/haproxy.pem"
  cat >> "$work/haproxy.cfg" <<HAP
frontend fe_tls
  bind 127.0.0.1:$P_HAT ssl crt $work/haproxy.pem alpn http/1.1
  default_backend be
HAP
fi
if [ "$H2" = 1 ]; then
  cat >> "$work/haproxy.cfg" <<HAP
frontend fe_h2
  bind 127.0.0.1:$P_HA2 proto h2
  default_backend be
HAP
  [ "$TLS" = 1 ] && cat >> "$work/haproxy.cfg" <<HAP
frontend fe_h2tls
  bind 127.0.0.1:$P_HAT2 ssl crt $work/haproxy.pem alpn h2
  default_backend be
HAP
fi
cat >> "$work/haproxy.cfg" <<HAP
backend be
  balance roundrobin
  server n1 127.0.0.1:$P_NGINX
HAP
cat > "$work/sb.yaml" <<SBY
listen: "127.0.0.1:$P_SB"
admin: { listen: "127.0.0.1:$((P_SB + 2))" }
workers: $WORKERS
pools:
  - name: bench
    models: ["bench-model"]
    profile: $PROFILE
    endpoints: ["127.0.0.1:$P_NGINX"]
upstream: { max_idle_per_endpoint: 1024 }  # every build keeps its connections (older ones defaulted to 64)
SBY
nginx -c "$work/nginx.conf" -p "$work" & pids+=($!)
$PROXY_CPU haproxy -q -f "$work/haproxy.cfg" & pids+=($!); pid_haproxy=$!
$PROXY_CPU "$SB_BIN" serve -q -c "$work/sb.yaml" & pids+=($!); pid_switchboard=$!
ports="$P_NGINX $P_SB $P_HA"
targets="direct:$P_NGINX switchboard:$P_SB haproxy:$P_HA"
if [ -n "$SB_BASE_BIN" ]; then
  # An older build may not know `workers:` (one loop either way with the default).
  sed -e "s/$P_SB/$P_BASE/" -e "s/$((P_SB + 2))/$((P_BASE + 2))/" -e '/^workers: 1$/d' "$work/sb.yaml" > "$work/sbb.yaml"
  $PROXY_CPU "$SB_BASE_BIN" serve -q -c "$work/sbb.yaml" & pids+=($!); pid_base=$!
  ports="$ports $P_BASE"
  targets="direct:$P_NGINX switchboard:$P_SB base:$P_BASE haproxy:$P_HA"
fi
if [ "$TLS" = 1 ]; then
  sed -e "s/$P_SB/$P_SBT/" -e "s/$((P_SB + 2))/$((P_SBT + 2))/" "$work/sb.yaml" > "$work/sbt.yaml"
  printf 'tls: { cert: %s, key: %s }\n' "$work/cert.pem" "$work/key.pem" >> "$work/sbt.yaml"
  $PROXY_CPU "$SB_BIN" serve -q -c "$work/sbt.yaml" & pids+=($!)
  ports="$ports $P_SBT $P_HAT"
fi
[ "$H2" = 1 ] && ports="$ports $P_HA2"
[ "$H2" = 1 ] && [ "$TLS" = 1 ] && ports="$ports $P_HAT2"
for p in $ports; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.05; done
done

run() { # target port, conns [scheme [extra wrk args]] -> JSON line
  $LOAD_CPU wrk -t1 -c"$2" -d"${DURATION}s" -s bench/chat4k.lua ${4:-} "${3:-http}://127.0.0.1:$1" | grep '^{'
}
results="$work/results.tsv"
# The proxy's own CPU time (user + system, clock ticks) over a load run: per request, what one
# core spends proxying it. On this 2-core machine wrk, nginx and the proxy share the cores, so
# throughput is the pipeline's and no proxy saturates its core; CPU per request is the per-core
# figure (a core's capacity is 1 / CPU per request). 0 for direct (no proxy).
cpu_ticks() { if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# The whole machine's busy time (every core: user, nice, system, irq, softirq; not steal, the
# hypervisor's time for other guests), in ticks: what a request costs wrk, nginx, the kernel's
# loopback TCP and the proxy together. In a container /proc/stat is usually the host's, so
# neighbours' work counts too; the segment count (/proc/net/snmp) is the network namespace's.
machine_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
# Each core's busy and idle ticks ("busy idle busy idle ..."; idle counts iowait): whether the
# proxy's core or the load generator's is the one the pipeline waits on.
core_ticks() { awk '/^cpu[0-9]/{printf "%d %d ", $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
core_busy() { # before after -> JSON list of each core's busy share over the run
  python3 -c 'import sys; a, b = (list(map(int, x.split())) for x in sys.argv[1:3]); d = [y - x for x, y in zip(a, b)]
print("[" + ",".join("%.3f" % (d[i] / max(1, d[i] + d[i + 1])) for i in range(0, len(d), 2)) + "]")' "$1" "$2"
}
# TCP segments sent on the machine (every hop over loopback: wrk, the proxy, nginx).
tcp_segs() { awk '/^Tcp:/ { if (n) { for (i = 1; i <= NF; i++) if (h[i] == "OutSegs") print $i; exit } n = split($0, h) }' /proc/net/snmp; }
for target in $targets; do
  run "${target##*:}" 4 > /dev/null  # warm-up
done
# Round by round (each target once per round), so a neighbour's burst of load on the shared
# machine lands on every row alike rather than on whichever target ran then.
for i in $(seq "$RUNS"); do
  for target in $targets; do
    name=${target%%:*}; port=${target##*:}
    pidvar=pid_$name; pid=${!pidvar:-}
    c0=$(cpu_ticks "$pid"); m0=$(machine_ticks); s0=$(tcp_segs); k0=$(core_ticks)
    printf '%s,load,%s\t%s\n' "$name" "$i" "$(run "$port" "$CONNS")" >> "$results"
    printf '%s,cpu,%s\t{"ticks":%s,"machine":%s,"segs":%s,"cores":%s}\n' "$name" "$i" "$(( $(cpu_ticks "$pid") - c0 ))" \
      "$(( $(machine_ticks) - m0 ))" "$(( $(tcp_segs) - s0 ))" "$(core_busy "$k0" "$(core_ticks)")" >> "$results"
    printf '%s,one,%s\t%s\n' "$name" "$i" "$(run "$port" 1)" >> "$results"
  done
done
if [ "$TLS" = 1 ]; then
  for target in switchboard:$P_SBT haproxy:$P_HAT; do
    name=${target%%:*}-tls; port=${target##*:}
    run "$port" 4 https > /dev/null  # warm-up
    for i in $(seq "$RUNS"); do
      printf '%s,load,%s\t%s\n' "$name" "$i" "$(run "$port" "$CONNS" https)" >> "$results"
      printf '%s,one,%s\t%s\n' "$name" "$i" "$(run "$port" 1 https)" >> "$results"
      # A new connection (and handshake) per request.
      printf '%s,hs,%s\t%s\n' "$name" "$i" "$(run "$port" 8 https "-H Connection:close")" >> "$results"
    done
  done
fi
if [ "$H2" = 1 ]; then
  # h2load has no Lua: the same body as chat4k.lua, from a file.
  python3 -c 'import sys; f="The quick brown fox jumps over the lazy dog. "*86; sys.stdout.write("{\"model\":\"bench-model\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":16}" % f)' > "$work/chat4k.json"
  h2run() { # port, conns, streams [scheme] -> JSON line
    $LOAD_CPU h2load -t1 -c"$2" -m"$3" -D"$DURATION" -d "$work/chat4k.json" -H 'content-type: application/json' \
      "${4:-http}://127.0.0.1:$1/v1/chat/completions" | python3 -c '
import json, re, sys
t = sys.stdin.read()
rps = float(re.search(r"finished in [^,]+, ([0-9.]+) req/s", t).group(1))
ok = int(re.search(r"(\d+) succeeded", t).group(1))
bad = sum(int(x) for x in re.search(r"(\d+) failed, (\d+) errored, (\d+) timeout", t).groups())
m = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", t)
def us(v): return float(v[:-2]) if v.endswith("us") else float(v[:-2]) * 1e3 if v.endswith("ms") else float(v[:-1]) * 1e6
print(json.dumps({"rps": rps, "mean_us": us(m.group(3)), "max_us": us(m.group(2)), "errors": bad, "requests": ok}))'
  }
  h2targets="switchboard-h2:$P_SB:http haproxy-h2:$P_HA2:http"
  [ "$TLS" = 1 ] && h2targets="$h2targets switchboard-h2tls:$P_SBT:https haproxy-h2tls:$P_HAT2:https"
  for target in $h2targets; do
    IFS=: read -r name port scheme <<< "$target"
    h2run "$port" 2 4 "$scheme" > /dev/null  # warm-up
    for i in $(seq "$RUNS"); do
      printf '%s,load,%s\t%s\n' "$name" "$i" "$(h2run "$port" "$H2_CONNS" "$H2_STREAMS" "$scheme")" >> "$results"
      printf '%s,one,%s\t%s\n' "$name" "$i" "$(h2run "$port" 1 1 "$scheme")" >> "$results"
    done
  done
fi
python3 - "$RUNS" "$CONNS" "$results" "$H2_CONNS" "$H2_STREAMS" "$TICK_US" "$PIN" <<'PY'
import json, statistics, sys
runs, conns = int(sys.argv[1]), sys.argv[2]
tick_us = int(sys.argv[6])
R = {}
for line in open(sys.argv[3]):
    k, v = line.rstrip("\n").split("\t")
    R[k] = json.loads(v)
def med(name, kind, key):
    return statistics.median(R["%s,%s,%d" % (name, kind, i)][key] for i in range(1, runs + 1))
names = [n for n in ("direct", "switchboard", "base", "haproxy") if "%s,load,1" % n in R]
print("proxy overhead: %d runs each (medians), ~4 KiB chat body, wrk 1 thread; nginx fixed JSON upstream" % runs)
print("%-12s %12s %10s %10s %10s | %14s %10s" % ("target", "rps@%sconn" % conns, "p50 us", "p90 us", "p99 us", "p50 us @1conn", "errors"))
for n in names:
    print("%-12s %12.0f %10.0f %10.0f %10.0f | %14.0f %10d" % (n, med(n, "load", "rps"), med(n, "load", "p50_us"),
          med(n, "load", "p90_us"), med(n, "load", "p99_us"), med(n, "one", "p50_us"),
          sum(R["%s,%s,%d" % (n, k, i)]["errors"] for k in ("load", "one") for i in range(1, runs + 1))))
sb, ha, d = med("switchboard", "load", "rps"), med("haproxy", "load", "rps"), med("direct", "load", "rps")
print("switchboard/haproxy throughput: %.2fx   switchboard/direct: %.2fx   haproxy/direct: %.2fx" % (sb / ha, sb / d, ha / d))
print("added median latency at 1 connection: switchboard %+.0f us, haproxy %+.0f us (over direct)" % (
    med("switchboard", "one", "p50_us") - med("direct", "one", "p50_us"),
    med("haproxy", "one", "p50_us") - med("direct", "one", "p50_us")))
print("added latency at %s connections (over direct): switchboard p50 %+.0f us p99 %+.0f us, haproxy p50 %+.0f us p99 %+.0f us" % (
    conns, med("switchboard", "load", "p50_us") - med("direct", "load", "p50_us"),
    med("switchboard", "load", "p99_us") - med("direct", "load", "p99_us"),
    med("haproxy", "load", "p50_us") - med("direct", "load", "p50_us"),
    med("haproxy", "load", "p99_us") - med("direct", "load", "p99_us")))
if "base" in names:
    b = med("base", "load", "rps")
    print("switchboard/base throughput: %.2fx   base/haproxy: %.2fx" % (sb / b, b / ha))
def cpu_us(name, key="ticks"):  # CPU time per request at CONNS connections, median over the runs
    return statistics.median(R["%s,cpu,%d" % (name, i)][key] * tick_us / R["%s,load,%d" % (name, i)]["requests"]
                             for i in range(1, runs + 1))
cpu_names = [n for n in names if n != "direct"]
print("CPU per request at %s connections (the proxy's user+system time; a core's capacity is its inverse):" % conns)
print("  " + "   ".join("%s %.2f us" % (n, cpu_us(n)) for n in cpu_names))
print("per-core capacity switchboard/haproxy: %.2fx" % (cpu_us("haproxy") / cpu_us("switchboard"))
      + ("   switchboard/base: %.2fx" % (cpu_us("base") / cpu_us("switchboard")) if "base" in names else ""))
print("the whole machine's CPU per request (wrk, nginx, loopback TCP and the proxy; the rest is the proxy's subtracted):")
print("  " + "   ".join("%s %.2f us (rest %.2f)" % (n, cpu_us(n, "machine"), cpu_us(n, "machine") - cpu_us(n))
                        for n in names))
print("TCP segments sent per request (every hop): " + "   ".join("%s %.2f" % (n, statistics.median(
    R["%s,cpu,%d" % (n, i)]["segs"] / R["%s,load,%d" % (n, i)]["requests"] for i in range(1, runs + 1))) for n in names))
ncores = len(R["direct,cpu,1"]["cores"])
pinned = sys.argv[7] == "1"
print("each core's busy share during the load runs (medians; %s):" % (
    "CPU 0 the proxy's, CPU 1 wrk's, nginx on either" if ncores == 2 and pinned else "unpinned or not 2 cores"))
print("  " + "   ".join("%s %s" % (n, "/".join("%.0f%%" % (100 * statistics.median(
    R["%s,cpu,%d" % (n, i)]["cores"][c] for i in range(1, runs + 1))) for c in range(ncores))) for n in names))
if "switchboard-tls,load,1" in R:
    print("over TLS (same P-256 certificate; TLS 1.3):")
    print("%-16s %12s %10s %10s | %14s | %14s" % ("target", "rps@%sconn" % conns, "p50 us", "p99 us", "p50 us @1conn",
                                                 "handshakes/s"))
    for n in ("switchboard-tls", "haproxy-tls"):
        print("%-16s %12.0f %10.0f %10.0f | %14.0f | %14.0f" % (n, med(n, "load", "rps"), med(n, "load", "p50_us"),
              med(n, "load", "p99_us"), med(n, "one", "p50_us"), med(n, "hs", "rps")))
    print("switchboard/haproxy over TLS: throughput %.2fx, handshakes %.2fx" % (
        med("switchboard-tls", "load", "rps") / med("haproxy-tls", "load", "rps"),
        med("switchboard-tls", "hs", "rps") / med("haproxy-tls", "hs", "rps")))
def h2_rows(kind, label):
    sb, ha = "switchboard-" + kind, "haproxy-" + kind
    for n in (sb, ha):
        print("%-16s %12.0f %12.0f %10d | %16.0f" % (n, med(n, "load", "rps"), med(n, "load", "mean_us"),
              sum(R["%s,%s,%d" % (n, k, i)]["errors"] for k in ("load", "one") for i in range(1, runs + 1)),
              med(n, "one", "mean_us")))
    print("switchboard/haproxy over %s: throughput %.2fx, mean latency at 1x1 %.2fx" % (
        label, med(sb, "load", "rps") / med(ha, "load", "rps"), med(sb, "one", "mean_us") / med(ha, "one", "mean_us")))
if "switchboard-h2,load,1" in R:
    print("HTTP/2 with prior knowledge (h2load, %s connections x %s streams; 1x1 for the latency column):" % (
        sys.argv[4], sys.argv[5]))
    print("%-16s %12s %12s %10s | %16s" % ("target", "rps", "mean us", "errors", "mean us @1x1"))
    h2_rows("h2", "h2c")
if "switchboard-h2tls,load,1" in R:
    print("HTTP/2 over TLS (ALPN h2, the same certificate; h2load as above):")
    h2_rows("h2tls", "h2 with TLS")
PY
