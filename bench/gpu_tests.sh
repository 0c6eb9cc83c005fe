#!/usr/bin/env bash
# Every CUDA-gated test of the suite on the GPU machine (issue 27): the test files that ask torch.cuda.is_available(),
# each in its own pytest process (a test that builds a model in-process keeps its GPU memory cached until it exits),
# with -rA so the log names every pass, skip and failure. CI has no GPU and skips them; run this in the same device
# call as any GPU work whenever the estimator or train.py changes, and commit the log.
#
#   source bench/gpu_env.sh && bash bench/gpu_tests.sh          # log: $OUT/gpu-tests.log; exit 1 if any file failed
set -uo pipefail
OUT=${OUT:-/tmp/gpu-tests-out}
mkdir -p "$OUT"
LOG="$OUT/gpu-tests.log"
FILES=$(grep -lE "cuda.is_available|needs_cuda" tests/test_*.py | sort)
{
    echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo unknown-commit)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)"
    echo "# files:" $FILES
} > "$LOG" 2>&1
STATUS=0
for F in $FILES; do
    echo "## $F" >> "$LOG"
    python3 -m pytest -rA -q -p no:cacheprovider "$F" >> "$LOG" 2>&1 || STATUS=1
done
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$LOG" | tail -40
exit $STATUS
