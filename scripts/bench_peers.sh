#!/usr/bin/env bash
# The README's peer tables: every method on the eval split (2 prompts per category, 64 new tokens),
# one run per clock (the default small drafter, ngram+recycling), then all-small with each other small drafter. CLOCK=a100-paper (modelled; any
# machine) or CLOCK=wall (this machine's wall clock: run it on an otherwise idle machine).
set -euo pipefail
BIN=${BIN:-.venv/bin/treegraft-lab}
OUT=${OUT:-data/bench}
CLOCK=${CLOCK:-a100-paper}
COMMON=(--pair smollm2-pocket --dtype float32 --prompts treegraft-suite --split eval --limit-per-category 2
        --max-new-tokens 64 --budget 63 --growth lookup)
METHODS=ar,hf-pld,recycling,suffix,small,adaptive,rule:match,rule:score
if [ "$CLOCK" = wall ]; then
  $BIN bench "${COMMON[@]}" --prune value --methods $METHODS --out "$OUT/smollm2-pocket-wall-peers"
  for s in ngram suffix ngram+suffix recycling; do
    $BIN bench "${COMMON[@]}" --prune value --methods ar,small --small "$s" --out "$OUT/smollm2-pocket-wall-small-$s"
  done
else
  $BIN bench "${COMMON[@]}" --prune topk --model-on "$CLOCK" --model-only --methods $METHODS \
      --out "$OUT/smollm2-pocket-$CLOCK-peers"
  for s in ngram suffix ngram+suffix recycling; do
    $BIN bench "${COMMON[@]}" --prune topk --model-on "$CLOCK" --model-only --methods ar,small --small "$s" \
        --out "$OUT/smollm2-pocket-$CLOCK-small-$s"
  done
fi
