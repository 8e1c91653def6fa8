#!/usr/bin/env bash
# Builds the Debian package (binary only, unsigned) from a copy of the tracked tree, so the
# package never sees build/ or node_modules/, then runs lintian over it. Output: build/pkg/*.deb.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(dpkg-parsechangelog -S Version)
out=build/pkg
src="$out/src/switchboard-$version"
rm -rf "$out"
mkdir -p "$src"
# The files git tracks (committed or staged), as they are in the work tree.
git ls-files -z --cached | while IFS= read -r -d '' f; do
  [ -e "$f" ] || continue
  mkdir -p "$src/$(dirname "$f")"
  cp -p "$f" "$src/$f"
done
(cd "$src" && dpkg-buildpackage -us -uc -b -j"$(nproc)" >../build.log 2>&1) || {
  tail -40 "$out/src/build.log" >&2; echo "package: dpkg-buildpackage failed (log: $out/src/build.log)" >&2; exit 1; }
mv "$out"/src/*.deb "$out"/
deb=$(ls "$out"/switchboard_*.deb)
echo "package: $deb"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\|Installed-Size\):/  \1:/p'
# Errors fail the build; warnings are printed (lintian's exit status counts errors only here).
lintian --fail-on error "$deb" 2>&1 | sed 's/^/  lintian: /' || {
  echo "package: lintian found errors" >&2; exit 1; }
