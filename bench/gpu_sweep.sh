#!/usr/bin/env bash
# One device call of the sweep (bench/sweep.py): cells in priority order under a wall-time budget.
# Run from the repo root on the GPU machine; the results file seeds the next call, so calls resume.
#
#   bash bench/gpu_sweep.sh 540                                # every cell not yet done, in CELLS order
#   ONLY='custom-*,trainer-*' bash bench/gpu_sweep.sh 540      # some cells first (glob patterns)
#   ONLY='*-g2-*' bash bench/gpu_sweep.sh 540                  # the two-GPU cells, on a two-GPU machine
#
# Results: $OUT/sweep.json (commit it as bench/results/h200-x<GPUs>-sweep-<date>.json), $OUT/sweep.log, $OUT/logs.tgz.
set -uo pipefail
BUDGET=${1:?budget in seconds}
T0=$(date +%s)
source bench/gpu_env.sh
OUT=${OUT:-/tmp/gpu-sweep-out}
mkdir -p "$OUT"
WORK=/tmp/bench-sweep
RES=/tmp/sweep.json
SEED=bench/results/${SWEEP_NAME:-h200-x1-sweep-$(date +%F)}.json
[ -f "$RES" ] || { [ -f "$SEED" ] && cp "$SEED" "$RES"; }
LEFT=$((BUDGET - ($(date +%s) - T0) - 20))
python3 bench/sweep.py --results "$RES" --also-write "$OUT/sweep.json" --workdir "$WORK" --budget-s "$LEFT" \
    --only "${ONLY:-*}" 2>&1 | tee "$OUT/sweep.log"
tar czf "$OUT/logs.tgz" -C "$WORK" $(cd "$WORK" && ls *.jsonl 2>/dev/null) 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpus.csv" 2>&1
exit 0
