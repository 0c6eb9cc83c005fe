#!/usr/bin/env bash
# One device call of a GPU benchmark session: the matrix cells in priority order under a wall-time budget, optionally
# preceded by `plan --trial`. Run from the repo root on the GPU machine; calls resume where the last one stopped.
#
#   bash bench/gpu_session.sh matrix 560        # matrix cells only, 560 s in all
#   bash bench/gpu_session.sh trial 560         # plan --trial for Mistral-7B full seq 4096 first, then matrix cells
#   MATRIX_NAME=h200-x2-2026-11-30 bash bench/gpu_session.sh matrix 560   # finish an earlier day's matrix
#   PRIORITY='g2-zero3-*,g1-*' bash bench/gpu_session.sh matrix 300       # other cells first (glob patterns)
#   GROUP=zero3 bash bench/gpu_session.sh matrix 560   # one of issue 21's groups (below) as the priority
#   bash bench/gpu_session.sh wires 560                # probe each wire once, then the slow-wire cells
#   bash bench/gpu_session.sh preempt 560              # SIGTERM + --resume under FSDP2 and ZeRO-3
#
# Results: $OUT/matrix.json (the bench/results/<machine>-<date>.json to commit), $OUT/*.log, $OUT/logs.tgz (every
# cell's per-step JSONL). The state between calls lives in /tmp (kept while the machine stays warm); a fresh machine
# starts from the committed results file instead.
set -uo pipefail
PHASE=${1:?phase: matrix or trial}
BUDGET=${2:?budget in seconds}
T0=$(date +%s)
source bench/gpu_env.sh
OUT=${OUT:-/tmp/gpu-session-out}
mkdir -p "$OUT"
WORK=/tmp/bench-matrix
RES=/tmp/matrix.json
SEED=bench/results/${MATRIX_NAME:-h200-x2-$(date +%F)}.json
[ -f "$RES" ] || { [ -f "$SEED" ] && cp "$SEED" "$RES"; }

# Issue 5's strategies at seq 4096 with checkpointing first (DDP / FSDP2 / ZeRO loss parity), then its MFU levers
# (flex attention and the planner's Liger pick are new), then the rest of the matrix.
DEFAULT="g2-ddp-full-s4096-mb1-ckpton,g2-fsdp-full-s4096-mb1-ckpton,g2-zero1-full-s4096-mb1-ckpton"
DEFAULT+=",g2-zero2-full-s4096-mb1-ckpton,g2-zero3-full-s4096-mb1-ckpton,g2-fsdp-full-s4096-mb2-ckptoff-liger-flex"
DEFAULT+=",g2-fsdp_grad_op-full-s4096-mb2-ckptoff-liger-flex,g2-fsdp-full-s4096-mb1-ckptoff-liger-flex"
DEFAULT+=",g2-fsdp_grad_op-full-s4096-mb2-ckptoff-liger,g2-fsdp-full-s4096-mb4-ckptoff-liger-flex"
DEFAULT+=",g2-fsdp-full-s4096-mb2-ckptoff-liger"
DEFAULT+=",g2-fsdp_grad_op-full-s4096-mb1-ckpton,g2-ddp-lora-s4096-mb1-ckpton,g2-fsdp-full-s4096-mb1-ckptoff"
DEFAULT+=",g2-fsdp-full-s4096-mb1-ckptoff-liger,g2-fsdp-full-s4096-mb4-ckptoff-liger"
DEFAULT+=",g2-*-s4096-mb1-ckptoff,g2-*-s1024-*,g1-*-s4096-*,g1-*,g2-fsdp-full-s4096-mb2-ckptoff-liger-compile"
# Issue 21's groups, first call first (bench/README.md gives the time each needs; ~45 s a NVLink cell):
# zero3 (run 2: ZeRO-3 parity with the random init built outside zero.Init, beside DDP in the same file), liger (run 3:
# each -liger cell with its plain twin; bench/check_liger.py compares them), picks (run 4: the planner's picks with
# accumulation; `trial` runs plan --trial too), wires (run 1: after the wire probes), scripts (run 5: bench/sweep.py).
declare -A ISSUE21=(
    [zero3]="g2-ddp-full-s4096-mb1-ckpton,g2-zero3-full-s4096-mb1-ckpton,g2-ddp-full-s1024-mb4-ckpton,g2-zero3-full-s1024-mb4-ckpton,g2-zero3-full-s4096-mb1-ckptoff"
    [liger]="g2-fsdp-full-s4096-mb1-ckptoff,g2-fsdp-full-s4096-mb1-ckptoff-liger,g2-fsdp_grad_op-full-s4096-mb1-ckptoff,g2-fsdp_grad_op-full-s4096-mb1-ckptoff-liger"
    [picks]="g2-zero1-full-s4096-mb1-ckptoff-ga4,g2-fsdp_grad_op-full-s4096-mb1-ckptoff-ga4,g2-zero1-full-s4096-mb1-ckptoff-liger-flex-ga32"
    [wires]="g2-*-s1024-mb4-ckpton-p2poff,g2-*-s4096-mb1-ckpton-p2poff,g2-*-s1024-mb4-ckpton-sockets,g2-*-s4096-mb1-ckpton-sockets"
)
[ -n "${GROUP:-}" ] && DEFAULT=${ISSUE21[$GROUP]:?GROUP is one of: ${!ISSUE21[*]}}
[ "$PHASE" = wires ] && DEFAULT=${ISSUE21[wires]}
PRIORITY=${PRIORITY:-$DEFAULT}

if [ "$PHASE" = wires ]; then  # each wire once per machine; the cells' plans read these (bench/wires.py)
    mkdir -p "$WORK"
    for W in nvlink p2poff sockets; do
        [ -f "$WORK/probe-wire-$W.json" ] || python3 bench/wires.py probe --wire "$W" \
            --output "$WORK/probe-wire-$W.json" 2>&1 | tee "$OUT/probe-wire-$W.log"
        cp "$WORK/probe-wire-$W.json" "$OUT/" 2>/dev/null
    done
fi
if [ "$PHASE" = preempt ]; then  # run 6: ~3 launches of a 12-step 7B run per strategy
    for S in fsdp zero3; do
        python3 bench/preempt.py --strategy "$S" --workdir "$WORK/preempt" --output "$OUT/preempt-$S.json" \
            2>&1 | tail -5 | tee "$OUT/preempt-$S.log"
    done
    exit 0
fi

if [ "$PHASE" = trial ]; then
    [ -f "$WORK/mistral-7b/config.json" ] || python3 tests/tiny_model.py mistral-7b "$WORK/mistral-7b"
    python3 -m generator plan --model mistral-7b --seq-len 4096 --global-batch 8 --trial --trial-steps 8 \
        --model-dir "$WORK/mistral-7b" --output "$OUT/trial-accelerate_config.yaml" --force \
        --calibration-file "$OUT/trial-calibration.jsonl" 2>&1 | tee "$OUT/trial.log"
fi
LEFT=$((BUDGET - ($(date +%s) - T0) - 15))
python3 bench/run_matrix.py --results "$RES" --also-write "$OUT/matrix.json" --workdir "$WORK" --budget-s "$LEFT" \
    --only "$PRIORITY" 2>&1 | tee "$OUT/matrix.log"
tar czf "$OUT/logs.tgz" -C "$WORK" $(cd "$WORK" && ls *.jsonl 2>/dev/null) 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpus.csv" 2>&1
exit 0
