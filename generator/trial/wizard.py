"""The wizard's "run a short trial of the top candidates?" step: the plan the user accepted plus the planner's next
best (same GPU count, method and sequence length), measured on this machine's GPUs; the fastest is what gets written."""

from __future__ import annotations

from dataclasses import replace

from generator.plan.types import Plan, PlanRequest

TOP = 3


def trial_accepted(
    topology, model, request: PlanRequest, plan: Plan, console, phrase=lambda text: text
) -> tuple[Plan, list[str]]:
    """(plan to write, header notes). With no trial finishing a step, the accepted plan and no notes. `phrase` puts
    advice in the asker's words (the wizard's choices instead of `plan --trial`'s flags)."""
    from generator.errors import UserError
    from generator.plan.planner import plan_key, ranked_candidates
    from generator.trial import calibration
    from generator.trial.flow import calibration_records, fastest, header_notes, run_trials
    from generator.trial.loadable import check_loadable
    from generator.trial.runner import TrialOptions, train_script, trial_model

    opts = TrialOptions()
    try:
        train_script(opts.train_script)
        check_loadable(trial_model(plan, opts), from_model_dir=False)
    except UserError as exc:
        console.print(f"No trial: {phrase(str(exc))}. Writing the accepted plan.", highlight=False, markup=False)
        return plan, []
    w = plan.workload
    request = replace(
        request,
        num_gpus=len(plan.gpu_ids),
        method=w.method,
        seq_len=w.seq_len,
        allow_offload=request.allow_offload or plan.strategy.endswith("_offload"),
        strategy="auto",
    )
    others = [p for p in ranked_candidates(topology, model, request, top=TOP + 1) if plan_key(p) != plan_key(plan)]
    plans = [plan, *others][:TOP]
    results = run_trials(plans, opts, say=lambda line: console.print(line, highlight=False, markup=False))
    calibration.append(calibration.default_path(), calibration_records(results, opts))
    best = fastest(results)
    if best is None:
        console.print("No trial finished a step; writing the accepted plan.", highlight=False)
        return plan, []
    return best.plan, header_notes(results, best, opts)
