"""`python -m generator probe`: measure all-reduce / all-gather / reduce-scatter bus bandwidth of the GPU subsets that
matter and write a bandwidth file `plan --bandwidth-file` reads; `probe --compute` measures one GPU's operator rates
(GEMMs, float8 casts, grouped GEMMs, attention, HBM) into a compute file `plan --compute-file` reads. torch is
imported only once measuring starts."""

from __future__ import annotations

import argparse
import contextlib
import os
from datetime import datetime, timezone

from generator.errors import UserError
from generator.estimate.compute_table import GEMM_TIMINGS

FULL_SIZES, QUICK_SIZES = "1M,16M,256M,1G", "16M,256M"


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(verb, help=help_text, description=help_text)
    p.add_argument(
        "--compute",
        action="store_true",
        help="Measure this GPU's operator rates instead of links (about a minute on an H200, each section "
        "time-boxed; --quick about 20 s, --full two to three minutes).",
    )
    p.add_argument("--model", help="With --compute: also measure this model's exact shapes (preset, hub id, dir).")
    p.add_argument("--full", action="store_true", help="With --compute: every grid and host row (2-3 minutes).")
    p.add_argument(
        "--gemm-timing",
        choices=GEMM_TIMINGS,
        default=GEMM_TIMINGS[0],
        help="With --compute: GEMMs back to back (burst, the shipped table's) or each after a copy as long as itself "
        "(interleaved: the clock a training step's mix runs them at)",
    )
    p.add_argument("--gpus", help="Comma list of GPU ids (PCI order) to probe; default all (CPU: 0,1).")
    p.add_argument("--quick", action="store_true", help="Few sizes, few repeats, few subsets (<30 s on 8 GPUs).")
    p.add_argument("--sizes", help=f"Message sizes (default {FULL_SIZES}; --quick {QUICK_SIZES}).")
    p.add_argument("--repeats", type=int, help="Timed repeats per size (median kept; default 10, --quick 3).")
    p.add_argument("--output", help="Write the bandwidth JSON here (for plan --bandwidth-file).")
    p.add_argument("--force", action="store_true", help="Overwrite an existing --output.")
    p.add_argument("--backend", choices=("nccl", "gloo"), help="Default nccl on GPUs, gloo on CPU.")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu runs the same path over gloo.")
    p.add_argument("--p2p-disable", action="store_true", help="Also measure the pairs with NCCL_P2P_DISABLE=1.")
    p.add_argument("--timeout", type=float, help="Give up after this many seconds (default 600, --quick 60).")
    from generator.topology import add_topology_args

    add_topology_args(p)
    return p


def _topology(args):
    """The wiring to compare with. Without --topo-file/--machine, a failed or reference-fallback detection gives None:
    the probe then measures what torch sees and compares with nothing rather than with another machine."""
    from generator.topology import topology_from_args

    explicit = getattr(args, "topo_file", None) or getattr(args, "machine", None)
    try:
        topo = topology_from_args(args)
    except UserError:
        if explicit:
            raise
        return None
    if not explicit and topo.from_catalog:
        return None  # no GPU detected: detection fell back to a bundled reference machine
    return topo


def _gpus(args, topo) -> list[int]:
    if args.gpus:
        try:
            gpus = sorted({int(part) for part in args.gpus.split(",")})
        except ValueError:
            raise UserError(f"--gpus {args.gpus!r} is not a comma list of GPU ids like 0,1") from None
    elif args.device != "cuda":
        gpus = [0, 1]
    elif topo is not None:
        gpus = list(topo.indices)
    else:
        import torch

        gpus = list(range(torch.cuda.device_count()))
    if topo is not None and args.device == "cuda" and not set(gpus) <= set(topo.indices):
        raise UserError(f"--gpus {args.gpus}: this machine has GPUs {','.join(map(str, topo.indices))}")
    if len(gpus) < 2:
        raise UserError("probing needs at least two GPUs (collectives between one GPU measure nothing)")
    return gpus


def _env_info(device: str, backend: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "backend": backend, "device": device, "nccl": None, "driver": None}
    if device == "cuda":
        with contextlib.suppress(Exception):  # torch built without NCCL
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        from generator.topology.nvml import driver_version

        env["driver"] = driver_version()
    return env


