#!/usr/bin/env bash
# The device check, one prepared script for a bare GPU machine: its own python3 (torch and
# transformers; no plotly or ipywidgets needed), the project on PYTHONPATH, nothing downloaded.
# Each step runs in its own process (scripts/device_check.py STEP); its return code is recorded and
# the run goes on after a failure. Under $OUT: steps.log (every step's output), stderr.log
# (tracebacks and warnings), results.jsonl (one JSON line per step), profile.json, speed.json,
# machine.txt, summary.txt (the table printed at the end, with the speed step's headline numbers).
# Each step runs at most STEP_TIMEOUT s (150), and no step starts past TOTAL_BUDGET s (450; it is
# listed as skipped), so one run fits a 600 s call (on the CPU: 300 s a step, no total budget). Exits 1 when any step failed or was skipped.
#
#   DEVICE=cuda scripts/device_check.sh                       # a GPU machine (under 8 minutes on one H200)
#   DEVICE=cpu PY=.venv/bin/python scripts/device_check.sh    # the same on the CPU, small shapes (`make test`)
#   CLOCK=a100-paper DEVICE=cuda scripts/device_check.sh      # decide on a named profile (default on CUDA: measured)
set -u
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
OUT=${OUT:-device-check/$(date -u +%Y%m%d-%H%M%S)-$DEVICE}
if [ "$DEVICE" = cpu ]; then  # CI's shared cores: slow, and no lease to fit
  STEP_TIMEOUT=${STEP_TIMEOUT:-300}; TOTAL_BUDGET=${TOTAL_BUDGET:-3600}
else
  STEP_TIMEOUT=${STEP_TIMEOUT:-150}; TOTAL_BUDGET=${TOTAL_BUDGET:-450}
fi
STEPS=${STEPS:-"versions load tree cache greedy sampling pocket hf costs profile speed"}
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
  left=$(( TOTAL_BUDGET - (t0 - start) ))
  if [ "$left" -lt 20 ]; then  # no time left for a step: listed, not run
    failed=$((failed + 1))
    rows+=("$(printf '%-9s %4s %6s  %s' "$step" - 0 "skipped: the run's ${TOTAL_BUDGET} s are spent")")
    continue
  fi
  limit=$(( left < STEP_TIMEOUT ? left : STEP_TIMEOUT ))
  echo "== $step" | tee -a "$OUT/steps.log" >> "$OUT/stderr.log"
  timeout "$limit" "$PY" scripts/device_check.py "$step" --device "$DEVICE" --out "$OUT" \
    2>> "$OUT/stderr.log" | tee -a "$OUT/steps.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  note=$(grep "^RESULT $step:" "$OUT/steps.log" | tail -1 | cut -d' ' -f3- | cut -c1-90)
  [ "$rc" -eq 124 ] && note="timed out after ${limit} s"
  [ -n "$note" ] || note=$(grep -v '^\s*$' "$OUT/stderr.log" | tail -1 | cut -c1-90)
  rows+=("$(printf '%-9s %4s %6s  %s' "$step" "$rc" "$(( $(date +%s) - t0 ))" "$note")")
done
{
  echo "device check summary: DEVICE=$DEVICE, $(( $(date +%s) - start )) s, $failed failed or skipped step(s), out $OUT"
  printf '%-9s %4s %6s  %s\n' step rc sec result
  printf '%s\n' "${rows[@]}"
  [ -s "$OUT/headline.txt" ] && cat "$OUT/headline.txt"
} | tee "$OUT/summary.txt"
[ "$failed" -eq 0 ]
