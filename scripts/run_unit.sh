#!/usr/bin/env bash
# Runs each cmocka unit-test binary and prints one closing summary line.
set -u
pass=0; fail=0; failed=""
for t in "$@"; do
  out=$("$t" 2>&1); rc=$?
  n_pass=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  n_fail=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
  pass=$((pass + ${n_pass:-0})); fail=$((fail + ${n_fail:-0}))
  if [ $rc -ne 0 ]; then
    [ -z "$n_fail" ] && fail=$((fail + 1))
    failed="$failed $t"; printf '%s\n' "$out"
  else
    printf '%-50s %s passed\n' "${t#build/san/tests/}" "${n_pass:-0}"
  fi
done
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ] || { echo "failing:$failed"; exit 1; }
