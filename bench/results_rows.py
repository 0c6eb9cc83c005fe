"""Measured rows read from bench/results/*.json, in the estimator's terms (bench/row.py; bench/calibration.py prices
them).

The results files understood, told apart by their keys:
- matrix (`cells`): written by bench/run_matrix.py, one cell per (GPUs, strategy, method, seq, micro-batch, ckpt);
- sweep (`cells` whose entries name a `script`): written by bench/sweep.py, sequence length x attention kernel x
  document length x method on one GPU, and the scripts people launch (train.py, custom, trainer) on one or two;
- memory phases (`rows` with `forward_gb`): tests/test_estimate_gpu.py measurements;
- step times (`rows` with `step_s`, or the topo README file's `step_times`);
- probe (`subsets`): `python -m generator probe` bandwidth, which also supplies the busbw the predictions use;
- trial (`measurements`): `plan --trial` calibration records (reserved memory and tokens/s; no allocated peak).
"""

from __future__ import annotations

import importlib.metadata
import json
import shlex
from dataclasses import replace
from pathlib import Path

from bench.holdout import OTHER_CODE, TRL_CLI_FIT_KEYS, VALIDATION_KEYS
from bench.row import GPU_NAME, MODEL, SCRIPT_LOAD_DTYPE, Row
from bench.wires import WIRE_VALIDATION_KEYS, wire_of
from generator.estimate.scripts import ALL_LINEAR, parse_lora_targets

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def load_files(results_dir: Path = RESULTS_DIR) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))}


def _measured(c: dict, profiled: bool = False) -> dict:
    """Row fields of a cell's measurement: peaks and tokens/s of a cell that ran, none of one that did not; no
    tokens/s from a file run under the profiler (`profiled`, bench/sweep.py under BENCH_PROFILE), which slows it."""
    if c.get("status") != "ok":
        return {}
    m = c.get("measured") or {}
    tps = None if profiled else m.get("tokens_per_s_per_gpu")
    return dict(alloc_gb=m.get("peak_allocated_gb"), reserved_gb=m.get("peak_reserved_gb"), tps=tps)


def _cell_fields(name: str, data: dict, c: dict) -> dict:
    """Row fields every harness cell states the same way (run_matrix.py and sweep.py): where, what, and the result."""
    return dict(
        source=name,
        machine=data.get("machine", name),
        strategy=c["strategy"],
        method=c["method"],
        seq_len=c["seq_len"],
        micro_batch=c["micro_batch"],
        ckpt=c["ckpt"],
        status=c.get("status", "error"),
        **_measured(c, bool(data.get("profiled"))),
    )


def _matrix_rows(name: str, data: dict) -> list[Row]:
    rows = []
    for key in sorted(data["cells"]):
        c = data["cells"][key]
        cmd = shlex.split(c.get("command", ""))
        load = cmd[cmd.index("--load-dtype") + 1] if "--load-dtype" in cmd else "fp32"  # train.py's default
        rows.append(
            Row(
                **_cell_fields(name, data, c),
                gpus=c["gpus"],
                load_dtype=load,
                liger="--liger" in cmd,
                grad_accum=(c.get("config") or {}).get("gradient_accumulation_steps", 1),
                from_matrix=True,
                compiled="--dynamo_backend" in cmd,
                flex="flex_attention" in cmd,
                wire=wire_of(c),
                key=key,
                role="validation" if key in WIRE_VALIDATION_KEYS else "fit",
            )
        )
    return rows


def _sweep_rows(name: str, data: dict) -> list[Row]:
    rows = []
    for key in sorted(data["cells"]):
        c = data["cells"][key]
        cmd = shlex.split(c.get("command", ""))
        default = SCRIPT_LOAD_DTYPE[c["script"]]
        rows.append(
            Row(
                **_cell_fields(name, data, c),
                gpus=c.get("gpus", 1),  # files before issue 21's two-GPU cells ran one GPU and name no count
                load_dtype=c.get("load_dtype")
                or (cmd[cmd.index("--load-dtype") + 1] if "--load-dtype" in cmd else default),
                liger=c["liger"],
                flex=c["attention"] == "flex",
                bucket_view=c["script"] == "train.py",
                script=c["script"],
                doc_tokens=c["doc_tokens"],
                role="fit" if key in TRL_CLI_FIT_KEYS else _sweep_role(key, c["script"]),
                key=key,
                precision=c.get("precision", "bf16"),
                compiled_layers=c.get("compiled", False),
                # TRL's CLI rows (bench/trl_cli.py) state their adapters; the other scripts adapt every projection
                lora_targets=_targets(c.get("lora_targets")),
                lora_dropout=c.get("lora_dropout", 0.0),
                lora_by_name=c["script"] == "train.py" and c["method"] != "full" and "--lora-targets" not in cmd,
                model=c.get("model", MODEL),
                layers=c.get("layers"),
                host=tuple(data.get("host") or ()),
                transformers=(data.get("versions") or {}).get("transformers"),
                ran_predicted=_ran_predicted(c.get("predicted") or {}),
            )
        )
    return rows


