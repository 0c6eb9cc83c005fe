"""Whether train.py will be able to load the model a trial names, decided before any trial runs: a model it cannot
load fails every candidate the same way, one after another, so the trial refuses up front in one line instead.
Reads the local directory or the Hugging Face cache only; asks the hub (one small file) only when it is reachable."""

from __future__ import annotations

from pathlib import Path

from generator.errors import UserError
from generator.model.hub import hub_offline_reason

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")
"""Any one of these makes a directory loadable by AutoTokenizer."""
FIX = (
    "pass --model-dir DIR, a directory with config.json and the tokenizer (without weight files the trials use "
    "random weights)"
)


def check_loadable(target: str, from_model_dir: bool) -> None:
    """Raise a one-line UserError when train.py could not load `target` (a directory or a hub id)."""
    where = f"--model-dir {target}" if from_model_dir else f"the plan's model {target!r}"
    problem = _problem(target)
    if problem:
        fix = "pass a directory with config.json and the tokenizer" if from_model_dir else FIX
        raise UserError(f"--trial: train.py cannot load {where}: {problem}; {fix}")


def _problem(target: str) -> str | None:
    path = Path(target).expanduser()
    if path.exists() or target.startswith(("/", ".", "~")) or target.count("/") != 1:
        if not path.is_dir():
            return "no such directory" if not path.exists() else "it is a file, not a model directory or hub id"
        if not (path / "config.json").is_file():
            return "the directory has no config.json"
        if not any((path / f).is_file() for f in TOKENIZER_FILES):
            return "the directory has no tokenizer files"
        return None
    return _hub_problem(target)


def _hub_problem(repo_id: str) -> str | None:
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:
        return "huggingface_hub is not installed"
    cached = [try_to_load_from_cache(repo_id, f) for f in ("config.json", "tokenizer_config.json")]
    if all(isinstance(c, str) for c in cached):
        return None
    offline = hub_offline_reason()
    if offline:
        return f"it is not in the Hugging Face cache and the hub is offline ({offline})"
    try:
        hf_hub_download(repo_id, "config.json")
    except Exception as exc:  # missing repo, gated without a token, network: the trial would fail the same way
        return f"the hub does not give its config.json ({type(exc).__name__})"
    return None
