#!/usr/bin/env bash
# Runs native test programs: exit 0 = pass, 77 = skip (reason on stdout), else fail.
set -u
pass=0; fail=0; skip=0
for t in "$@"; do
  out=$(timeout 120 "$t" 2>&1); rc=$?
  case $rc in
    0) pass=$((pass+1)) ;;
    77) skip=$((skip+1)); echo "SKIP $(basename "$t"): $out" ;;
    *) fail=$((fail+1)); echo "FAIL $(basename "$t") (exit $rc):"; echo "$out" ;;
  esac
done
echo "native: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
