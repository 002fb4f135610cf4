#!/usr/bin/env bash
# The one prepared script for a lent accelerator (docs/accelerator.md), run from
# the repository root with $OUT set: the device check's timing section, then a short S1 pilot
# at 16K tokens on the BPE corpus carried as data/pydocs (its ids made here by `data tokenize`),
# recording step time, input wait and MFU beside the committed plan record (if any).
# Wheels the device image lacks travel in .whl/ (installed offline, no index).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl ml-collections tensorboardX grain \
    array-record 2>&1 | tail -n 3
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -n 3
budget=${DEVICE_CHECK_BUDGET_S:-240}
timeout $((budget + 60)) python3 -m hybrid_jax.bench.device_check --sections timing \
  --budget-s "$budget" --out "$OUT/device_check_timing.json" 2>&1 | tail -n 20
plan=()
[ -f hybrid_jax/bench/results/device/pilot_plan.jsonl ] && plan=(--plan hybrid_jax/bench/results/device/pilot_plan.jsonl)
timeout ${PILOT_TIMEOUT_S:-240} python3 -m hybrid_jax.bench.pilot --corpus data/pydocs \
  --size S1 --seq-len 16384 --batch-size 8 --steps 30 "${plan[@]}" --out "$OUT/pilot_s1.json" \
  2>&1 | tail -n 20
