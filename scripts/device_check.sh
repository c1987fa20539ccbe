#!/usr/bin/env bash
# The device check, one prepared script for a bare GPU machine: its own python3 (torch and
# transformers; no plotly or ipywidgets needed), the project on PYTHONPATH, nothing downloaded.
# Each step runs in its own process (scripts/device_check.py STEP); its return code is recorded and
# the run goes on after a failure. Under $OUT: steps.log (every step's output), stderr.log
# (tracebacks and warnings), results.jsonl (one JSON line per step), profile.json, machine.txt,
# summary.txt (the table printed at the end). Exits 1 when any step failed.
#
#   DEVICE=cuda scripts/device_check.sh                       # a GPU machine (under 8 minutes on one H200)
#   DEVICE=cpu PY=.venv/bin/python scripts/device_check.sh    # the same on the CPU, tiny shapes (`make test`)
set -u
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
OUT=${OUT:-device-check/$(date -u +%Y%m%d-%H%M%S)-$DEVICE}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
STEPS=${STEPS:-"versions load tree cache greedy sampling pocket hf costs profile"}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TREEGRAFT_CHECK_WORK=${TREEGRAFT_CHECK_WORK:-${TMPDIR:-/tmp}/treegraft-device-check-$DEVICE}
export TREEGRAFT_PROFILE_CACHE=${TREEGRAFT_PROFILE_CACHE:-$TREEGRAFT_CHECK_WORK/profiles}
mkdir -p "$OUT" "$TREEGRAFT_CHECK_WORK"
: > "$OUT/steps.log"; : > "$OUT/stderr.log"; : > "$OUT/results.jsonl"
{ date -u; uname -a; nproc; command -v nvidia-smi >/dev/null && nvidia-smi; } > "$OUT/machine.txt" 2>&1
echo "device check on $DEVICE with $PY -> $OUT"
start=$(date +%s)
rows=()
failed=0
for step in $STEPS; do
  t0=$(date +%s)
  echo "== $step" | tee -a "$OUT/steps.log" >> "$OUT/stderr.log"
  timeout "$STEP_TIMEOUT" "$PY" scripts/device_check.py "$step" --device "$DEVICE" --out "$OUT" \
    2>> "$OUT/stderr.log" | tee -a "$OUT/steps.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  note=$(grep "^RESULT $step:" "$OUT/steps.log" | tail -1 | cut -d' ' -f3- | cut -c1-90)
  [ "$rc" -eq 124 ] && note="timed out after ${STEP_TIMEOUT} s"
  [ -n "$note" ] || note=$(grep -v '^\s*$' "$OUT/stderr.log" | tail -1 | cut -c1-90)
  rows+=("$(printf '%-9s %4s %6s  %s' "$step" "$rc" "$(( $(date +%s) - t0 ))" "$note")")
done
{
  echo "device check summary: DEVICE=$DEVICE, $(( $(date +%s) - start )) s, $failed failed step(s), out $OUT"
  printf '%-9s %4s %6s  %s\n' step rc sec result
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/summary.txt"
[ "$failed" -eq 0 ]
