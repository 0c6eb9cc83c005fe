"""TRL's own SFT script (`trl.scripts.sft`, unchanged) run as `python -m generator plan --script trainer` prints it,
on one GPU, with a step log (bench/scripts/trainer_hook): the `trainer` script's measured rows.

Each cell: `plan --script trainer ... --json` writes the config and prints the launch line; the line runs as printed
except for what a user fills in (the model path: a bf16 random checkpoint of the architecture saved first, since the
hub is unreachable; the dataset directory; --max_steps; --output_dir) and two run-length flags (`--logging_steps 1`
for a record per step, `--save_strategy no`). TRL's script still saves the model once at the end (its own code).
Tokens per step are TRL's own count (num_tokens), so short packed bins are counted as they are.

    python bench/trl_cli.py --budget-s 400 --only 'trl-*'          # on the GPU machine, after bench/gpu_env.sh
    python bench/trl_cli.py --list

Cell keys: trl-g1-<strategy>-<method>-<qv|all>-s<seq>-<LEVERS>-<short|fill>[-liger]-<fp32|bf16|planned>, LEVERS
either mb<mb>-ckpt<on|off>-<sdpa|flex> or auto-gb<global batch> (the plan's picks); planned: the dtype the plan chose
("default" in files measured before it chose one).
Documents: `fill` one synthetic text per bin (each longer than the sequence: TRL's bfd packing truncates it to
--max_length, so every row is one full document); `short` the synthetic chat examples (~54 tokens) packed by TRL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import SAFE_ENV, model_dir, save, versions  # noqa: E402
from bench.sweep import select, summarise  # noqa: E402
from generator.estimate.scripts import ALL_LINEAR, LOAD_DTYPE_OF, QV, TRL_DTYPE, script_facts  # noqa: E402
from generator.trial.metrics import looks_oom  # noqa: E402

HOOK = REPO / "bench" / "scripts" / "trainer_hook"
FILLED = {"--model_name_or_path", "--dataset_name", "--max_steps", "--output_dir"}
"""The printed line's placeholders a user fills in."""
RUN_FLAGS = ["--logging_steps", "1", "--save_strategy", "no", "--report_to", "none"]
SHORT_ROWS = 20_000  # synthetic chat rows: ~1M tokens, enough full 4096-token bins for every short cell
SHORT_DOC_TOKENS = 54  # mean tokens per synthetic chat example under the bench's character tokenizer


@dataclass(frozen=True)
class TrlCell:
    method: str
    targets: str
    """qv | all (--lora-targets qv | all-linear); ignored for full."""
    seq_len: int
    micro_batch: int | None
    """None: the plan's pick (with ckpt and attention None too: the line runs the levers the plan chose)."""
    ckpt: bool | None
    attention: str | None
    docs: str
    liger: bool = False
    load: str | None = None
    """fp32 | bf16; None: the plan's pick (`--load-dtype auto`: bf16 for a LoRA or QLoRA base, TRL's float32 for a
    full fine-tune), as the plan prints it."""
    steps: int = 6
    strategy: str = "ddp"
    global_batch: int = 4

    @property
    def key(self) -> str:
        t = "" if self.method == "full" else f"-{self.targets}"
        if self.micro_batch is None:
            levers = f"auto-gb{self.global_batch}"
        else:
            levers = f"mb{self.micro_batch}-ckpt{'on' if self.ckpt else 'off'}-{self.attention}"
        # "planned": the plan's own dtype; cells measured before the plan chose it (2026-12-01, TRL's float32 for
        # every method) are keyed "default" in their results files
        tail = ("-liger" if self.liger else "") + f"-{self.load or 'planned'}"
        return f"trl-g1-{self.strategy}-{self.method}{t}-s{self.seq_len}-{levers}-{self.docs}{tail}"


def _t(method, targets, seq, mb, ckpt, attn, docs, liger=False, load="bf16") -> TrlCell:
    return TrlCell(method, targets, seq, mb, ckpt, attn, docs, liger, load)


