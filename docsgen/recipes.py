"""Regenerate recipes/: one folder per scenario (hardware + model + method) with the generator's config files and a
README that says why this strategy for this wiring, what it is predicted to cost, and the exact commands. Each
scenario is a `python -m generator plan` argument list, parsed by the generator's own argparse, so the command the
README prints is the one that wrote the files. A test regenerates everything and fails on any byte of difference.

    .venv/bin/python -m docsgen.recipes [OUT_DIR]      (or `python -m docsgen` for every generated document)
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from docsgen.recipe_evidence import PROBE_FILE, PROBE_WHEN, measured_busbw, measured_run_line
from generator.cli import build_parser
from generator.emit import render
from generator.emit.command import DATA_ARGS, DATA_NOTE
from generator.fileio import atomic_write
from generator.model import load_model
from generator.model.presets import PRESET_HUB_IDS
from generator.plan.fabrics import FABRICS
from generator.plan.planner import make_plan
from generator.plan.reasons import format_ids
from generator.topology import REFERENCE_MACHINES, topology_from_args
from generator.ui.request import request_from_args

RECIPES_DIR = "recipes"
CONFIG_NAME = "config.yaml"
COMMON = ("--model", "mistral-7b", "--global-batch", "64")


@dataclass(frozen=True)
class Recipe:
    name: str
    """Folder under recipes/."""
    have: str
    """"What you have", for the index table."""
    args: tuple[str, ...]
    """`python -m generator plan` arguments, without --output/--force."""
    why: str
    """Why this recipe exists: what the wiring forces, beyond the planner's own reasons."""


RECIPES: tuple[Recipe, ...] = (
    Recipe(
        "hgx-h200-8-full", "8x H200 SXM on an NVSwitch baseboard (HGX/DGX)", ("--machine", "hgx-h200-8", *COMMON),
        "Every pair of GPUs is joined at full NVLink speed through NVSwitch, so any GPU order is as good as any "
        "other and all eight GPUs sit in one island; the only question is which sharding costs least and fits.",
    ),
    Recipe(
        "h200-nvl-8-island4-full", "H200 NVL node (NVLink bridges in groups of four)",
        ("--machine", "h200-nvl-8", "--num-gpus", "4", *COMMON),
        "The NVL node's NVLink bridges join GPUs in two groups of four; between the groups traffic crosses the CPUs "
        "(SYS). This recipe keeps the job inside one group (--num-gpus 4): the planner picks the four GPUs of one "
        "NVLink island so every collective stays on NVLink. The other group is free for a second job.",
    ),
    Recipe(
        "h200-sxm-2-full", "2x H200 SXM (the measured machine)", ("--machine", "h200-sxm-2", *COMMON),
        "Two H200 SXM joined by NV18 through NVSwitch: the machine the estimator was calibrated on (its topology file "
        "is a real capture and its all-reduce bandwidth was measured).",
    ),
    Recipe(
        "h200-sxm-2-full-fast", "2x H200 SXM with Liger + flex attention (predicted fastest; not measured as a whole)",
        ("--machine", "h200-sxm-2", *COMMON, "--liger", "--attention", "flex"),
        "The measured machine with the two kernel levers that paid off there: Liger's fused kernels (no full logits "
        "tensor, so a larger micro-batch fits) and flex attention, which skips the attention tiles packing masks out "
        "instead of computing a dense mask as SDPA must. Needs liger-kernel installed; flex attention needs a GPU. "
        "Its gain grows as packed documents get shorter: the measurement used ~54-token examples.",
    ),
    Recipe(
        "pcie-l40s-8-full", "8x L40S (48 GB) on PCIe, no NVLink", ("--machine", "pcie-l40s-8", *COMMON),
        "No NVLink: every byte of every collective crosses PCIe and, between the two sockets, the CPU interconnect. "
        "48 GB per GPU is too little for replicated optimizer states, so only full sharding fits.",
    ),
    Recipe(
        "rtx4090-1gpu-lora", "one 24 GB consumer card (RTX 4090/3090), LoRA",
        ("--machine", "rtx4090-2", "--num-gpus", "1", "--method", "lora", "--load-dtype", "bf16", "--precision", "bf16",
         *COMMON),
        "One 24 GB card: the frozen base weights must be bf16 (fp32 would need 29 GB alone) and activation "
        "checkpointing keeps the 4096-token activations small. One process, no communication.",
    ),
    Recipe(
        "rtx4090-1gpu-qlora", "one 24 GB consumer card, QLoRA (4-bit base)",
        ("--machine", "rtx4090-2", "--num-gpus", "1", "--method", "qlora", *COMMON),
        "The base model in 4-bit NF4 (bitsandbytes) leaves most of the card for activations, at the price of "
        "dequantisation work and 4-bit rounding of the frozen weights. Needs a CUDA GPU and bitsandbytes.",
    ),
    Recipe(
        "multinode-hgx-h200-8x2-hsdp", "2 nodes of 8x H200 SXM under SLURM (one InfiniBand NDR port per node)",
        ("--machine", "hgx-h200-8", "--num-machines", "2", "--fabric", "ib-ndr", "--main-process-ip", "10.0.0.1",
         *COMMON),
        "Inside a node GPUs talk over NVSwitch (predicted 339 GB/s bus bandwidth); between nodes one NDR port gives a "
        "predicted 40 GB/s. HSDP shards the model inside each node and only all-reduces gradients across nodes, so "
        "the heavy per-layer all-gather/reduce-scatter traffic never leaves NVLink.",
    ),
    Recipe(
        "hgx-h200-8-llama3-70b-lora", "8x H200 SXM (HGX), Llama-3-70B LoRA (predicted; tensor/context parallel "
        "considered)",
        ("--machine", "hgx-h200-8", "--model", "llama-3-70b", "--method", "lora", "--global-batch", "64"),
        "A 70B model on one node: a full fine-tune needs 16 bytes per parameter of fp32 masters and AdamW states, "
        "140 GB per GPU over eight before any activation, so no layout fits it here; LoRA keeps the base frozen in "
        "bf16 (17.5 GB per GPU sharded). The planner also prices tensor and context parallel groups inside the "
        "NVSwitch island and takes one only where it fits where data parallelism does not or is predicted at least "
        "5% faster. All TP/CP numbers are predicted: nothing here has run on GPUs yet.",
    ),
    Recipe(
        "hgx-h200-8-llama3.1-8b-128k-lora", "8x H200 SXM (HGX), Llama-3.1-8B LoRA at 131,072 tokens (predicted; "
        "context parallel)",
        ("--machine", "hgx-h200-8", "--model", "llama-3.1-8b", "--method", "lora", "--seq-len", "131072",
         "--global-batch", "8"),
        "At 131,072 tokens one sequence's activations, logits and loss buffers fit no single H200 even with "
        "checkpointing, and data parallelism cannot split one sequence. Context parallel (torch's ring attention "
        "through accelerate) splits it over the eight GPUs of the NVSwitch island, 16,384 tokens each, with the "
        "keys and values passed between them at every layer. All numbers predicted: nothing here has run on GPUs "
        "yet. With packing, documents attend across their boundaries inside a block (context parallel takes no "
        "per-document mask). The synthetic sample in recipes/data/ holds fewer tokens than one 131,072-token block "
        "(train.py stops with a one-line message): give --dataset a corpus of long documents.",
    ),
)  # fmt: skip


