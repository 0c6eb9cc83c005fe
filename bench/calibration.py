"""Measured rows from bench/results/*.json beside what the current estimator predicts for the same settings.

Four kinds of results file are understood, told apart by their keys:
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
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from bench.harness import bench_model_config
from bench.holdout import OTHER_CODE, TRL_CLI_FIT_KEYS, VALIDATION_KEYS
from bench.run_matrix import BENCH_DOC_TOKENS
from bench.wires import NVLINK, WIRE_VALIDATION_KEYS, busbw_by_wire, wire_of
from generator.catalog.gpus import find_gpu
from generator.estimate import Estimate, Placement, Workload, estimate
from generator.estimate.compute_source import table_for
from generator.estimate.host_time import host_ratio, host_tables, model_host_tables, rescaled
from generator.estimate.scripts import ALL_LINEAR, parse_lora_targets
from generator.estimate.states import named_targets
from generator.model import ModelSpec, load_model, spec_from_any_config
from generator.model.presets import preset_config

RESULTS_DIR = Path(__file__).resolve().parent / "results"
GPU_NAME = "NVIDIA H200"


def card_memory_gb(gpu: str) -> float:
    """What NVML reports for the card, as the planner's Placement carries it: the catalog's captured total, else its
    memory in GiB written in decimal GB (NVML counts the binary units)."""
    part = find_gpu(gpu)
    if part is None:
        raise ValueError(f"{gpu}: not in the GPU catalog (generator/catalog/gpus.py)")
    return part.reported_memory_gb or part.memory_gb * 2**30 / 1e9


GPU_MEMORY_GB = card_memory_gb(GPU_NAME)
"""What NVML reports for the measured H200 (the catalog's captured total)."""
MODEL = "mistral-7b"


def bench_attention(flex: bool) -> dict:
    """Workload / PlanRequest attention fields of a matrix cell: the bench data is packed (its mean document length)
    under either kernel, so SDPA gets a dense mask."""
    return {"attention": "flex" if flex else "sdpa", "doc_tokens": BENCH_DOC_TOKENS}


SCRIPT_LOAD_DTYPE = {"train.py": "fp32", "custom": "bf16", "trainer": "fp32"}
"""What each bench script loads in when --load-dtype is not given (its library's default, docs/scripts.md)."""


@dataclass(frozen=True)
class Row:
    """One measured configuration."""

    source: str
    """Results file name."""
    machine: str
    strategy: str
    method: str
    gpus: int
    seq_len: int
    micro_batch: int
    ckpt: bool
    load_dtype: str
    liger: bool = False
    grad_accum: int = 1
    status: str = "ok"
    """ok | oom | error (matrix cells); other files hold only runs that finished."""
    alloc_gb: float | None = None
    """Measured peak torch.cuda.max_memory_allocated, worst rank, decimal GB."""
    reserved_gb: float | None = None
    """Measured peak torch.cuda.max_memory_reserved, worst rank."""
    tps: float | None = None
    """Measured tokens/s per GPU."""
    from_matrix: bool = False
    """Written by bench/run_matrix.py (every strategy under one harness, so they can be ranked)."""
    compiled: bool = False
    """Run under Accelerate's dynamo config (matrix rows): a lever the estimator does not model."""
    compiled_layers: bool = False
    """train.py --compile-layers (sweep rows): each decoder layer compiled, modelled (Workload.compiled_layers)."""
    precision: str = "bf16"
    """bf16 | fp8 (train.py --precision fp8, sweep rows)."""
    flex: bool = False
    """Attention through transformers' flex_attention instead of SDPA."""
    bucket_view: bool = True
    """DDP gradient_as_bucket_view: on in train.py (matrix rows), off under plain Accelerate (memory-phase rows)."""
    script: str = "train.py"
    """What ran the row: train.py, custom (a plain Accelerate loop) or trainer (TRL SFTTrainer)."""
    doc_tokens: int | None = None
    """Tokens per packed document (sweep rows); matrix rows use the bench data's mean."""
    key: str = ""
    """The harness's cell key (sweep rows), which a later file's `supersedes` refers to."""
    wire: str = NVLINK
    """What joined the GPUs (bench/wires.py): nvlink, p2poff (host path) or sockets."""
    role: str = "fit"
    """fit (the estimator's terms may be fitted to it), validation (held out: VALIDATION_KEYS) or superseded (a later
    file of the same harness measured the same cell again after a fix: shown, unscored)."""
    lora_targets: tuple[str, ...] = ALL_LINEAR
    """LoRA's adapted projections (every bench script adapts all of them; TRL's CLI rows say which)."""
    lora_dropout: float = 0.0
    """LoRA dropout (TRL's CLI default 0.05; the other bench scripts 0)."""
    lora_by_name: bool = False
    """train.py ran without --lora-targets: its default adapts the llama names the model has (q/k/v/o_proj alone on
    StarCoder2, training/model.linear_targets), not the model's every Linear that the plan's `all-linear` asks for."""
    model: str = MODEL
    """The generator preset or bench model (bench/models) that ran (sweep rows name theirs; every earlier row is
    Mistral-7B)."""
    layers: int | None = None
    """The preset cut to its first N decoder layers (bench/families.py); None: the whole model."""
    transformers: str | None = None
    """The transformers version the row ran under (a results file's `versions`; None where the file names none)."""
    ran_predicted: tuple = field(default=(), compare=False)
    """(allocated GB, tokens/s) the estimator predicted when the cell ran, under its versions (sweep rows); shown
    beside a row whose model's code the installed transformers changed (bench/holdout.OTHER_CODE)."""
    host: tuple = field(default=(), compare=False)  # dicts: no part of the row's identity or hash
    """`probe --compute` host rows measured on the row's own machine in the same device call (a results file's
    `host`): the row is priced with them instead of the shipped table's, as a user who probes their machine is."""

    @cached_property
    def config(self) -> dict | None:
        """The config the row's model is sized from: the bench model's or the preset's, its layer count cut as the
        run's config was; None for a whole preset (load_model's)."""
        bench_model = bench_model_config(self.model)
        if self.layers is None and bench_model is None:
            return None
        config = bench_model or preset_config(self.model)
        return {**config, "num_hidden_layers": self.layers or config["num_hidden_layers"]}

    @cached_property
    def spec(self) -> ModelSpec:
        """The model the row's prediction is for (read once: the workload's LoRA targets and the prediction both
        ask)."""
        return load_model(self.model) if self.config is None else spec_from_any_config(self.config, self.model)

    @property
    def unmodelled(self) -> bool:
        """A lever the estimator does not model and the generator does not emit (torch.compile): the row is shown
        but kept out of the targets and the ranking."""
        return self.compiled

    @property
    def label(self) -> str:
        extra = (f" {self.method}" if self.method != "full" else "") + (" liger" if self.liger else "")
        extra += (" compile" if self.compiled else "") + (" layers-compiled" if self.compiled_layers else "")
        extra += " flex" if self.flex else ""
        extra += " fp8" if self.precision == "fp8" else ""
        extra += f" {self.wire}" if self.wire != NVLINK else ""
        if self.model != MODEL:
            extra = f" {self.model}" + (f"-l{self.layers}" if self.layers else "") + extra
        if self.doc_tokens is not None:
            extra += " fill" if self.doc_tokens >= self.seq_len else f" docs{self.doc_tokens}"
        ckpt = "ckpt" if self.ckpt else "no-ckpt"
        mb = f"mb{self.micro_batch}" + (f"x{self.grad_accum}" if self.grad_accum > 1 else "")
        script = "" if self.script == "train.py" else f"{self.script}: "
        return f"{script}{self.gpus}x {self.strategy}{extra} {self.load_dtype} s{self.seq_len} {mb} {ckpt}"

    @property
    def workload(self) -> Workload:
        return Workload(
            method=self.method,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            grad_accum=self.grad_accum,
            grad_checkpointing=self.ckpt,
            load_dtype=self.load_dtype,
            liger=self.liger,
            grad_as_bucket_view=self.bucket_view,
            script=self.script,
            precision=self.precision,
            compiled_layers=self.compiled_layers,
            lora_targets=named_targets(self.spec, self.lora_targets) if self.lora_by_name else self.lora_targets,
            lora_dropout=self.lora_dropout,
            **(self._attention() if self.doc_tokens is not None else bench_attention(self.flex)),
        )

    def _attention(self) -> dict:
        return {"attention": "flex" if self.flex else "sdpa", "doc_tokens": self.doc_tokens}


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


def measured_busbw(files: dict[str, dict], wire: str = NVLINK) -> dict[int, float]:
    """GPU count -> best measured all-reduce busbw (GB/s, largest message) of that wire's probes (bench/wires.py)."""
    return busbw_by_wire(files)[wire]


def placement(gpus: int, busbw: dict[int, float], row: Row | None = None, table=None, gpu: str = GPU_NAME) -> Placement:
    """What the planner hands the estimator for `gpus` of the measured machine's `gpu` (one GPU: no bus, busbw 0):
    `table` (the shipped one, scaled to `gpu` by the catalog, when None) with the row's own machine's host rows where
    its file has them."""
    if row is not None and row.host:
        base = table if table is not None else table_for(gpu)
        host, host_step = host_tables(list(row.host))
        if not host:  # only a model's own rows (qlora_host.py): the Mistral rows stay the table's
            host, host_step = base.host, base.host_step
        own = model_host_tables(list(row.host)) or rescaled(base.host_models, host_ratio(host, base.host) or 1.0)
        table = replace(base, host=host, host_step=host_step, host_models=own,
                        source=f"{base.source} + host rows of {row.source}")  # fmt: skip
    return Placement(
        num_gpus_per_machine=gpus,
        gpu_name=gpu,
        gpu_memory_gb=card_memory_gb(gpu),
        busbw_gbps=busbw.get(gpus, 0.0) if gpus > 1 else 0.0,
        compute=table,
    )


def predict(row: Row, busbw: dict[int, float], wires: dict[str, dict[int, float]] | None = None) -> Estimate:
    """The estimator for the row's settings; `busbw` is NVLink's, a slow-wire row takes its own from `wires`
    (busbw_by_wire) and is refused without it rather than predicted at NVLink's bandwidth."""
    if row.wire != NVLINK and row.gpus > 1:
        if not wires or row.gpus not in wires.get(row.wire, {}):
            raise ValueError(f"{row.label}: no {row.wire} probe in bench/results/ (bench/wires.py probe makes one)")
        busbw = wires[row.wire]
    return estimate(row.spec, row.workload, placement(row.gpus, busbw, row), row.strategy)


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured
