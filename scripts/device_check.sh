#!/usr/bin/env bash
# The device check, one prepared script: the decoder's tests on tiny models on $DEVICE, the
# device profile of the offline pair, and a short bench (wall clock, and modelled on the measured
# profile and on a100-paper). Everything lands under $OUT.
#
#   DEVICE=cuda scripts/device_check.sh     # on a GPU machine (under 8 minutes on one GPU)
#   DEVICE=cpu  scripts/device_check.sh     # the same on the CPU (`make test` runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-device-check/$(date +%Y%m%d-%H%M%S)-$DEVICE}
TOKENS=${TOKENS:-32}
mkdir -p "$OUT"
echo "device check on $DEVICE -> $OUT"
{ date -u; uname -a; nproc; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"; } > "$OUT/machine.txt"
[ "$DEVICE" = cpu ] || nvidia-smi >> "$OUT/machine.txt" 2>&1 || true

echo "1/3 tests on tiny models"
TREEGRAFT_TEST_DEVICE=$DEVICE "$PY" -m pytest -q -p no:cacheprovider tests/test_device.py 2>&1 | tee "$OUT/tests.txt"

echo "2/3 device profile of the offline pair"
"$PY" -m treegraft_lab.cli profile --device "$DEVICE" --save "$OUT/profile.json" --plot "$OUT/profile.png" \
  2>/dev/null | tee "$OUT/profile.txt"

echo "3/3 short bench: wall clock, modelled on the measured profile and on a100-paper"
"$PY" -m treegraft_lab.cli bench --device "$DEVICE" --prompts treegraft-suite --split eval --categories code,qa \
  --limit-per-category 1 --max-new-tokens "$TOKENS" --methods ar,small,10101,hf-pld --prune value \
  --model-on "$OUT/profile.json,a100-paper" --prune-modelled topk --warmup-tokens 4 --out "$OUT/bench" \
  2>/dev/null | tee "$OUT/bench.txt"
echo "device check passed: $OUT"