def plan_argv(recipe: Recipe) -> list[str]:
    """The recipe's plan arguments, in bf16 where it names no precision: the recipes' measured evidence is bf16, and
    --precision auto takes float8 where torchao is installed, so the printed command says so to make the same plan."""
    bf16 = () if "--precision" in recipe.args else ("--precision", "bf16")
    return ["plan", *recipe.args, *bf16, "--output", f"{RECIPES_DIR}/{recipe.name}/{CONFIG_NAME}", "--force"]


def plan_command(recipe: Recipe) -> str:
    return shlex.join(["python", "-m", "generator", *plan_argv(recipe)])


def make_recipe_plan(recipe: Recipe):
    """The Plan `python -m generator plan <args>` makes, through the CLI's own parser and request builder (bf16:
    plan_argv)."""
    args = build_parser("plan").parse_args(plan_argv(recipe))
    return make_plan(topology_from_args(args), load_model(args.model), request_from_args(args))


def regenerate(out_dir: str | Path = RECIPES_DIR) -> list[Path]:
    """Write every recipe folder and recipes/README.md into out_dir; return the paths written, sorted."""
    out_dir = Path(out_dir)
    texts: dict[str, str] = {}
    rows = []
    for recipe in RECIPES:
        plan = make_recipe_plan(recipe)
        config = f"{RECIPES_DIR}/{recipe.name}/{CONFIG_NAME}"
        emitted = render(plan, config)
        for path, text in emitted.files.items():
            # the SLURM script stays as `plan` writes it: the README's plan command must rewrite it byte for byte
            texts[str(Path(path).relative_to(RECIPES_DIR))] = text
        rank1 = render(replace(plan, machine_rank=1), config).launch_command if plan.num_machines > 1 else None
        files = sorted(str(Path(p).relative_to(f"{RECIPES_DIR}/{recipe.name}")) for p in emitted.files)
        rank0, rank1 = with_data(emitted.launch_command), rank1 and with_data(rank1)
        texts[f"{recipe.name}/README.md"] = recipe_readme(recipe, plan, rank0, rank1, files)
        rows.append((recipe, plan))
    texts["README.md"] = index_readme(rows)
    return sorted(atomic_write(out_dir / name, text, force=True) for name, text in texts.items())


