"""The on-disk counts of models built on the meta device (generator/model/meta_cache.py): the second plan of an
architecture outside the llama family imports neither torch nor transformers and sizes it the same; a changed config
or a damaged entry is built again, never answered stale; an unwritable cache still plans; a refused config is never
cached; counts taken without the compiled block's serve no request for them, and are priced as no compiled layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.errors import UserError
from generator.model import load_model

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 512, "n_positions": 256}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "dist-config-generator" / "meta"


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_second_load_imports_neither_torch_nor_transformers_and_sizes_the_same(tmp_path, cache):
    model = write_config(tmp_path / "gpt2", GPT2)
    first = load_model(str(model))
    assert len(list(cache.glob("*.json"))) == 1
    code = (
        "import json, sys\n"
        "from dataclasses import asdict\n"
        "from generator.model import load_model\n"
        f"spec = load_model({str(model)!r})\n"
        "heavy = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]\n"
        "print(json.dumps({'heavy': heavy, 'spec': asdict(spec)}, default=list))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    second = json.loads(out.stdout)
    assert second["heavy"] == []
    assert second["spec"] == json.loads(json.dumps(first.__dict__, default=list))


def test_a_changed_config_is_built_again(tmp_path, cache):
    two = load_model(str(write_config(tmp_path / "a", GPT2)), compiled=False)
    three = load_model(str(write_config(tmp_path / "b", {**GPT2, "n_layer": 3})), compiled=False)
    assert three.num_layers == 3 and three.params_total > two.params_total
    assert len(list(cache.glob("*.json"))) == 2


def test_a_damaged_entry_is_built_again_and_replaced(tmp_path, cache):
    model = write_config(tmp_path / "gpt2", GPT2)
    expected = load_model(str(model), compiled=False)
    (entry,) = cache.glob("*.json")
    entry.write_text('{"total": 1')  # cut off mid-write by hand
    assert load_model(str(model), compiled=False) == expected
    assert json.loads(entry.read_text())["total"] == expected.params_total


def test_an_unwritable_cache_still_plans(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    spec = load_model(str(write_config(tmp_path / "gpt2", GPT2)), compiled=False)
    assert spec.num_layers == 2 and spec.decoder_layer_cls == "GPT2Block"


def test_a_refused_config_is_not_cached(tmp_path, cache):
    model = write_config(tmp_path / "bad", {"model_type": "no-such-architecture", "hidden_size": 64})
    for _ in range(2):
        with pytest.raises(UserError, match="cannot build model_type 'no-such-architecture'"):
            load_model(str(model))
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_plan_says_once_what_the_first_build_waits_for_and_nothing_of_torchaos_import(tmp_path):
    """`plan` of an architecture not yet counted: one note on stderr before the seconds the build takes, none the
    second time; the plan's stdout untouched; torchao's import notes (transformers imports it where installed) not
    shown on the planning path. A config file alone, as a user sizing an architecture passes it."""
    config = tmp_path / "gpt2.json"
    config.write_text(json.dumps({**GPT2, "bos_token_id": 0, "eos_token_id": 0}))  # a consistent config: no notes
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cmd = [sys.executable, "-m", "generator", "plan", "--model", str(config), "--machine", "h200-sxm-2",
           "--method", "lora", "--seq-len", "128", "--json", "--output", str(tmp_path / "p.yaml"),
           "--force"]  # fmt: skip
    runs = [subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:]
    first, second = (r.stderr.splitlines() for r in runs)
    assert first == [f"sizing {config}: building its gpt2 layers on the meta device with transformers (no weights; "
                     "once, then cached)"]  # fmt: skip
    assert second == []
    assert json.loads(runs[0].stdout)["strategy"] == json.loads(runs[1].stdout)["strategy"]


def test_counts_without_the_compiled_block_never_answer_for_them(tmp_path, cache):
    """Sized without its compiled block (a caller that prices no compiled layer), a model's entry serves no request
    for the compiled counts, which are then built (the eager ones agree); an entry with them serves a request without,
    with no build. Pricing a compiled layer from counts taken without them is refused, not priced by the rule for a
    block that cannot be traced."""
    from dataclasses import replace

    from generator.estimate.activations import activation_terms
    from generator.estimate.types import Workload

    model = write_config(tmp_path / "gpt2", GPT2)
    lite = load_model(str(model), compiled=False)
    assert not lite.layer_saved.compiled_counted and lite.layer_saved.compiled is None
    full = load_model(str(model))
    assert full.layer_saved.compiled_counted and full.layer_saved.compiled is not None
    assert len(list(cache.glob("*.json"))) == 2
    untraced = {f: None for f in ("compiled", "compiled_frozen", "compiled_fp32", "compiled_fp8", "compiled_fp8_fp32")}
    assert full.layer_saved._replace(compiled_counted=False, **untraced) == lite.layer_saved
    assert replace(full, layer_saved=None) == replace(lite, layer_saved=None)

    for entry in cache.glob("*.json"):
        if not json.loads(entry.read_text())["saved"][-1]:  # the entry without: gone, so only the full one can answer
            entry.unlink()
    assert load_model(str(model), compiled=False) == full
    assert len(list(cache.glob("*.json"))) == 1

    compiled = Workload(seq_len=128, micro_batch=1, method="full", compiled_layers=True)
    assert activation_terms(full, compiled, "ddp")
    with pytest.raises(ValueError, match="sized without its compiled layer's counts"):
        activation_terms(lite, compiled, "ddp")
    assert activation_terms(lite, replace(compiled, compiled_layers=False), "ddp")


@pytest.mark.parametrize("script", ["trainer", "custom"])
def test_check_under_a_script_that_compiles_no_layer_sizes_without_the_compiled_block(
    tmp_path, capsys, monkeypatch, script
):
    """`check` under TRL's or a plain loop's script prices no compiled layer: it sizes an architecture without the
    compiled block's counts (a tenth of the time), and its verdict is the one it gives with them."""
    from generator.cli import main

    model = write_config(tmp_path / "gpt2", GPT2)
    config = tmp_path / "c.yaml"
    argv = ["--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora", "--seq-len", "128", "--script", script]
    assert main(["plan", "--model", str(model), *argv, "--output", str(config), "--force", "--json"]) == 0
    capsys.readouterr()
    check = ["check", str(config), "--model", str(model), "--machine", "h200-sxm-2", "--script", script, "--json"]
    with_compiled = main(check), json.loads(capsys.readouterr().out)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh"))
    assert (main(check), json.loads(capsys.readouterr().out)) == with_compiled
    (entry,) = (tmp_path / "fresh" / "dist-config-generator" / "meta").glob("*.json")
    assert json.loads(entry.read_text())["saved"][-1] is False
