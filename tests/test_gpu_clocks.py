"""The clock sampler the benches run beside every GPU timing (generator/probe/gpu_clocks.py): nvidia-smi's CSV parsed
whatever the driver calls its clock-event reasons, idle samples left out, and no nvidia-smi said in one field."""

from __future__ import annotations

import os
import stat
import time

from generator.probe import gpu_clocks
from generator.probe.gpu_clocks import ClockSampler, Sample, parse_line, summarise

FAKE = """#!/bin/sh
# answers a query that names {accepts} (or none of the reasons), then prints one line per loop
case "$*" in
  *clocks_event_reasons*) [ "{accepts}" = event ] || exit 6 ;;
  *clocks_throttle_reasons*) [ "{accepts}" = throttle ] || exit 6 ;;
esac
case "$*" in
  *--loop-ms*) ;;
  *) echo "0, 1980, 1980, 100.0, 700.0, 0, 30"; exit 0 ;;
esac
i=0
while true; do
  if [ $((i % 2)) -eq 0 ]; then util=100; clk=1755; pw=699.5; cap=Active
  else util=3; clk=345; pw=90; cap="Not Active"; fi
  case "$*" in
    *reasons*) echo "0, $clk, 1980, $pw, 700.00, $util, 61, $cap, Not Active, Not Active" ;;
    *) echo "0, $clk, 1980, $pw, 700.00, $util, 61" ;;
  esac
  i=$((i + 1))
  sleep 0.02
done
"""


def _fake_smi(tmp_path, monkeypatch, accepts: str) -> None:
    tmp_path.mkdir(exist_ok=True)
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE.replace("{accepts}", accepts))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_lines_that_are_not_samples_are_dropped():
    assert parse_line("index, clocks.sm [MHz], ...", with_reasons=False) is None
    assert parse_line("0, [N/A], 1980, 100, 700, 5, 40", with_reasons=False) is None
    s = parse_line("1, 1755, 1980, 699.5, 700.00, 100, 61, Active, Not Active, Not Active", with_reasons=True)
    assert (s.gpu, s.sm_mhz, s.power_w, s.util_pct, s.power_capped) == (1, 1755, 699.5, 100, True)
    assert parse_line("1, 1755, 1980, 699.5, 700.00, 100, 61", with_reasons=True) is None  # reasons asked, missing


def test_the_summary_is_over_busy_samples_in_the_window_only():
    mk = lambda t, util, mhz: Sample(t, 0, mhz, 1980, 500, 700, util, 60, power_capped=mhz < 1900)  # noqa: E731
    samples = [mk(0, 100, 1500), mk(1, 100, 1980), mk(2, 5, 345), mk(3, 100, 1980), mk(9, 100, 1200)]
    got = summarise(samples, start=0.5, end=5)
    assert (got["samples"], got["busy_samples"], got["sm_mhz"], got["power_capped_share"]) == (3, 2, 1980, 0.0)
    assert summarise(samples, start=2, end=2.5) == {"samples": 1, "busy_samples": 0}


def test_sampler_reads_a_driver_that_names_event_reasons(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, "event")
    with ClockSampler(interval_ms=20) as clocks:
        time.sleep(0.5)
    got = clocks.summary()
    assert got["busy_samples"] >= 2 and got["samples"] > got["busy_samples"]
    assert (got["sm_mhz"], got["power_capped_share"], got["power_limit_w"]) == (1755, 1.0, 700)


def test_sampler_falls_back_to_throttle_reasons_and_then_to_none(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, "throttle")
    with ClockSampler(interval_ms=20) as clocks:
        time.sleep(0.4)
    assert clocks.summary()["power_capped_share"] == 1.0
    _fake_smi(tmp_path / "older", monkeypatch, "none")  # another driver (the answered query is kept per executable)
    with ClockSampler(interval_ms=20) as clocks:
        time.sleep(0.4)
    got = clocks.summary()
    assert got["sm_mhz"] == 1755 and got["power_capped_share"] is None


def test_no_nvidia_smi_samples_nothing_and_says_so(monkeypatch):
    monkeypatch.setattr(gpu_clocks.shutil, "which", lambda name: None)
    with ClockSampler() as clocks:
        pass
    assert clocks.summary() == {"error": "nvidia-smi not found"}