def _auto(method, targets, seq, docs) -> TrlCell:
    return TrlCell(method, targets, seq, None, None, None, docs)


# Fit rows (bench/holdout.py TRL_CLI_FIT_KEYS) for the packed-row attention path (TRL's padding-free collator flattens
# a micro-batch into one row): micro-batch 1 against 4 under SDPA and flex with documents filling each bin; Liger's
# kernels with TRL's own loss on and off. Then the validation rows, never fitted: the plan's own picks for LoRA, full
# and QLoRA (with the dtype it chose), and pinned rows over targets, checkpointing, micro-batch, kernels and documents.
FIT: tuple[TrlCell, ...] = (
    _t("lora", "qv", 4096, 1, True, "sdpa", "fill"),
    _t("lora", "qv", 4096, 4, True, "sdpa", "fill"),
    _t("lora", "qv", 4096, 4, True, "flex", "fill"),
    _t("lora", "qv", 4096, 1, True, "flex", "fill"),
    _t("lora", "all", 4096, 2, False, "sdpa", "fill"),
    _t("lora", "all", 4096, 2, False, "sdpa", "fill", liger=True),
)
VALIDATION: tuple[TrlCell, ...] = (
    _auto("lora", "qv", 4096, "fill"),
    _auto("full", "qv", 4096, "fill"),
    _auto("qlora", "qv", 4096, "fill"),
    _t("lora", "all", 8192, 1, True, "flex", "fill"),
    _t("lora", "qv", 4096, 2, False, "sdpa", "short"),
    _t("full", "qv", 2048, 4, True, "sdpa", "fill", load="fp32"),
    _t("lora", "all", 4096, 1, True, "sdpa", "fill", liger=True),
    _t("qlora", "qv", 8192, 1, True, "flex", "fill"),
    _t("lora", "qv", 4096, 2, True, "flex", "short"),
    # QLoRA with a bf16 stream (TRL keeps --dtype's bf16 for norms and embeddings): run on 2026-12-03 as the row that
    # would separate the dequantisation from the fp32 stream train.py's QLoRA rows carry; that split is not shipped
    # (bench/targets.py says why), so it stays held out.
    _t("qlora", "qv", 4096, 2, False, "sdpa", "fill"),
)
CELLS: tuple[TrlCell, ...] = (*FIT, *VALIDATION)


def plan_command(cell: TrlCell, cfg: Path) -> list[str]:
    targets = ["--lora-targets", "qv" if cell.targets == "qv" else "all-linear"] if cell.method != "full" else []
    docs = ["--doc-tokens", str(cell.seq_len if cell.docs == "fill" else SHORT_DOC_TOKENS)]
    if cell.micro_batch is None:
        levers = ["--global-batch", str(cell.global_batch)]
    else:
        levers = ["--micro-batch", str(cell.micro_batch), "--global-batch", str(cell.micro_batch),
                  "--grad-checkpointing", "on" if cell.ckpt else "off", "--attention", cell.attention,
                  "--liger" if cell.liger else "--no-liger"]  # fmt: skip
    load = ["--load-dtype", cell.load] if cell.load else []
    return [
        sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--script", "trainer", "--num-gpus", "1",
        "--strategy", cell.strategy, "--method", cell.method, "--seq-len", str(cell.seq_len), *levers, *load,
        *targets, *docs, "--output", str(cfg), "--force", "--json",
    ]  # fmt: skip


def filled_command(launch: str, checkpoint: Path, data: Path, steps: int, out: Path) -> list[str]:
    """The printed line with the user's placeholders filled and the run-length flags added; `accelerate` is run
    through this interpreter, the environment prefix is set by the caller."""
    words = shlex.split(launch)
    words = words[words.index("accelerate") :]
    values = {"--model_name_or_path": str(checkpoint), "--dataset_name": str(data), "--max_steps": str(steps),
              "--output_dir": str(out)}  # fmt: skip
    for flag, value in values.items():
        words[words.index(flag) + 1] = value
    return [sys.executable, "-m", "accelerate.commands.launch", *words[2:], *RUN_FLAGS]


