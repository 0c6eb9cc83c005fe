"""The comment header on every emitted config: what was chosen and why, where it runs, what it is predicted to cost,
and how to launch it. Deterministic (no timestamps, no absolute paths) so regenerated configs compare byte-identical.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from generator import __version__
from generator.catalog import strategies as catalog
from generator.emit.parallelism import data_parallel_text
from generator.emit.parallelism import header_lines as parallelism_header_lines
from generator.emit.script_cli import TRL_MODULE, loop_settings
from generator.plan.precision import MEASURED, unmeasured
from generator.plan.types import Plan

WIDTH = 116  # plus "# " stays inside the project's 120 columns


def strategy_label(plan: Plan) -> str:
    s = catalog.strategy(plan.strategy)
    if s.framework == "ddp" and plan.num_processes == 1:
        return "single-GPU training (no data parallelism)"
    return s.label


def clean(text: str) -> str:
    """One printable line: control characters and line breaks (YAML also breaks on U+0085/U+2028/U+2029, and
    rejects most control characters even inside comments) are shown escaped instead."""
    return "".join(c if c == "\t" or c.isprintable() else repr(c)[1:-1] for c in text)


def header_lines(
    plan: Plan,
    command: str,
    ds_json: str | None,
    env: dict[str, str],
    hpz: int | None = None,
    notes: Sequence[str] = (),
) -> list[str]:
    """The header as plain lines (no comment markers): YAML prefixes them with '# ', the DS JSON stores them.
    `notes` (e.g. `plan --trial`'s measured section) go after the warnings; none leaves the header unchanged."""
    w, e = plan.workload, plan.estimate
    ids = ",".join(str(i) for i in plan.gpu_ids)
    per = "on each machine " if plan.num_machines > 1 else ""
    lines = [
        f"Written by dist-config-generator {__version__} (python -m generator); regenerate rather than edit.",
        f"Chosen: {plan.strategy}: {strategy_label(plan)}.",
        f"Machine: {plan.machine}; GPU {plan.gpu_name}.",
        f"GPU ids {per}(PCI bus order, as nvidia-smi numbers them): {ids} -> {plan.num_processes} process(es) over "
        f"{plan.num_machines} machine(s). The command sets CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA uses the same ids.",
        f"Workload: {plan.model.name}, method {w.method}, sequence length {w.seq_len}, micro-batch {w.micro_batch} x "
        f"accumulation {w.grad_accum} x {data_parallel_text(plan)} = global batch {plan.global_batch} sequences; "
        f"weights loaded in {w.load_dtype}.",
        script_line(w.script),
        "Activation checkpointing: " + _checkpointing(plan),
        f"Expected peak memory per GPU (predicted): {e.peak_gb:.1f} GB allocated, {e.reserved_gb:.1f} GB reserved, "
        f"budget {e.capacity_gb:.1f} GB after headroom."
        + (f" Host memory for offloaded states: {e.cpu_gb:.1f} GB per machine (predicted)." if e.cpu_gb else ""),
        f"Throughput (predicted): {e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, {e.step_s:.2f} s per optimizer "
        f"step, MFU {e.mfu * 100:.1f}%.",
    ]
    if w.precision == "fp8":
        lines.append(fp8_line(plan))
    if not e.fits:
        lines.append("WARNING: predicted NOT to fit in GPU memory; written only because this strategy was forced.")
    if catalog.strategy(plan.strategy).hybrid:
        lines.append(
            f"HSDP mesh: {plan.hsdp_replicate} replica(s) x {plan.hsdp_shard} GPUs per shard group; each group is a "
            "contiguous block of ranks, and gpu_ids are ordered so each block is one NVLink island or machine."
        )
    lines += parallelism_header_lines(plan)
    if ds_json:
        lines.append(
            f"DeepSpeed settings live in {ds_json} (ZeRO++ zero_hpz_partition_size needs a DeepSpeed JSON); "
            "precision, accumulation and clipping are there, not here. Its path is relative to the launch directory."
        )
    if hpz:
        extra_gb = 2 * plan.model.params_total / hpz / 1e9
        lines.append(
            f"ZeRO++ hpZ: parameter all-gathers stay inside groups of {hpz} GPUs, at the cost of a secondary bf16 "
            f"copy of 1/{hpz} of the parameters per GPU: about {extra_gb:.1f} GB more than the peak above (predicted)."
        )
    if env:
        lines.append("Environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())) + " (in the command).")
    if "--enable_cpu_affinity" in command:
        lines.append(
            "--enable_cpu_affinity pins each rank to its GPU's NUMA cores; drop it inside a container limited to "
            "fewer CPUs."
        )
    if plan.num_machines > 1:
        lines += [
            f"Multi-machine: run the same command on every machine with --machine_rank 0..{plan.num_machines - 1}. "
            f"The rendezvous on {plan.main_process_ip}:{plan.main_process_port} has no authentication: keep that "
            "port and NCCL's on the cluster's private network.",
        ]
    if plan.forced:
        lines.append("Strategy forced by the user; the planner would have chosen differently.")
    lines += ["Why:"] + [f"  - {r}" for r in plan.reasons]
    settings = loop_settings(plan)
    if settings:
        lines += ["Your loop must use, for these predictions to hold:"] + [f"  - {s}" for s in settings]
    if plan.warnings:
        lines += ["Warnings:"] + [f"  - {r}" for r in plan.warnings]
    lines += list(notes)
    out = [wrapped for line in lines for wrapped in _wrap(clean(line))]
    return out + ["Launch (from the directory the config path is relative to):", "  " + clean(command)]


def fp8_line(plan: Plan) -> str:
    """Header line of an fp8 plan: measured or predicted, as plan.precision says of this configuration. `check` reads
    the precision back from the launch command's --precision."""
    why_not = unmeasured(plan.gpu_name, plan.strategy, plan.num_processes)
    label = f"PREDICTED, NOT MEASURED here ({why_not})" if why_not else MEASURED
    return (
        f"Precision: fp8, {label}: train.py --precision fp8 converts the decoder's Linear layers to torchao float8 "
        "(tensorwise) and compiles each decoder layer (tens of seconds at the start, not in tokens/s); "
        "mixed_precision stays bf16 here because accelerate's own fp8 path does not compile them (docs/fp8.md). "
        "The numbers above are the estimator's predictions for fp8; --precision bf16 opts out."
    )


SCRIPT_PREFIX = "Script assumed: "
"""Starts the header line naming the --script; `check` reads the value back from it."""


LAUNCHED = {
    "train.py": "train.py with the flags in the launch line",
    "trainer": f"TRL's own SFT script ({TRL_MODULE}, or --script-path) with its CLI flags in the launch line",
    "custom": "your Accelerate loop, with the settings listed below",
}


def script_line(script: str) -> str:
    """The predictions below hold for this script's defaults (estimate.scripts), and the plan chose only among its
    levers; another script is checked with `check --script`."""
    from generator.estimate.scripts import script_facts

    return (
        f"{SCRIPT_PREFIX}{script} ({script_facts(script).summary}); launched as {LAUNCHED[script]}. Launched with "
        "another script, memory and speed differ: python -m generator check CONFIG --script train.py|trainer|custom."
    )


def _wrap(line: str) -> list[str]:
    """Prose wrapped for reading; the launch command is never wrapped, so it can be copied as one line."""
    indent = "    " if line.startswith("  - ") else "  "
    return textwrap.wrap(line, width=WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _checkpointing(plan: Plan) -> str:
    if not plan.workload.grad_checkpointing:
        return "off (spare memory is used to skip the recompute, about a third more compute)."
    if catalog.strategy(plan.strategy).framework == "fsdp":
        return (
            "on, done by FSDP (fsdp_activation_checkpointing); train.py does not also enable HF gradient "
            "checkpointing when FSDP does it."
        )
    return "on (train.py --grad-checkpointing: HF gradient checkpointing of every decoder layer)."


def yaml_header(lines: list[str]) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in lines) + "\n"
