"""The wizard: ask, plan, show the table, let the user accept or override, then write atomically. Ctrl-C anywhere
raises KeyboardInterrupt before anything is written (the CLI turns it into exit 130)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from generator.errors import UserError
from generator.wizard import questions as q
from generator.wizard import review as r
from generator.wizard.phrasing import in_wizard_words, plan_in_wizard_words
from generator.wizard.precision import PRECISION, for_method, fp8_gain
from generator.wizard.runner import ask, run_questions
from generator.wizard.validators import picked_gpus


def detect_live():
    """This machine's topology, or None when there is no GPU (the topology engine then falls back to a reference
    machine, which the wizard offers in its list instead of calling it "this machine")."""
    from generator.topology import load_topology

    try:
        live = load_topology()
    except UserError:
        return None
    return live if live.source in ("nvml", "nvidia-smi") else None


def load_machine(answers, live):
    from generator.topology import load_topology

    if answers["machine"] == q.LIVE:
        return live
    if answers["machine"] == q.FILE:
        return load_topology(topo_file=str(Path(answers["topo_file"]).expanduser()))
    return load_topology(machine=answers["machine"])


def run_wizard(console=None) -> int:
    from rich.console import Console

    from generator.model import PRESETS, load_model
    from generator.topology import REFERENCE_MACHINES

    console = console or Console()
    live = detect_live()
    facts = {"_live": live, "_machines": REFERENCE_MACHINES, "_presets": tuple(PRESETS)}
    answers = run_questions(q.QUESTIONS, facts)
    topology = retry(
        console, lambda: load_machine(answers, live), answers, q.TOPO_FILE, lambda: answers["machine"] == q.FILE
    )
    model = retry(console, lambda: load_model(answers["model"]), answers, q.MODEL)
    gain = fp8_gain(topology, model, q.request_from_answers(answers))
    if gain is not None:  # fp8 is offered only where this configuration can run it (generator/wizard/precision.py)
        answers[PRECISION.key] = ask(PRECISION, {"_gain": gain})
    plan = review(topology, model, q.request_from_answers(answers), console)
    if plan is None:
        console.print("Nothing written.")
        return 0
    notes: list[str] = []
    if answers.get("trial"):  # asked only when this machine's GPUs were detected
        from generator.trial.wizard import trial_accepted

        request = replace(q.request_from_answers(answers), precision=plan.workload.precision)  # after any rescue
        plan, notes = trial_accepted(topology, model, request, plan, console, phrase=in_wizard_words)
    return write_config(plan, console, notes)


def retry(console, load, answers, spec, can_retry=lambda: True):
    """`load()`; on a user mistake (unreadable file, unknown model) say why and ask `spec` again."""
    while True:
        try:
            return load()
        except UserError as exc:
            if not can_retry():
                raise
            console.print(f"[red]{escape(in_wizard_words(str(exc)))}[/]", highlight=False)
            answers[spec.key] = ask(spec, answers)


def review(topology, model, request, console):
    """Plan, show, and re-plan on the user's overrides until they accept (-> Plan) or quit (-> None)."""
    from generator.plan.candidates import free_gpus
    from generator.plan.planner import make_plan
    from generator.ui.plan_view import print_plan

    while True:
        try:
            plan = make_plan(topology, model, request)
        except UserError as exc:
            console.print(f"[red]{escape(in_wizard_words(str(exc)))}[/]", highlight=False)
            gpus = request.num_gpus or len(free_gpus(topology, request))
            split = r.batches_that_split(request, gpus * request.num_machines)
            fix = ask(r.RESCUE, {"_request": request, "_gpus": gpus, "_split": split})
            if fix == "quit":
                return None
            request = _rescued(request, fix)
            continue
        print_plan(plan_in_wizard_words(plan), "", [], console=console)
        action = ask(r.REVIEW, {"_request": request})
        if action == "quit":
            return None
        if action == "strategy":
            request = replace(request, strategy=ask(r.STRATEGY, {"_plan": plan}))
        elif action == "gpus":
            free = range(1, len(free_gpus(topology, request)) + 1)
            request = replace(request, num_gpus=ask(r.GPU_COUNT, {"_free": free}))
        elif action == "ids":
            ids = topology.indices
            spec = replace(r.GPU_IDS, validate=lambda chosen, ids=ids: picked_gpus(chosen, ids))
            request = r.with_gpu_ids(request, ids, ask(spec, {"_topology": topology, "_plan": plan}))
        elif action == "offload":
            request = replace(request, allow_offload=True)
        elif not plan.forced or ask(r.WRITE_ANYWAY, {}):
            return plan


def _rescued(request, fix: str):
    if fix.startswith("batch:"):
        return replace(request, global_batch=int(fix.removeprefix("batch:")))
    if fix == "offload":
        return replace(request, allow_offload=True)
    if fix == "shorter":
        return replace(request, seq_len=max(1, request.seq_len // 2))
    return for_method(request, fix)


def write_config(plan, console, notes=()) -> int:
    from generator.emit import render, write
    from generator.fileio import check_writable

    while True:
        path = ask(r.OUTPUT, {})
        overwrite = Path(path).is_file()
        if overwrite and not ask(r.OVERWRITE, {}):
            continue
        try:
            check_writable(path, force=overwrite)
            break
        except UserError as exc:
            console.print(f"[yellow]{exc}[/]", highlight=False)
    emitted = render(plan, path, notes=notes)
    written = write(emitted, force=overwrite)
    console.print(f"[green]wrote[/] {', '.join(str(p) for p in written)}", highlight=False)
    console.print("[bold]Launch it with:[/]")
    console.print(emitted.launch_command, soft_wrap=True, highlight=False, markup=False)
    return 0
