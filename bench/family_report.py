"""REPORT.md's section on the families beyond Mistral (issue 26, item 6): the mean absolute error per metric of their
held-out rows beside the Mistral validation rows' (the anchors), and each plan pick against its runner-up.

Shown only once a results file holds family rows (bench/families.py); until then REPORT.md has no such section.
"""

from __future__ import annotations

from bench.families import PICK_PAIRS
from bench.harness import bench_model_config
from bench.targets import ALLOC_TOL, REGRET_TOL, RESERVED_TOL, VALIDATION_TPS_TOL
from generator.plan.policy import TIE_TOLERANCE

ANCHOR_MODEL = "mistral-7b"


def mean_abs(errors: list[float | None]) -> tuple[float | None, int]:
    """(mean absolute error in %, rows scored) over the errors that exist."""
    got = [abs(e) for e in errors if e is not None]
    return (sum(got) / len(got), len(got)) if got else (None, 0)


def _cell(stat: tuple[float | None, int]) -> str:
    value, n = stat
    return "-" if value is None else f"{value:.1f}% ({n} rows)"


def mae_rows(held_mem: list, held_tput: list) -> list[list[str]]:
    """One row per metric: its target, the families' MAE, the anchors' MAE."""
    out = []
    for name, tol, mem_index in (("allocated", ALLOC_TOL, 2), ("reserved", RESERVED_TOL, 3)):
        fam = mean_abs([m[mem_index] for m in held_mem if m[0].model != ANCHOR_MODEL])
        anchor = mean_abs([m[mem_index] for m in held_mem if m[0].model == ANCHOR_MODEL])
        out.append([name, f"{tol:.0f}%", _cell(fam), _cell(anchor)])
    fam = mean_abs([t[2] for t in held_tput if t[0].model != ANCHOR_MODEL])
    anchor = mean_abs([t[2] for t in held_tput if t[0].model == ANCHOR_MODEL])
    out.append(["tokens/s", f"{VALIDATION_TPS_TOL:.0f}%", _cell(fam), _cell(anchor)])
    # what sets the pace, by the estimator's own verdict: a host-bound step's speed is its machine's CPU's
    for bound, name in ((False, "GPU-bound steps"), (True, "host-bound steps")):
        fam = mean_abs([t[2] for t in held_tput if t[0].model != ANCHOR_MODEL and t[1].host_bound == bound])
        anchor = mean_abs([t[2] for t in held_tput if t[0].model == ANCHOR_MODEL and t[1].host_bound == bound])
        out.append([f"tokens/s, {name}", f"{VALIDATION_TPS_TOL:.0f}%", _cell(fam), _cell(anchor)])
    return out


def _model_name(row) -> str:
    kind = " (no preset: bench/models)" if bench_model_config(row.model) is not None else ""
    return f"{row.model}" + (f" cut to {row.layers} layers" if row.layers else "") + kind


def model_rows(held_mem: list, held_tput: list) -> list[list[str]]:
    """One row per model (a cut model apart from the whole one), anchors included: each metric's mean absolute error
    and the worst tokens/s row, so a family that misses is not hidden in the pooled mean."""
    by_name: dict[str, tuple[list, list]] = {}
    for m in held_mem:
        by_name.setdefault(_model_name(m[0]), ([], []))[0].append(m)
    for t in held_tput:
        by_name.setdefault(_model_name(t[0]), ([], []))[1].append(t)
    out = []
    for name in sorted(by_name, key=lambda n: (n.split(" ")[0] != ANCHOR_MODEL, n)):
        mem, tput = by_name[name]
        worst = max(tput, key=lambda t: abs(t[2]), default=None)
        out.append([
            name,
            _cell(mean_abs([m[2] for m in mem])),
            _cell(mean_abs([m[3] for m in mem])),
            _cell(mean_abs([t[2] for t in tput if not t[1].host_bound])),
            _cell(mean_abs([t[2] for t in tput if t[1].host_bound])),
            "-" if worst is None else f"{worst[2]:+.1f}% ({worst[0].label})",
        ])  # fmt: skip
    return out


def pick_rows(held_tput: list) -> list[list[str]]:
    """Each (pick, runner-up) pair measured: which the planner now takes (the pick, which carries the extra lever,
    only where predicted faster beyond its tie, policy.TIE_TOLERANCE), and what that choice cost against the faster
    measured one (the target: no more than REGRET_TOL). Where a file measured both, its two rows are compared (one
    machine); else the last row of each."""
    rows: dict[str, list] = {}
    for r, e, _ in held_tput:
        rows.setdefault(r.key, []).append((r, e))
    out = []
    for pick, runner_up in PICK_PAIRS:
        if pick.key not in rows or runner_up.key not in rows:
            continue
        together = [(a, b) for a in rows[pick.key] for b in rows[runner_up.key] if a[0].source == b[0].source]
        (a, ea), (b, eb) = together[-1] if together else (rows[pick.key][-1], rows[runner_up.key][-1])
        taken = ea.tokens_per_s_per_gpu > (1 + TIE_TOLERANCE) * eb.tokens_per_s_per_gpu
        chosen, other = (a, b) if taken else (b, a)
        loss = 100.0 * (1 - chosen.tps / max(chosen.tps, other.tps))
        verdict = "met" if loss <= REGRET_TOL else "missed"
        out.append([a.label, f"{a.tps:.0f}", b.label, f"{b.tps:.0f}", chosen.label, f"{loss:.1f}% ({verdict})"])
    return out


def section(held_mem: list, held_tput: list, table) -> list[str]:
    """The markdown lines (none without family rows); `table` is report.py's table writer."""
    if not any(m[0].model != ANCHOR_MODEL for m in held_mem) and not any(t[0].model != ANCHOR_MODEL for t in held_tput):
        return []
    md = ["", "## Families beyond Mistral (held out)", ""]
    md += table(
        ["metric", "target", "families: mean abs error", "Mistral validation rows"], mae_rows(held_mem, held_tput)
    )
    md += ["", "By model (validation rows only; the Mistral-7B row is the anchors'):", ""]
    md += table(
        ["model", "allocated", "reserved", "tokens/s, GPU-bound", "tokens/s, host-bound", "worst tokens/s row"],
        model_rows(held_mem, held_tput),
    )
    pairs = pick_rows(held_tput)
    if pairs:
        md += ["", f"The estimator's pick of each pair (bench/families.py PICK_PAIRS) against the faster measured one "
               f"(target: it loses at most {REGRET_TOL:.0f}%):", ""]  # fmt: skip
        md += table(["pick", "tokens/s", "runner-up", "tokens/s", "estimator picks", "its loss"], pairs)
    return md
