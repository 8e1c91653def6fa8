#!/usr/bin/env bash
# Installs the Debian packages switchboard needs for a purpose (build, test, bench, demo).
# As root it runs apt-get; otherwise it prints the apt-get line and fails.
set -euo pipefail
# The endpoint picker's test clients: node's @grpc/grpc-js (tests/extproc, from npm below),
# Python's grpcio with protoc for Envoy's .proto files, PyYAML for deploy/, openssl for a test
# certificate. Node.js itself only when the machine has none (an installed node ships npm).
extproc="python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev python3-yaml openssl"
command -v npm >/dev/null 2>&1 || extproc="$extproc nodejs npm"
# The dashboard's browser test (tests/integration/test_dashboard.py): Debian's chromium, driven
# by playwright-core from npm (tests/browser); playwright's own browser downloads are never used.
browser="chromium"
purpose=${1:-build}
pkgs="gcc make pkg-config libuv1-dev liburing-dev libhttp-parser-dev libjsmn-dev libyaml-dev libxxhash-dev libssl-dev libnghttp2-dev libzmq3-dev libmsgpack-dev protobuf-c-compiler libprotobuf-c-dev"
case "$purpose" in
  build|demo) ;;
  # systemd for systemd-analyze (the installed units are verified), absent from container images.
  test)  pkgs="$pkgs libcmocka-dev libtsan2 python3 python3-zmq python3-msgpack curl prometheus systemd $extproc $browser" ;;
  package) pkgs="$pkgs dpkg-dev debhelper fakeroot lintian" ;;
  bench) pkgs="$pkgs wrk haproxy nginx-light python3 curl nghttp2-client $extproc" ;;
  *) echo "deps.sh: unknown purpose '$purpose'" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# The test clients' npm packages (tests/extproc, and for tests tests/browser), each pinned by its
# package-lock.json; reinstalled when the lock changes.
npm_deps() {
  local dirs
  case "$purpose" in test) dirs="tests/extproc tests/browser" ;; bench) dirs="tests/extproc" ;; *) return 0 ;; esac
  cd "$(dirname "$0")/.."
  for dir in $dirs; do
    if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
      echo "deps.sh: npm ci in $dir" >&2
      # playwright-core downloads no browser on install (it has no install script); said
      # anyway, so a later version that did would not fetch one.
      (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
  done
}
if [ -z "$missing" ]; then
  npm_deps
  exit 0
fi
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
npm_deps
