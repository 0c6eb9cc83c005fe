"""The calibration targets of issue 6 and whether the current estimator meets them on the committed results."""

from __future__ import annotations

from dataclasses import dataclass

ALLOC_TOL, RESERVED_TOL, TPS_TOL, REGRET_TOL = 5.0, 10.0, 15.0, 3.0
"""Percent: peak allocated, peak reserved, tokens/s per GPU, recommendation regret."""
TARGETS = (
    f"peak allocated within {ALLOC_TOL:.0f}%",
    f"peak reserved within {RESERVED_TOL:.0f}%",
    f"tokens/s within {TPS_TOL:.0f}%",
    f"recommendation within {REGRET_TOL:.0f}% of the fastest that fits",
)
# What the model is missing, per target, when it is missed. Written by whoever reads the misses; keep it honest.
WHY_MISSED: dict[str, str] = {}


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


def explain(t: Result) -> list[str]:
    why = WHY_MISSED.get(t.name, "Not explained yet: compare the breakdown of these rows with the measurement.")
    return [f"- **{t.name}: missed** on {'; '.join(t.misses)}. {why}"]