def _ran_predicted(p: dict) -> tuple:
    return (p.get("peak_gb"), p.get("tokens_per_s_per_gpu")) if p else ()


def installed_transformers() -> str:
    return importlib.metadata.version("transformers")


def other_code(row: Row, installed: str) -> bool:
    """Whether the row's model ran other code than the installed transformers holds for it (holdout.OTHER_CODE)."""
    versions, _ = OTHER_CODE.get(row.model, (frozenset(), ""))
    return row.transformers in versions and installed not in versions


def _targets(stated) -> tuple[str, ...]:
    """A cell's adapters: TRL's CLI rows list theirs, a train.py cell may state its --lora-targets text
    (sweep_cell.Cell), the rest adapt every projection."""
    if stated is None:
        return ALL_LINEAR
    return parse_lora_targets(stated) if isinstance(stated, str) else tuple(stated)


def _sweep_role(key: str, script: str) -> str:
    return "validation" if key in VALIDATION_KEYS or script != "train.py" else "fit"


def _plain_row(name: str, machine: str, r: dict, **measured) -> Row:
    return Row(
        source=name,
        machine=r.get("machine", machine),
        strategy=r["strategy"],
        method=r.get("method", "full"),
        gpus=r["gpus"],
        seq_len=r["seq_len"],
        micro_batch=r["micro_batch"],
        ckpt=r["ckpt"],
        load_dtype=r["load_dtype"],
        liger=r.get("liger", False),
        **measured,
    )


def _step_rows(name: str, machine: str, rows: list[dict]) -> list[Row]:
    # Only the time: where these files also quote a peak, it is the same run as a memory-phases row.
    return [_plain_row(name, machine, r, tps=r["seq_len"] * r["micro_batch"] / r["step_s"]) for r in rows]


def _trial_rows(name: str, data: dict) -> list[Row]:
    # train.py's defaults under plan --trial: fp32 load, no Liger, DDP bucket view on.
    return [
        Row(
            source=name,
            machine=str(r.get("machine", name)),
            strategy=r["strategy"],
            method=r["method"],
            gpus=r["num_processes"],
            seq_len=r["seq_len"],
            micro_batch=r["micro_batch"],
            ckpt=r["grad_checkpointing"],
            load_dtype="fp32",
            grad_accum=r["grad_accum"],
            reserved_gb=r.get("measured_peak_reserved_gb"),
            tps=r.get("measured_tokens_per_s_per_gpu"),
        )
        for r in data["measurements"]
        if r.get("device") == "cuda" and r.get("status") == "ok"
    ]


def _superseded(files: dict[str, dict]) -> set[tuple[str, str]]:
    """(file, cell key) pairs a later sweep file measured again: its `supersedes` names the earlier file, or a list
    of them where the fix made every earlier run of its cells stale (train.py's code path changed under them)."""
    pairs = set()
    for d in files.values():
        earlier = d.get("supersedes") or []
        for name in [earlier] if isinstance(earlier, str) else earlier:
            pairs |= {(name, key) for key in d["cells"]}
    return pairs


def sweep_file(data: dict) -> bool:
    """Whether a results file is bench/sweep.py's: cells that each name the script they ran."""
    cells = data.get("cells")
    return bool(cells) and all("script" in c for c in cells.values())


def measured_on_h200(data: dict) -> bool:
    """Whether a results file's rows are the GPU every row is priced as (GPU_NAME): a file whose versions name
    another GPU (a call for an H200 can land on an H100) is left out, not priced as an H200's."""
    gpu = (data.get("versions") or {}).get("gpu")
    return gpu is None or gpu == GPU_NAME


def load_rows(files: dict[str, dict]) -> list[Row]:
    rows: list[Row] = []
    superseded, installed = _superseded(files), installed_transformers()
    for name, data in files.items():
        machine = str(data.get("machine", name)).split(":")[0]
        if not measured_on_h200(data):
            continue
        if sweep_file(data):
            for r in _sweep_rows(name, data):
                if (name, r.key) in superseded:
                    r = replace(r, role="superseded")
                elif other_code(r, installed):
                    r = replace(r, role="other-code")
                rows.append(r)
        elif "cells" in data:
            rows += _matrix_rows(name, data)
        elif "measurements" in data:
            rows += _trial_rows(name, data)
        elif "step_times" in data:
            rows += _step_rows(name, machine, data["step_times"]["rows"])
        elif isinstance(data.get("rows"), list) and data["rows"] and "forward_gb" in data["rows"][0]:
            for r in data["rows"]:
                peak = max(r["forward_gb"], r["backward_gb"])
                # tests/test_estimate_gpu.py prepares with plain Accelerate: DDP's gradient_as_bucket_view is off.
                rows.append(
                    _plain_row(name, machine, r, alloc_gb=peak, reserved_gb=r["reserved_gb"], bucket_view=False)
                )
        elif isinstance(data.get("rows"), list) and data["rows"] and "step_s" in data["rows"][0]:
            rows += _step_rows(name, machine, data["rows"])
    return rows
