#!/usr/bin/env bash
# Checks the C lines changed since BASE (a git revision, default main) against the committed
# .clang-format: uncommitted changes count too, untracked files do not. Never rewrites a
# file; prints what clang-format would change and fails if anything. Only changed lines are
# checked because the tree as a whole predates the .clang-format file; a file that is touched
# is held to it from then on, line by line.
#   scripts/check_format.sh [BASE]
set -euo pipefail
base=${1:-main}
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed" >&2; exit 1; }
git rev-parse --verify -q "$base^{commit}" >/dev/null ||
  { echo "check-format: no revision '$base' to compare with (set FORMAT_BASE)" >&2; exit 1; }
out=$(git clang-format --diff --extensions c,h "$(git merge-base "$base" HEAD)" -- src tests bench 2>&1) || true
if printf '%s\n' "$out" | grep -q '^diff --git'; then
  printf '%s\n' "$out"
  echo "check-format: the lines above differ from .clang-format (changed since $base)" >&2
  exit 1
fi
echo "check-format: lines changed since $base are clean"