def with_data(command: str) -> str:
    """The train command with --dataset and --max-steps written out."""
    return f"{command} {shlex.join(DATA_ARGS)}"


def numbers(recipe: Recipe, plan) -> list[str]:
    e, w = plan.estimate, plan.workload
    out = [
        f"- Peak memory per GPU: {e.peak_gb:.1f} GB allocated, {e.reserved_gb:.1f} GB reserved of {e.capacity_gb:.1f} "
        "GB usable (predicted)",
        f"- Throughput: {e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, "
        f"{e.tokens_per_s_per_gpu * plan.num_processes:,.0f} tokens/s in all, {e.step_s:.2f} s per optimizer step of "
        f"{plan.global_batch} x {w.seq_len} tokens, MFU {e.mfu:.0%} (predicted)",
    ]
    if recipe.name.startswith("h200-sxm-2") and (bw := measured_busbw()):
        out.append(
            f"- NCCL all-reduce bus bandwidth between the two GPUs: {bw:.0f} GB/s at 2 GB messages (measured "
            f"({PROBE_WHEN}, `{PROBE_FILE}`))"
        )
        out.append(measured_run_line(plan))
    return out


def parallel_lines(plan) -> list[str]:
    """The tensor/context-parallel groups, for a plan that has them (predicted, like every number of such a plan)."""
    if plan.parallel is None:
        return []
    head = f"- Parallel layout (predicted, not measured): {plan.parallel.layout.label}"
    return [head, *[f"  - {line}" for line in plan.parallel.describe()]]


def recipe_readme(recipe: Recipe, plan, command: str, rank1: str | None, files: list[str]) -> str:
    w = plan.workload
    machine = plan.machine.removeprefix("machine:")
    nodes = f"{plan.num_machines} machines x " if plan.num_machines > 1 else ""
    where = f"GPU{'s' if len(plan.gpu_ids) > 1 else ''} {format_ids(plan.gpu_ids)}"
    where += " of each machine" if plan.num_machines > 1 else ""
    base = "base weights in 4-bit NF4" if w.method == "qlora" else f"weights loaded in {w.load_dtype}"
    lines = [
        f"# {recipe.name}",
        "",
        "Generated by `python -m docsgen.recipes`; do not edit by hand (`tests/test_recipes_regenerate.py` "
        "fails on any difference). Numbers are predicted by the estimator unless labelled measured.",
        "",
        f"- Hardware: {nodes}`{machine}`: {REFERENCE_MACHINES.get(machine, plan.gpu_name)}",
        f"- Model and method: {plan.model.name} ({PRESET_HUB_IDS.get(plan.model.name, plan.model.name)}), {w.method} "
        f"fine-tune, sequence length {w.seq_len}, {base}, {w.mixed_precision} mixed precision",
        f"- Strategy: {plan.strategy} on {where}, {plan.num_processes} process{'es' if plan.num_processes > 1 else ''}"
        f" in all; micro-batch {w.micro_batch} x {w.grad_accum} accumulation steps = global batch "
        f"{plan.global_batch}; activation checkpointing {'on' if w.grad_checkpointing else 'off'}",
        *numbers(recipe, plan),
        *parallel_lines(plan),
        f"- Files: {', '.join(f'`{f}`' for f in files)}",
        "",
        "## Why this strategy for this wiring",
        "",
        recipe.why,
        "",
        *[f"- {r}" for r in plan.reasons],
        *[f"- warning: {x}" for x in plan.warnings],
        "",
        "## Commands",
        "",
        "Regenerate the config (from the repository root; the reference machine stands in for yours, use no "
        "`--machine` to read this machine's topology instead):",
        "",
        "```sh",
        plan_command(recipe),
        "```",
        "",
    ]
    if rank1 is None:
        gpus = f"{len(plan.gpu_ids)} GPU" + ("s" if len(plan.gpu_ids) > 1 else "")
        lines += [f"Train ({gpus}; from the repository root):", "", "```sh", DATA_NOTE, command, "```"]
    else:
        lines += multinode_section(recipe, plan, command, rank1) + fabric_section(recipe)
    return "\n".join(lines) + "\n"