def _run_compute(args) -> int:
    """probe --compute: one GPU (cuda:0, or CUDA_VISIBLE_DEVICES' first), or tiny sizes on the CPU."""
    import json

    from rich.console import Console

    from generator.fileio import atomic_write, check_writable

    if args.output:
        check_writable(args.output, args.force)
    model = None
    if args.model:
        from generator.model import load_model

        model = load_model(args.model)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("no CUDA GPU visible to torch; use --device cpu to exercise the compute probe")
    from generator.probe.compute import measure
    from generator.probe.compute_effort import FULL, QUICK, STANDARD
    from generator.probe.compute_report import print_summary

    if args.quick and args.full:
        raise UserError("--quick and --full contradict each other; give one (the default is about a minute)")
    effort = QUICK if args.quick else FULL if args.full else STANDARD
    console = Console(stderr=True)
    doc = measure(
        args.device, model, effort, on_section=lambda name: console.print(f"measuring {name} ..."),
        gemm_timing=args.gemm_timing,
    )  # fmt: skip
    out = Console()
    print_summary(out, doc)
    if args.output:
        written = atomic_write(args.output, json.dumps(doc, indent=1) + "\n", force=args.force)
        out.print(f"wrote {written} (measured; use: python -m generator plan --compute-file {written})")
    return 0


def run(args) -> int:
    if args.compute:
        return _run_compute(args)
    if args.model:
        raise UserError("--model goes with --compute (the link probe measures no model)")
    if args.full:
        raise UserError("--full goes with --compute (the link probe's sizes are set by --sizes)")
    from rich.console import Console
    from rich.progress import Progress

    from generator.probe.bandwidth_file import build_document, write_bandwidth_file
    from generator.probe.collectives import COLLECTIVES, parse_sizes
    from generator.probe.report import anomalies, print_table
    from generator.probe.runner import run_probe
    from generator.probe.subsets import Subset, choose_subsets

    if args.output:
        from generator.fileio import check_writable

        check_writable(args.output, args.force)
    backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    if backend == "nccl" and args.device == "cpu":
        raise UserError("--backend nccl needs --device cuda; use gloo on CPU")
    sizes = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    repeats = args.repeats or (3 if args.quick else 10)
    if repeats < 1:
        raise UserError("--repeats must be at least 1")
    timeout = args.timeout or (60.0 if args.quick else 600.0)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("no CUDA GPU visible to torch; use --device cpu to exercise the probe over gloo")
    topo = _topology(args)
    gpus = _gpus(args, topo)
    if args.device != "cuda":
        topo = None  # CPU ranks have no wiring to compare with
    subsets = choose_subsets(gpus, topo, quick=args.quick)
    console = Console(stderr=True)
    common = dict(backend=backend, device=args.device, warmup=1 if args.quick else 3, repeats=repeats)
    with Progress(console=console, transient=True) as progress:
        total = len(subsets) * len(sizes) * len(COLLECTIVES)
        task = progress.add_task(f"probing {len(subsets)} GPU subsets", total=total)
        step = lambda key, m: progress.advance(task)  # noqa: E731
        results = run_probe(gpus, subsets, sizes, COLLECTIVES, timeout_s=timeout, on_measurement=step, **common)
        p2p = {}
        if args.p2p_disable:
            pairs = [s for s in subsets if len(s.gpu_ids) == 2]
            pairs = pairs or [Subset(tuple(gpus[:2]), ("pair",))]
            progress.update(task, total=total + len(pairs) * len(sizes) * len(COLLECTIVES))
            extra = {"NCCL_P2P_DISABLE": "1"}
            p2p = run_probe(gpus, pairs, sizes, COLLECTIVES, timeout_s=timeout, extra_env=extra, on_measurement=step,
                            **common)  # fmt: skip
    out = Console()
    print_table(out, topo, subsets, results, f"Measured bus bandwidth ({backend}, {args.device})")
    if p2p:
        print_table(out, topo, pairs, p2p, "With NCCL_P2P_DISABLE=1 (measured)", p2p_disabled=True)
    for line in anomalies(topo, subsets, results, dict(os.environ)):
        out.print(f"[yellow]anomaly[/]: {line}")
    machine = f"{len(gpus)}x {topo.gpu(gpus[0]).name}" if topo is not None else "cpu"
    doc = build_document(machine, gpus, results, _env_info(args.device, backend))
    doc["method"] = {
        "dtype": "bf16" if args.device == "cuda" else "fp32",
        "warmup": common["warmup"],
        "repeats": repeats,
        "timing": "CUDA events" if args.device == "cuda" else "perf_counter after a barrier",
        "statistic": "median over repeats of the slowest rank's time",
        "busbw": "nccl-tests: all_reduce algbw*2(n-1)/n, all_gather/reduce_scatter algbw*(n-1)/n, S = total bytes",
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if p2p:
        doc["p2p_disabled"] = build_document(machine, gpus, p2p, {})["subsets"]
    if args.output:
        written = write_bandwidth_file(args.output, doc, force=args.force)
        out.print(f"wrote {written} (measured; use: python -m generator plan --bandwidth-file {written})")
    return 0
