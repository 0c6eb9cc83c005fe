"""bench/fp8_curves.py (issue 20): the fp8-vs-bf16 loss criteria on made-up curves, and the verdicts the committed
200-step cells give, so a changed results file or a changed criterion shows up here."""

from __future__ import annotations

import json
import math
import random

import pytest

from bench import fp8_curves
from bench.fp8_curves import RESULTS, compare, comparisons, moving_average, window


def _bf16_curve(seed: int = 0, steps: int = 200) -> list[float]:
    """A slowly decaying loss with per-step noise of standard deviation 0.1 (made up, not measured)."""
    rng = random.Random(seed)
    return [2.0 + 0.5 * math.exp(-i / 100) + rng.gauss(0.0, 0.1) for i in range(steps)]


def test_moving_average_is_trailing_and_shorter_at_the_start():
    assert moving_average([1.0, 3.0, 5.0, 7.0], n=2) == [1.0, 2.0, 4.0, 6.0]
    assert moving_average([4.0, 2.0], n=20) == [4.0, 3.0]


def test_a_curve_inside_the_reference_noise_passes_and_one_shifted_beyond_it_fails():
    bf16 = _bf16_curve()
    other_order = _bf16_curve(seed=1)  # the same curve, other draws of the noise: another data order
    shifted = [x + 0.3 for x in bf16]  # three times the noise, every step
    for first, last in fp8_curves.WINDOWS:
        w = window(bf16, other_order, first, last)
        assert w.ok, (first, w)
        assert 0.05 < w.noise < 0.15  # the made-up curve's 0.1 nats of step-to-step scatter
        bad = window(bf16, shifted, first, last)
        assert not bad.ok and bad.gap == pytest.approx(0.3)
        assert not window(bf16, [x - 0.3 for x in bf16], first, last).ok  # lower by as much fails too


def test_the_tolerance_comes_from_the_bf16_run_only():
    bf16, noisy_fp8 = _bf16_curve(), [x + random.Random(2).gauss(0, 1.0) for x in _bf16_curve()]
    assert window(bf16, noisy_fp8, 121, 200).noise == window(bf16, bf16, 121, 200).noise


@pytest.mark.parametrize(("fp8_first", "ok"), [(10.09, True), (9.91, True), (10.11, False), (9.89, False)])
def test_step_one_is_judged_on_its_own_within_one_percent(fp8_first, ok):
    bf16 = [10.0] + [1.0] * 199
    fp8 = [fp8_first] + [1.0] * 199
    c = compare("full", "b", "f", {"losses": bf16}, {"losses": fp8})
    assert c.step1_ok is ok and all(w.ok for w in c.windows)


def test_grad_norm_ratio_range_per_window():
    losses = [1.0] * 200
    c = compare(
        "lora", "b", "f", {"losses": losses, "grad_norms": [1.0] * 200}, {"losses": losses, "grad_norms": [2.0] * 200}
    )
    assert [w.grad_ratio for w in c.windows] == [(2.0, 2.0)] * 3
    assert compare("lora", "b", "f", {"losses": losses}, {"losses": losses}).windows[0].grad_ratio is None


def test_too_short_a_run_is_refused():
    with pytest.raises(ValueError, match="the windows need 200"):
        compare("full", "b", "f", {"losses": [1.0] * 199}, {"losses": [1.0] * 200})


def test_committed_cells_give_the_reported_verdicts():
    comps = {c.method: c for c in comparisons(json.loads(RESULTS.read_text()))}
    assert set(comps) == {"full", "lora"}
    full, lora = comps["full"], comps["lora"]
    assert full.fp8_key == "train.py-g1-ddp-full-s2048-mb1-ckptoff-flex-short-liger-fp8-n200"
    assert full.bf16_key == "train.py-g1-ddp-full-s2048-mb1-ckptoff-flex-short-liger-n200"
    assert full.step1 == pytest.approx(-0.0025, abs=5e-5) and lora.step1 == pytest.approx(-0.0001, abs=5e-5)
    assert [(w.first, w.last) for w in full.windows] == [(21, 60), (61, 120), (121, 200)]
    assert [w.ok for w in full.windows] == [False, True, True]  # fp8 falls faster early
    assert [w.ok for w in lora.windows] == [True, True, False]  # fp8 slower to memorise below 0.1 nats
    assert (round(full.windows[0].gap, 2), round(full.windows[0].noise, 2)) == (-0.77, 0.55)
    assert (round(lora.windows[2].gap, 3), round(lora.windows[2].noise, 3)) == (0.042, 0.022)
    assert lora.windows[2].gap > 0 and lora.reach == (124, 137)  # fp8's MA20 falls below 0.1 nats 13 steps later
    assert all(0.005 < x < 0.02 for c in (full, lora) for x in c.final_ma)  # both memorise the synthetic data


def test_cli_prints_the_table_and_json_and_one_line_on_a_bad_file(tmp_path, capsys):
    assert fp8_curves.main([]) == 0
    out = capsys.readouterr().out
    assert "| 21-60 | largest MA20 gap fp8 - bf16 vs bf16 noise | -0.773 (step " in out and "| 0.549 | FAIL |" in out
    assert fp8_curves.main(["--json"]) == 0
    assert [c["windows_ok"] for c in json.loads(capsys.readouterr().out)] == [[False, True, True], [True, True, False]]
    (tmp_path / "none.json").write_text(json.dumps({"cells": {}}))
    assert fp8_curves.main([str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no fp8 cell" in err


def test_report_section_comes_from_the_results_files_and_is_absent_without_them():
    from bench import report
    from bench.results_rows import load_files

    lines, panels = report.fp8_curves_section(load_files())
    text = "\n".join(lines)
    assert "## Float8 loss and gradient-norm curves" in text and "](report-fp8-curves.png)" in text
    assert "| lora | 121-200 | largest MA20 gap fp8 - bf16 vs bf16 noise | +0.042 (step 121) | 0.022 | FAIL |" in text
    assert [sorted(runs) for _, runs in panels] == [["bf16", "fp8"], ["bf16", "fp8"]]
    assert report.fp8_curves_section({"x.json": {"cells": {}}}) == ([], [])


def test_the_second_bf16_run_is_the_yardstick_for_the_fp8_gaps():
    """The committed seed-1 bf16 runs: full fp8's early gap is four times bf16's own drift there, LoRA's last-window gap
    one and a half times; in the memorisation tail even two bf16 runs part by about the tolerance."""
    yard = {f.method: (f, b) for f, b in fp8_curves.yardsticks(json.loads(RESULTS.read_text()))}
    assert set(yard) == {"full", "lora"}
    (f_full, b_full), (f_lora, b_lora) = yard["full"], yard["lora"]
    assert b_full.fp8_key.endswith("-seed1-n200") and b_full.bf16_key == f_full.bf16_key
    assert abs(f_full.windows[0].gap) > 4 * abs(b_full.windows[0].gap)
    assert 1.4 < abs(f_lora.windows[-1].gap) / abs(b_lora.windows[-1].gap) < 1.6
    assert not b_lora.windows[-1].ok  # bf16 against bf16 misses the same window fp8 misses
    head, rows = fp8_curves.yardstick_table(list(yard.values()))
    assert len(rows) == 2 * len(fp8_curves.WINDOWS) and len(head) == len(rows[0])


def test_no_yardstick_without_a_second_bf16_run():
    data = json.loads(RESULTS.read_text())
    data["cells"] = {k: c for k, c in data["cells"].items() if "-seed1" not in k}
    assert fp8_curves.yardsticks(data) == []
