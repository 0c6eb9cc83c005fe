"""Checks of the wizard's answers, each run when the user presses Enter at its prompt: True, or one line saying
what is wrong, shown under the prompt until the answer is fixed."""

from __future__ import annotations

from pathlib import Path


def positive_int(text: str) -> bool | str:
    return text.strip().isdigit() and int(text) > 0 or "a whole number above 0"


def auto_or_positive_int(text: str) -> bool | str:
    return text.strip() == "auto" or positive_int(text) is True or 'a whole number above 0, or "auto"'


def positive_number(text: str) -> bool | str:
    try:
        return float(text) > 0 or "a bandwidth above 0 (GB/s)"
    except ValueError:
        return "a bandwidth in GB/s, e.g. 40"


def existing_file(text: str) -> bool | str:
    return Path(text.strip()).expanduser().is_file() or "no such file"


def readable_topology(text: str) -> bool | str:
    """The file parses as a topology, with the parser `--topo-file` uses: a binary or garbled file is refused at its
    prompt, with the parser's own reason, instead of after every other question."""
    from generator.errors import UserError
    from generator.topology import load_topology

    if (found := existing_file(text)) is not True:
        return found
    try:
        load_topology(topo_file=str(Path(text.strip()).expanduser()))
    except UserError as exc:
        return str(exc)
    return True


def known_model(text: str) -> bool | str:
    """The model resolves as `plan --model` resolves it (preset, directory, hub id; offline-aware): an unknown or
    unreachable hub id is refused at its prompt."""
    from generator.errors import UserError
    from generator.model import load_model

    if not text.strip():
        return "type a preset name, a hub id or a path"
    try:
        load_model(text.strip(), compiled=False)  # whether it sizes: the compiled counts wait for the script's answer
    except UserError as exc:
        return str(exc)
    return True


def picked_gpus(chosen: list[int], ids: tuple[int, ...]) -> bool | str:
    if not chosen:
        return "tick at least one GPU (space ticks, Enter accepts)"
    unknown = sorted(set(chosen) - set(ids))
    return not unknown or f"GPU(s) {unknown} are not on this machine (it has {list(ids)})"