def multinode_section(recipe: Recipe, plan, rank0: str, rank1: str) -> list[str]:
    n = len(plan.gpu_ids)
    return [
        f"Under SLURM ({plan.num_machines} nodes x {n} GPUs = {plan.num_processes} processes), from the repository "
        "root on a filesystem every node sees: `srun` starts one `accelerate launch` per node, the node rank comes "
        "from `$SLURM_NODEID` and the rendezvous address from the first host of the allocation (the `10.0.0.1` in "
        "the YAML is replaced by `--main_process_ip`). `#SBATCH --signal=USR1@120` asks for a checkpoint two "
        "minutes before the time limit; train.py then exits 75 and `--resume` continues.",
        "",
        "```sh",
        f"sbatch {RECIPES_DIR}/{recipe.name}/{Path(CONFIG_NAME).stem}.slurm.sh",
        "```",
        "",
        "Without SLURM, run the same command on every node with its own `--machine_rank` (0 on the node whose private "
        "address is `main_process_ip`):",
        "",
        "```sh",
        DATA_NOTE,
        rank0,
        rank1,
        "```",
        "",
        "## Security: keep the rendezvous inside the cluster",
        "",
        "The rendezvous store (torch's static/c10d TCPStore) has no authentication: anyone who can reach its port can "
        "join the job, feed it bogus ranks or stop it. `main_process_ip` must be a private address of node 0 on the "
        "cluster network (10.0.0.1 here is a placeholder; the SLURM script uses the first allocated host instead), "
        "and `python -m generator check` warns when it is a public one. Keep these ports reachable only from the "
        "other nodes (firewall or security group):",
        "",
        f"- `main_process_port` {plan.main_process_port}/tcp on node 0 (the TCPStore; torchrun's `--master_port`)",
        "- 29400/tcp, torch's default c10d rendezvous port, if you switch to `--rdzv_backend c10d`",
        "- NCCL's own connections: ephemeral TCP ports between all nodes (bootstrap and socket transport) and the "
        "InfiniBand/RoCE fabric; pin the interface with `NCCL_SOCKET_IFNAME` to the private one",
        "",
    ]


def fabric_section(recipe: Recipe) -> list[str]:
    """What the estimator picks for the same job on each named fabric: HSDP is its choice, not a hard-coded rule."""
    lines = [
        "## What changes with the network between nodes",
        "",
        "The same plan command with another `--fabric` (or your measured `--inter-node-gbps`); all predicted:",
        "",
        "| --fabric | bus bandwidth between nodes | strategy | step s | tokens/s/GPU |",
        "|---|---|---|---|---|",
    ]
    args = list(recipe.args)
    at = args.index("--fabric") + 1
    for name, fabric in FABRICS.items():
        plan = make_recipe_plan(replace(recipe, args=tuple(args[:at] + [name] + args[at + 1 :])))
        e = plan.estimate
        lines.append(
            f"| {name} | {fabric.busbw_gbps:g} GB/s | {plan.strategy} | {e.step_s:.2f} "
            f"| {e.tokens_per_s_per_gpu:,.0f} |"
        )
    return lines + [
        "",
        "HSDP wins whenever the link between nodes is much slower than NVLink inside a node: its per-layer parameter "
        "traffic stays inside the node and only one gradient all-reduce crosses it. With eight NDR NICs per node "
        "(rail-optimised DGX/HGX networking) the link between nodes is almost as fast as NVLink, so the estimator "
        "prefers a flat strategy that moves fewer bytes in all.",
        "",
    ]


def index_readme(rows) -> str:
    lines = [
        "# Recipes: copy the one that matches your hardware",
        "",
        "Generated by `python -m docsgen.recipes` (do not edit by hand). Every config here was written by the "
        "generator for a bundled reference machine; run the recipe's plan command without `--machine` on your own "
        "machine to get the same choice for your wiring. Memory and throughput are predicted by the estimator, not "
        "measured. Training data for a first run: `recipes/data/` (see `recipes/data/make_synthetic.py`).",
        "",
        "| what you have | recipe | method | strategy | GPUs | peak GB/GPU (predicted) | tokens/s/GPU (predicted) |",
        "|---|---|---|---|---|---|---|",
    ]
    for recipe, plan in rows:
        e = plan.estimate
        gpus = f"{plan.num_machines} x {len(plan.gpu_ids)}" if plan.num_machines > 1 else str(len(plan.gpu_ids))
        lines.append(
            f"| {recipe.have} | [`{recipe.name}`]({recipe.name}/README.md) | {plan.workload.method} | {plan.strategy} "
            f"| {gpus} | {e.peak_gb:.1f} | {e.tokens_per_s_per_gpu:,.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    for p in regenerate(sys.argv[1] if len(sys.argv) > 1 else RECIPES_DIR):
        print(p)