def checkpoint(workdir: Path) -> Path:
    """A bf16 random checkpoint of Mistral-7B's architecture with the bench tokenizer (what TRL loads by path)."""
    out = workdir / "mistral-7b-bf16"
    if (out / "model.safetensors.index.json").exists() or (out / "model.safetensors").exists():
        return out
    config = model_dir(workdir)
    code = (
        "import sys, torch\nfrom transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer\n"
        "src, dst = sys.argv[1], sys.argv[2]\ntorch.manual_seed(0)\n"
        "with torch.device('cuda' if torch.cuda.is_available() else 'cpu'):\n"
        "    m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.bfloat16)\n"
        "m.save_pretrained(dst)\nAutoTokenizer.from_pretrained(src).save_pretrained(dst)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(config), str(out)], cwd=REPO, check=True, timeout=600)
    return out


def dataset_dir(cell: TrlCell, workdir: Path) -> Path:
    """A directory `load_dataset` reads as one train split (TRL's --dataset_name takes a hub id or a directory)."""
    out = workdir / f"data-{cell.docs}"
    if out.exists():
        return out
    tmp = workdir / f"data-{cell.docs}-tmp"
    args = (
        ["--long-tokens", str(cell.seq_len + 600), "--rows", "64"]
        if cell.docs == "fill"
        else ["--rows", str(SHORT_ROWS)]
    )
    subprocess.run([sys.executable, "recipes/data/make_synthetic.py", *args, "--out", str(tmp)], cwd=REPO, check=True,
                   timeout=300)  # fmt: skip
    out.mkdir()
    name = "synthetic_long.jsonl" if cell.docs == "fill" else "synthetic_chat.jsonl"
    (tmp / name).rename(out / "train.jsonl")
    return out


def calibration_fields(cell: TrlCell, plan: dict) -> dict:
    """The keys bench/results_rows.py reads from a sweep cell, in its terms, with the levers the plan chose filled in
    (the plan's JSON): one GPU, bf16, the documents' length, TRL's LoRA targets and dropout (ModelConfig's 0.05)."""
    lora = cell.method != "full"
    launch = plan["launch_command"]
    return dict(
        gpus=1,
        precision="bf16",
        micro_batch=plan["micro_batch"],
        ckpt=plan["grad_checkpointing"],
        attention="flex" if "flex_attention" in launch else "sdpa",
        liger="--use_liger_kernel" in launch,
        doc_tokens=cell.seq_len if cell.docs == "fill" else SHORT_DOC_TOKENS,
        lora_targets=list(QV if cell.targets == "qv" else ALL_LINEAR) if lora else [],
        lora_dropout=script_facts("trainer").lora_dropout if lora else 0.0,
        load_dtype=_printed_dtype(launch),
    )


def _printed_dtype(launch: str) -> str:
    """The load dtype the printed line asks TRL for (`--dtype`; TRL's own default float32 where it names none)."""
    words = shlex.split(launch)
    dtype = words[words.index("--dtype") + 1] if "--dtype" in words[:-1] else TRL_DTYPE["fp32"]
    return LOAD_DTYPE_OF[dtype]


SAVE_GRACE_S = 20.0
"""Seconds a run may go on after its step log's summary (written at on_train_end): then it is in TRL's own closing
save_model, which the bench does not measure (a full fine-tune's fp32 model is 29 GB), and is stopped."""


def _summarised(log: Path) -> bool:
    return log.exists() and '"event": "summary"' in log.read_text()


def run_until_summary(
    cmd: list[str], env: dict, log: Path, timeout_s: float = 900, grace_s: float = SAVE_GRACE_S
) -> tuple[int, str, bool]:
    """(exit code, output tail, stopped in the closing save): the launch, stopped SAVE_GRACE_S after its summary."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env,
                                start_new_session=True)  # fmt: skip
        deadline, summary_at, stopped = time.time() + timeout_s, None, False
        while proc.poll() is None and time.time() < deadline:
            time.sleep(min(1.0, grace_s / 2))
            if summary_at is None and _summarised(log):
                summary_at = time.time()
            if summary_at is not None and time.time() - summary_at > grace_s:
                stopped = True
                break
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        text = out.read()
    if stopped:
        return 0, text[-3000:], True
    rc = proc.returncode if time.time() < deadline else -9
    return rc, (text if rc != -9 else text + f"\ntimeout after {timeout_s} s")[-3000:], False


def run_cell(cell: TrlCell, workdir: Path) -> dict:
    cfg, log = workdir / f"{cell.key}.yaml", workdir / f"{cell.key}.jsonl"
    res = subprocess.run(plan_command(cell, cfg), capture_output=True, text=True, cwd=REPO, timeout=120)
    if res.returncode != 0:
        return dict(asdict(cell), key=cell.key, status="error", tail=f"plan: {res.stderr.strip()[-600:]}")
    plan = json.loads(res.stdout)
    cmd = filled_command(plan["launch_command"], checkpoint(workdir), dataset_dir(cell, workdir), cell.steps,
                         workdir / cell.key)  # fmt: skip
    path = os.pathsep.join([str(HOOK), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, **SAFE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": path, "BENCH_STEPLOG": str(log)}  # fmt: skip
    log.unlink(missing_ok=True)
    t0 = time.time()
    rc, tail, stopped = run_until_summary(cmd, env, log)
    predicted = next((e for e in plan["estimates"] if e["strategy"] == plan["strategy"]), {})
    row = dict(asdict(cell), key=cell.key, script="trainer", config=plan, predicted=predicted, stopped_at_save=stopped,
               printed=plan["launch_command"], command=shlex.join(cmd), wall_s=round(time.time() - t0, 1),
               **calibration_fields(cell, plan))  # fmt: skip
    measured = summarise(log) if log.exists() else {}
    status = "ok" if rc == 0 and measured else ("oom" if looks_oom(tail) else "error")
    row.update(status=status, measured=measured, **({} if status == "ok" else {"tail": tail[-1500:]}))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path(tempfile.gettempdir()) / "trl-cli.json")
    ap.add_argument("--also-write", type=Path)
    ap.add_argument("--only", default="*")
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--per-cell-s", type=float, default=45, help="a cell's expected wall time, for the budget")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-trl")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--done", type=Path, action="append", default=[],
                    help="a committed results file: its ok / oom cells are not run again (repeatable)")  # fmt: skip
    args = ap.parse_args()
    done = {k for f in args.done for k, c in json.loads(f.read_text())["cells"].items() if c["status"] in ("ok", "oom")}
    cells = [c for c in select(CELLS, args.only.split(",")) if c.key not in done]
    if args.list:
        print("\n".join(c.key for c in cells))
        return 0
    start = time.time()
    results = json.loads(args.results.read_text()) if args.results.exists() else {"machine": "h200-x1", "cells": {}}
    results.setdefault("versions", {}).update(versions())
    args.workdir.mkdir(parents=True, exist_ok=True)
    paths = [args.results] + ([args.also_write] if args.also_write else [])
    for cell in cells:
        if results["cells"].get(cell.key, {}).get("status") in ("ok", "oom"):
            continue
        if time.time() - start + args.per_cell_s > args.budget_s:
            print(f"budget: skipping {cell.key}", flush=True)
            continue
        print(f"running {cell.key} ...", flush=True)
        row = run_cell(cell, args.workdir)
        results["cells"][cell.key] = row
        save(results, *paths)
        m = row.get("measured") or {}
        print(f"  {row['status']}: {m.get('tokens_per_s_per_gpu')} tok/s (predicted "
              f"{row.get('predicted', {}).get('tokens_per_s_per_gpu')}), alloc {m.get('peak_allocated_gb')} reserved "
              f"{m.get('peak_reserved_gb')} GB, wall {row.get('wall_s')} s"
              + (f"\n  {row.get('tail', '')[-600:]}" if row["status"] != "ok" else ""), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
