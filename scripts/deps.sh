#!/usr/bin/env bash
# Installs the Debian packages switchboard needs for a purpose (build, test, bench, demo).
# As root it runs apt-get; otherwise it prints the apt-get line and fails.
set -euo pipefail
purpose=${1:-build}
pkgs="gcc make pkg-config libuv1-dev libhttp-parser-dev libjsmn-dev libyaml-dev libxxhash-dev libssl-dev libnghttp2-dev libzmq3-dev libmsgpack-dev protobuf-c-compiler libprotobuf-c-dev"
case "$purpose" in
  build|demo) ;;
  test)  pkgs="$pkgs libcmocka-dev python3 python3-zmq python3-msgpack python3-grpcio curl prometheus" ;;
  bench) pkgs="$pkgs wrk haproxy nginx-light python3 curl" ;;
  *) echo "deps.sh: unknown purpose '$purpose'" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "deps.sh: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || apt-get update
  # Debian starts nginx/haproxy services on install; benchmarks run their own instances.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
  rm -f /usr/sbin/policy-rc.d
else
  echo "switchboard needs these Debian packages; run as root:" >&2
  echo "  apt-get install -y$missing" >&2
  exit 1
fi
