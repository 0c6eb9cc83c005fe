"""Runs the matrix's cells under a wall-time budget; 1-GPU cells run side by side, one per GPU ("lanes")."""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from pathlib import Path

from bench.harness import save


class Runner:
    """Runs cells under a wall-time budget; 1-GPU cells run side by side, one per GPU ("lanes")."""

    def __init__(self, args, results: dict, paths: list[Path], n_gpus: int, start: float, run_cell, report_line):
        """run_cell(cell, steps, workdir, extra_plan, extra_train, lane, n_gpus) -> row; report_line(row) -> str."""
        self.args, self.results, self.paths, self.n, self.start = args, results, paths, n_gpus, start
        self.run_cell, self.report_line = run_cell, report_line
        self.lock = threading.Lock()
        self.durations = [c["wall_s"] for c in results["cells"].values() if "wall_s" in c]

    def fits_budget(self) -> bool:
        expect = max(self.durations) if self.durations else self.args.cell_estimate_s
        return time.time() - self.start + expect <= self.args.budget_s

    def one(self, cell: dict, lane: int | None) -> None:
        print(f"running {cell['key']}" + (f" on GPU {lane}" if lane is not None else "") + " ...", flush=True)
        a = self.args
        try:
            row = self.run_cell(
                cell, a.steps, a.workdir, shlex.split(a.extra_plan), shlex.split(a.extra_train), lane, self.n
            )
        except (RuntimeError, subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
            row = dict(cell, status="error", tail=str(exc)[-800:])
        with self.lock:
            self.results["cells"][cell["key"]] = row
            if "wall_s" in row:
                self.durations.append(row["wall_s"])
            save(self.results, *self.paths)
            print(f"{cell['key']}:\n{self.report_line(row)}", flush=True)

    def lanes(self, cells: list[dict]) -> bool:
        queue = list(cells)

        def worker(lane: int) -> None:
            while True:
                with self.lock:
                    if not queue or not self.fits_budget():
                        return
                    cell = queue.pop(0)
                self.one(cell, lane)

        threads = [threading.Thread(target=worker, args=(lane,)) for lane in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return not queue

    def run(self, cells: list[dict]) -> None:
        todo = [c for c in cells if self.results["cells"].get(c["key"], {}).get("status") not in DONE]
        while todo:
            if not self.fits_budget():
                print(f"budget: stopping before {todo[0]['key']} (resume by running again)", flush=True)
                return
            if todo[0]["gpus"] == 1 and self.n > 1:  # a run of 1-GPU cells: one per GPU at a time
                batch = []
                while todo and todo[0]["gpus"] == 1:
                    batch.append(todo.pop(0))
                if not self.lanes(batch):
                    print("budget: stopping inside the 1-GPU cells (resume by running again)", flush=True)
                    return
            else:
                self.one(todo.pop(0), None)


DONE = ("ok", "oom", "skipped")
"""Cell states not run again when the matrix resumes."""
