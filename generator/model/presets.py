"""Bundled model configs (generator/presets/*.json, config.json-like) and the hub ids they stand for offline."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path, PurePath

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"

PRESETS: tuple[str, ...] = tuple(sorted(p.stem for p in PRESET_DIR.glob("*.json")))

# Hub ids (lower-cased) whose config.json has the same dimensions as a preset, so they resolve without a network.
HUB_IDS = {
    "mistralai/mistral-7b-v0.1": "mistral-7b",
    "mistralai/mistral-7b-instruct-v0.1": "mistral-7b",
    "meta-llama/meta-llama-3-8b": "llama-3-8b",
    "meta-llama/meta-llama-3-8b-instruct": "llama-3-8b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "meta-llama/llama-2-7b-chat-hf": "llama-2-7b",
    "meta-llama/llama-2-13b-hf": "llama-2-13b",
    "meta-llama/llama-2-13b-chat-hf": "llama-2-13b",
    "meta-llama/meta-llama-3-70b": "llama-3-70b",
    "meta-llama/meta-llama-3-70b-instruct": "llama-3-70b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
}

# The hub id each preset stands for, spelled as on the hub: what train.py is given when a plan names a preset.
PRESET_HUB_IDS = {
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b": "meta-llama/Llama-2-13b-hf",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
}


@cache
def _read(name: str) -> str:
    return (PRESET_DIR / f"{name}.json").read_text()


def preset_config(name: str) -> dict:
    """The preset's config dict (a fresh copy each call)."""
    return json.loads(_read(name))


CHECKPOINT_PLACEHOLDER = "your_model_dir"
"""What a launch line names as the model where --model was a config file alone (see launch_model)."""


def checkpoint_name(name: str) -> str | None:
    """What a script loads for the model the plan read as `name`: a preset's hub id, a directory or hub id as given,
    the directory of a file named config.json (a checkpoint's layout). None for any other .json file: it sizes the
    architecture but holds no weights or tokenizer, which every script's from_pretrained needs."""
    if name in PRESET_HUB_IDS:
        return PRESET_HUB_IDS[name]
    if name.endswith(".json"):
        path = PurePath(name)
        return str(path.parent) if path.name == "config.json" else None
    return name


def launch_model(name: str) -> str:
    """The model a printed launch line names: checkpoint_name, or a placeholder the plan's reasons explain."""
    return checkpoint_name(name) or CHECKPOINT_PLACEHOLDER
