"""Liger under FSDP2 (issue 21, run 3): each `-liger` matrix cell against its twin without Liger, step by step.

    python bench/check_liger.py bench/results/h200-x2-<date>.json     # exit 1 when a pair disagrees

Both runs train the same data from the same seed; Liger's fused linear cross-entropy reads lm_head's weight without
calling lm_head, which FSDP2 warns about ("did not run forward before backward"): if the weight was not gathered or
its gradient not reduced, the grad norm and then the loss part ways. Tolerances, chosen before any data: loss as the
parity test's (|a - b| <= 0.05 + 2%), grad norm |a - b| <= 0.05 + 10% (bf16 kernels of another reduction order).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def loss_ok(a: float, b: float) -> bool:
    return abs(a - b) <= 0.05 + 0.02 * abs(b)


def norm_ok(a: float | None, b: float | None) -> bool:
    return a is None or b is None or abs(a - b) <= 0.05 + 0.10 * abs(b)


def pairs(cells: dict) -> list[tuple[str, str]]:
    """(plain key, liger key) of cells that both ran and recorded grad norms; `-liger` exactly (not liger-flex)."""
    out = []
    for key, c in sorted(cells.items()):
        twin = key.removesuffix("-liger")
        if key.endswith("-liger") and twin in cells:
            both = (c, cells[twin])
            if all(x.get("status") == "ok" and (x.get("measured") or {}).get("grad_norms") for x in both):
                out.append((twin, key))
    return out


def disagreements(plain: dict, liger: dict) -> list[str]:
    """Steps (1-based) where loss or grad norm part ways, as lines."""
    out = []
    for i, (la, lb) in enumerate(zip(liger["losses"], plain["losses"], strict=False)):
        if not loss_ok(la, lb):
            out.append(f"step {i + 1}: loss {la} vs {lb}")
    for i, (ga, gb) in enumerate(zip(liger["grad_norms"], plain["grad_norms"], strict=False)):
        if not norm_ok(ga, gb):
            out.append(f"step {i + 1}: grad norm {ga} vs {gb}")
    return out


def main(argv: list[str]) -> int:
    bad = 0
    for path in map(Path, argv or sorted(Path(__file__).parent.joinpath("results").glob("h200-x2-*.json"))):
        cells = json.loads(path.read_text()).get("cells", {})
        for plain, liger in pairs(cells):
            lines = disagreements(cells[plain]["measured"], cells[liger]["measured"])
            print(f"{path.name}: {liger} vs {plain}: " + ("agree" if not lines else "; ".join(lines[:5])))
            bad += bool(lines)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
