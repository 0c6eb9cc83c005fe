"""The `plan` command's --trial and calibration flags, and what it does with them (kept apart from plan.py so the
planning path stays small; nothing here imports torch)."""

from __future__ import annotations

import json
from dataclasses import replace

from generator.errors import UserError


def add_trial_args(p) -> None:
    t = p.add_argument_group("trial (measure the top candidates for real)")
    t.add_argument("--trial", action="store_true", help="Run the top candidates for a few steps; write the fastest.")
    t.add_argument("--top", type=int, default=3, help="Candidates to trial (default 3).")
    t.add_argument("--trial-steps", type=int, default=8, help="Optimizer steps per trial (default 8; 3 are warm-up).")
    t.add_argument("--trial-budget-s", type=float, help="Seconds per trial; steps logged by then count.")
    t.add_argument(
        "--model-dir",
        help="What train.py loads for the trials (default: the model, random weights; a directory "
        "without weight files: its architecture, random weights).",
    )
    t.add_argument("--dataset", help="Trial data for train.py (default: synthetic text of --seq-len tokens).")
    t.add_argument("--trial-device", choices=("cuda", "cpu"), default="cuda", help="cpu: DDP trials over gloo.")
    t.add_argument(
        "--train-script", default="train.py", help="The training script trials launch (default: ./train.py)."
    )
    t.add_argument("--calibration-file", help="Measurements file (default $XDG_CACHE_HOME/dist-config-generator/...).")
    t.add_argument("--reset-calibration", action="store_true", help="Delete the calibration file and exit.")


def calibration_path(args):
    from generator.trial.calibration import default_path

    return args.calibration_file or default_path()


def reset(args) -> int:
    from generator.trial.calibration import reset as _reset

    path = calibration_path(args)
    print(f"removed {path}" if _reset(path) else f"no calibration file at {path}")
    return 0


def calibrated(args, engines):
    """Engines whose speed predictions carry this machine's calibration (unchanged when there is none)."""
    from generator.trial import calibration

    return calibration.calibrated_engines(engines, calibration.factors(calibration.load(calibration_path(args))))


def check_trial_args(args) -> None:
    from generator.trial.runner import train_script

    if args.top < 1 or args.trial_steps < 1:
        raise UserError("--top and --trial-steps must be at least 1")
    if args.trial_budget_s is not None and args.trial_budget_s <= 0:
        raise UserError("--trial-budget-s must be positive")
    if args.num_machines > 1:
        raise UserError("--trial runs on this machine only; drop --num-machines or trial one machine's plan")
    if getattr(args, "script", "train.py") != "train.py":
        raise UserError(
            f"--trial launches train.py, so it cannot measure --script {args.script}; drop --trial and run the printed "
            "line (bench/trl_cli.py times TRL's own script that way)"
        )
    train_script(args.train_script)


def check_trial_device(args, topology) -> None:
    """GPU trials need GPUs: with none detected (the plan fell back to a reference machine) the trials would only fail
    one by one, so refuse before running any."""
    explicit = getattr(args, "topo_file", None) or getattr(args, "machine", None)
    if args.trial_device == "cuda" and not explicit and topology.from_catalog:
        raise UserError(
            "--trial measures on this machine's GPUs and no NVIDIA GPU was detected here; run it on the GPU machine, "
            "or pass --trial-device cpu to exercise the trial over gloo"
        )


def run_trial(args, topology, model, request, bandwidth, config_path: str) -> int:
    """Trial the top candidates (raw predictions, so the calibration ratios stay measured/predicted), write the
    fastest with measured and predicted numbers in its header, and append every measurement to the calibration file."""
    from generator.emit import render, write
    from generator.plan.planner import ranked_candidates
    from generator.trial import calibration
    from generator.trial.flow import calibration_records, fastest, header_notes, run_trials
    from generator.trial.loadable import check_loadable
    from generator.trial.runner import TrialOptions, trial_model

    check_trial_args(args)
    check_trial_device(args, topology)
    if args.trial_device == "cpu":  # flex_attention has no CPU backward and Liger's kernels are Triton (GPU only)
        request = replace(request, attention="sdpa" if request.attention == "auto" else request.attention)
        request = replace(request, liger=bool(request.liger))
        request = replace(request, precision="bf16" if request.precision == "auto" else request.precision)  # no fp8
    plans = ranked_candidates(topology, model, request, bandwidth, top=args.top)
    opts = TrialOptions(
        args.trial_steps, args.trial_budget_s, args.model_dir, args.dataset, args.trial_device, args.train_script
    )
    check_loadable(trial_model(plans[0], opts), from_model_dir=bool(args.model_dir))
    results = run_trials(plans, opts)
    records = calibration_records(results, opts)
    if records:
        print(f"measurements appended to {calibration.append(calibration_path(args), records)}")
    best = fastest(results)
    if best is None:
        raise UserError("no trial finished a step (see above); nothing written. Check the output, or lower --top")
    emitted = render(best.plan, config_path, notes=header_notes(results, best, opts))
    written = write(emitted, force=args.force)
    changed = "the planner's first choice" if best is results[0] else "NOT the planner's first choice"
    if args.json:
        from generator.ui.plan_view import plan_to_dict

        out = plan_to_dict(best.plan, emitted.launch_command, config_path)
        out["trial"] = records
        print(json.dumps(out, indent=2))
    else:
        print(f"fastest measured: {changed}; wrote {', '.join(str(p) for p in written)}")
        print(emitted.launch_command)
    return 0
