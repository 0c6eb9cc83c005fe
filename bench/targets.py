"""The calibration targets of issue 6 and whether the current estimator meets them on the committed results."""

from __future__ import annotations

from dataclasses import dataclass

ALLOC_TOL, RESERVED_TOL, TPS_TOL, REGRET_TOL = 5.0, 10.0, 15.0, 3.0
"""Percent: peak allocated, peak reserved, tokens/s per GPU, recommendation regret."""
VALIDATION_TPS_TOL = 10.0
"""Percent, tokens/s on held-out rows (issues 17 and 18): tighter than the fit rows' 15%, as the issues ask."""
TARGETS = (
    f"peak allocated within {ALLOC_TOL:.0f}%",
    f"peak reserved within {RESERVED_TOL:.0f}%",
    f"tokens/s within {TPS_TOL:.0f}%",
    f"recommendation within {REGRET_TOL:.0f}% of the fastest that fits",
)
# What the model is missing, per target, when it is missed. Written by whoever reads the misses; keep it honest.
# Why a target is missed, where the cause is known; the report prints it beside the rows that missed.
WHY_MISSED: dict[str, str] = {
    "tokens/s within 15%": (
        "ZeRO-3's step time is host-bound (Python hooks fetch and release every submodule's parameters) and varies "
        "between runs of the same cell on the same machine and day: seq 4096 with checkpointing measured 3,911 and "
        "4,483 tokens/s, seq 1024 x mb4 4,600 and 3,976 (single steps of one run range 0.84-1.36 s). The fitted "
        "per-pass overhead sits between the runs; no single value puts both runs of a cell within 15%."
    ),
}


# Why a held-out row misses, where it is understood. Nothing here was fitted: these are the open questions.
WHY_VALIDATION_MISSED: dict[str, str] = {
    "tokens/s within 10%": (
        "Three causes, none fitted away. (1) The seq-2048 micro-batch-1 rows (issue 20's 200-step curves: 2,048 tokens "
        "a step) take 0.04-0.10 s a step more than the estimator's GPU time (measured 0.18-0.27 s a step): the step "
        "waits on the host (kernel launches, the loop's per-step synchronisations). The operator model (issue 26) "
        "takes the larger of GPU time and the host time `probe --compute` measures per decoder layer; the shipped "
        "table has host rows only once measured on the H200 (generator/compute/h200.json), and LoRA, which launches "
        "the most kernels, misses the most. Rows of 8,192 tokens and more are within 10%. (2) QLoRA at seq 4096 "
        "(about -12%): qlora_dequant_bytes_per_param is fitted minimax on the two QLoRA fit rows, which pull +-10% "
        "apart (seq 4096 and seq 16384). (3) TRL's Trainer, LoRA without checkpointing (about +11%): its loss and "
        "collator are not Liger's and not train.py's; the LoRA adapter bytes are fitted on train.py rows."
    ),
}


@dataclass(frozen=True)
class Result:
    name: str
    rows: int
    """Rows (or workloads) the target was assessed on."""
    result: str
    """met | missed | not assessed."""
    worst: str
    misses: tuple[str, ...]


def _check(name: str, items: list[tuple[str, float | None]], tol: float) -> Result:
    scored = [(label, err) for label, err in items if err is not None]
    if not scored:
        return Result(name, 0, "not assessed", "-", ())
    label, err = max(scored, key=lambda it: (abs(it[1]), it[0]))
    misses = tuple(f"{lab} ({e:+.1f}%)" for lab, e in scored if abs(e) > tol)
    return Result(name, len(scored), "missed" if misses else "met", f"{err:+.1f}% ({label})", misses)


def judge(mem: list, tput: list, recs: list) -> list[Result]:
    """mem: (row, estimate, alloc error %, reserved error %); tput: (row, estimate, error %); recs: Verdicts."""
    # A pick that ran out of memory or failed is as bad as it gets; one not measured (or not made: the reference
    # topology lacks that many GPUs) cannot be judged.
    worst = {"oom": 100.0, "error": 100.0}
    regrets = [
        (v.group, v.regret_pct if v.status == "ok" else worst[v.status])
        for v in recs
        if v.fastest_tps and v.status in ("ok", *worst)
    ]
    return [
        _check(TARGETS[0], [(r.label, ea) for r, _, ea, _ in mem], ALLOC_TOL),
        _check(TARGETS[1], [(r.label, er) for r, _, _, er in mem], RESERVED_TOL),
        _check(TARGETS[2], [(r.label, et) for r, _, et in tput], TPS_TOL),
        _check(TARGETS[3], regrets, REGRET_TOL),
    ]


def judge_validation(mem: list, tput: list) -> list[Result]:
    """The held-out rows' targets (issues 17 and 18): allocated 5%, reserved 10%, tokens/s 10%."""
    names = (TARGETS[0], TARGETS[1], f"tokens/s within {VALIDATION_TPS_TOL:.0f}%")
    return [
        _check(names[0], [(r.label, ea) for r, _, ea, _ in mem], ALLOC_TOL),
        _check(names[1], [(r.label, er) for r, _, _, er in mem], RESERVED_TOL),
        _check(names[2], [(r.label, et) for r, _, et in tput], VALIDATION_TPS_TOL),
    ]


def explain(t: Result, why_missed: dict[str, str] = WHY_MISSED) -> list[str]:
    why = why_missed.get(t.name, "Not explained yet: compare the breakdown of these rows with the measurement.")
    return [f"- **{t.name}: missed** on {'; '.join(t.misses)}. {why}"]
