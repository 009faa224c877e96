#!/bin/bash
# Reproduce docs/bench-sample: real `sparkrack bench` runs against `sparkrack bench-server`
# (four server configurations), combined with `sparkrack bench-report`.
#   usage: docs/bench-sample/run.sh [WORKDIR]     (run from the repository root)
set -euo pipefail
work=${1:-/tmp/bench-sample}
mkdir -p "$work"
run() {  # label, server args..., --, bench args...
  local label=$1; shift
  local sargs=()
  while [ "$1" != "--" ]; do sargs+=("$1"); shift; done
  shift
  .venv/bin/sparkrack bench-server --port 0 "${sargs[@]}" > "$work/$label.srv" 2>&1 &
  local pid=$!
  sleep 1.5
  local url
  url=$(grep -o 'http://[0-9.:]*' "$work/$label.srv")
  .venv/bin/sparkrack bench --url "$url" --label "$label" --max-tokens 256 \
    --out "$work/$label" "$@" > "$work/$label.out" 2>&1 || echo "$label: exit $?"
  kill "$pid"
}
run no-spec-baseline --rate 32 -- --model sparkrack-test
run mtp-3-4 --rate 54 --accept-len 2.7 -- --model sparkrack-test
run eager-collapse-guard-off --rate 150 -- --model sparkrack-test-uniform --no-guard
run serialised-server --rate 32 --serialize -- --model sparkrack-test
for label in no-spec-baseline mtp-3-4 eager-collapse-guard-off serialised-server; do
  mkdir -p "docs/bench-sample/runs/$label"
  cp "$work/$label/results.json" "docs/bench-sample/runs/$label/"
done
.venv/bin/sparkrack bench-report docs/bench-sample/runs/no-spec-baseline \
  docs/bench-sample/runs/mtp-3-4 docs/bench-sample/runs/eager-collapse-guard-off \
  docs/bench-sample/runs/serialised-server \
  --out docs/bench-sample --title "sparkrack bench sample (local test server)"
