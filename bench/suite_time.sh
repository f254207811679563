#!/usr/bin/env bash
# The test suite's wall time at two commits, back to back on this machine: for each, a
# fresh clone of this checkout at that commit runs `.ci/run` (as CI does, CI=true),
# then the README's test command in the venv that made (as a developer runs it, no CI
# variable). Prints one line per figure and the ratios. Both runs need what .ci/run
# installs (Debian's Chromium and Xvfb, npm); nothing else should run meanwhile.
#
#   bench/suite_time.sh [BASE [HEAD]]      (defaults: 70261b0 and HEAD)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:-70261b0}"
head="${2:-HEAD}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Bytecode as CI writes it (a shell may have PYTHONDONTWRITEBYTECODE set).
unset PYTHONDONTWRITEBYTECODE CI

seconds() { python3 -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$1"; }

measure() {
    local name=$1 commit=$2 dir="$work/$1" start
    git clone -q "$repo" "$dir"
    git -C "$dir" checkout -q "$commit"
    start=$(date +%s.%N)
    (cd "$dir" && CI=true bash .ci/run >"$work/$name-ci.log" 2>&1) \
        || { echo "$name: .ci/run failed (log: kept in $work/$name-ci.log)"; trap - EXIT; exit 1; }
    echo "$name ci_run $(seconds "$start")"
    start=$(date +%s.%N)
    (cd "$dir" && . .venv/bin/activate \
        && PERMCLIENT_REQUIRE_BROWSER=1 PERMCLIENT_REQUIRE_INTEROP=1 \
            python -m pip install -q -e '.[test]' && python -m pytest) \
        >"$work/$name-readme.log" 2>&1 \
        || { echo "$name: the README command failed (log: $work/$name-readme.log)"; trap - EXIT; exit 1; }
    echo "$name readme $(seconds "$start")"
}

measure base "$base" | tee "$work/figures"
measure head "$head" | tee -a "$work/figures"
python3 - "$work/figures" <<'PY'
import sys
figures = {}
for line in open(sys.argv[1]):
    name, what, value = line.split()
    figures[name, what] = float(value)
for what in ("ci_run", "readme"):
    print(f"ratio {what} {figures['head', what] / figures['base', what]:.2f}")
PY
