"""train.py's pure parts, in-process: batch arithmetic, dataset formats and loss masks, packing with correct attention
boundaries, deterministic data order, atomic checkpoint bookkeeping, and the one-line user errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.errors import UserError
from training.args import grad_accum_steps, parse_args
from training.checkpoints import (
    CKPT_PREFIX,
    STATE_FILE,
    TMP_PREFIX,
    check_free_space,
    check_output_dir,
    check_resume_compatible,
    complete_checkpoints,
    find_resume,
    latest_checkpoint,
    publish_checkpoint,
    remove_stale_temporaries,
)
from training.data import BlockStream, detect_format, encode_chat, encode_pair, pack_blocks
from training.distributed import build_on_gpu, outside_zero_init
from training.errors import EXIT_USER_ERROR
from training.model import load_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny_model import build_tiny_mistral

    return build_tiny_mistral(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tok(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny))


# -- batch arithmetic -------------------------------------------------------------------------------------------------
def test_grad_accum_matches_generator_arithmetic():
    assert grad_accum_steps(16, 1, 2) == 8
    assert grad_accum_steps(16, 2, 8) == 1
    with pytest.raises(UserError, match=r"--global-batch 12 is not divisible by --micro-batch 2 x 4 processes = 8"):
        grad_accum_steps(12, 2, 4)


# -- formats and masks ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("columns", "kind"),
    [
        (["id", "messages"], ("chat", ("messages",))),
        (["conversations"], ("chat", ("conversations",))),
        (["instruction", "input", "output"], ("pair", ("instruction", "output"))),
        (["prompt", "completion"], ("pair", ("prompt", "completion"))),
        (["text", "meta"], ("text", ("text",))),
    ],
)
def test_detect_format(columns, kind):
    assert detect_format(columns) == kind


def test_dataset_without_usable_column_is_a_user_error():
    with pytest.raises(UserError, match=r"no usable column \(found \['a', 'b'\]\)"):
        detect_format(["b", "a"])


def test_instruction_prompt_is_masked_response_trained(tok):
    ids, labels = encode_pair(tok, "add 2 and 3", "5")
    trained = [t for t, y in zip(ids, labels, strict=True) if y != -100]
    assert tok.decode(trained) == "5</s>"
    assert tok.decode(ids).startswith("<s>### Instruction:\nadd 2 and 3")


def test_chat_trains_only_assistant_turns(tok):
    msgs = [
        {"role": "user", "content": "reverse: abc"},
        {"role": "assistant", "content": "cba"},
        {"role": "user", "content": "add 1 and 1"},
        {"role": "assistant", "content": "2"},
    ]
    ids, labels = encode_chat(tok, msgs)
    assert tok.decode(ids) == tok.apply_chat_template(msgs, tokenize=False)
    trained = tok.decode([t if y != -100 else tok.convert_tokens_to_ids("|") for t, y in zip(ids, labels, strict=True)])
    # Everything but the two assistant answers (+ their end-of-turn) is masked; "|" marks masked positions here.
    assert trained.replace("|", "") == "cba</s>\n2</s>\n"
    sharegpt = [{"from": "human", "value": "reverse: abc"}, {"from": "gpt", "value": "cba"}]
    assert encode_chat(tok, sharegpt) == encode_chat(tok, msgs[:2])


def test_packing_resets_positions_and_masks_example_starts():
    ids = [[1, 10, 11], [1, 20, 21, 22], [1, 30]]
    labels = [list(x) for x in ids]
    for y in labels:
        y[0] = -100
    x, y, pos, mask = pack_blocks(ids, labels, 4, 0, pack=True)
    assert mask is None and x.tolist() == [[1, 10, 11, 1], [20, 21, 22, 1]]  # 9 tokens -> 2 blocks, tail dropped
    assert pos.tolist() == [[0, 1, 2, 0], [1, 2, 3, 0]]  # the straddling example continues its positions
    assert y.tolist() == [[-100, 10, 11, -100], [20, 21, 22, -100]]
    x, y, pos, mask = pack_blocks(ids, labels, 4, 0, pack=False)
    assert x.tolist()[0] == [1, 10, 11, 0] and mask.tolist()[0] == [1, 1, 1, 0] and y.tolist()[0][3] == -100


def test_packed_examples_do_not_attend_across_boundaries(tiny):
    """The second example's logits inside a packed row equal its logits alone: SDPA got a block-diagonal mask."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny), attn_implementation="sdpa").eval()
    a, b = torch.tensor([[1, 40, 41, 42, 43]]), torch.tensor([[1, 50, 51, 52]])
    packed = torch.cat([a, b], dim=1)
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]])
    with torch.no_grad():
        together = model(input_ids=packed, position_ids=pos, use_cache=False).logits[:, 5:]
        alone = model(input_ids=b, use_cache=False).logits
        leaky = model(input_ids=packed, use_cache=False).logits[:, 5:]
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(leaky, alone, atol=1e-3)  # without the reset the boundary leaks


def test_random_init_in_fp32_sits_on_the_bf16_grid(tiny):
    """--init random with fp32 masters starts from bf16-representable weights, as DeepSpeed's masters (built from its
    bf16 module) and a bf16 checkpoint do, so every strategy starts from the same masters."""
    import torch
    from transformers import AutoConfig

    args = parse_args(["--model", str(tiny), "--init", "random", "--load-dtype", "fp32"])
    model = load_model(args, AutoConfig.from_pretrained(str(tiny)), use_cuda=False)
    params = list(model.parameters())
    assert all(p.dtype == torch.float32 for p in params)
    assert all(torch.equal(p, p.to(torch.bfloat16).float()) for p in params)
    assert any(p.std() > 0 for p in params)  # still random, not zeroed


def test_flex_attention_sees_the_same_packed_boundaries_as_sdpa(tiny):
    """--attn-implementation flex_attention (a GPU throughput lever) must keep packing's block-diagonal attention:
    forward logits on a packed row equal SDPA's. Training with it needs a GPU (torch has no CPU backward for it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    sdpa = AutoModelForCausalLM.from_pretrained(str(tiny), attn_implementation="sdpa").eval()
    flex = AutoModelForCausalLM.from_pretrained(str(tiny), attn_implementation="flex_attention").eval()
    ids = torch.tensor([[1, 40, 41, 42, 43, 1, 50, 51, 52]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]])
    with torch.no_grad():
        a = sdpa(input_ids=ids, position_ids=pos, use_cache=False).logits
        b = flex(input_ids=ids, position_ids=pos, use_cache=False).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    args = parse_args(["--model", str(tiny), "--attn-implementation", "flex_attention"])
    with pytest.raises(UserError, match="no CPU backward"):
        load_model(args, AutoConfig.from_pretrained(str(tiny)), use_cuda=False)


def test_data_order_is_a_seeded_permutation_per_epoch_and_resumable():
    import torch

    blocks = (torch.arange(5).view(5, 1), torch.zeros(5, 1), torch.zeros(5, 1), None)
    full = BlockStream(blocks, seed=3, start=0, length=15)
    order = [int(full[i]["input_ids"]) for i in range(15)]
    for epoch in range(3):
        assert sorted(order[5 * epoch : 5 * epoch + 5]) == [0, 1, 2, 3, 4]  # each epoch sees every block once
    assert order[:5] != order[5:10]  # and reshuffles
    resumed = BlockStream(blocks, seed=3, start=7, length=8)
    assert [int(resumed[i]["input_ids"]) for i in range(8)] == order[7:]
    assert [resumed[i]["sample_id"] for i in range(8)] == list(range(7, 15))


@pytest.mark.parametrize("warmup,total", [(0, 7), (1, 4), (3, 20), (10, 10)])
def test_the_schedule_is_transformers_cosine_with_warmup(warmup, total):
    """train.py runs transformers' schedule on torch's LambdaLR (importing transformers' pulls in peft and
    bitsandbytes): the learning rate at every step, and past the end, is the one transformers gives."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    from train import lr_factor

    def lrs(make):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
        sched, seen = make(opt), []
        for _ in range(total + 3):
            seen.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return seen

    ours = lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: lr_factor(s, warmup, total)))
    assert ours == pytest.approx(lrs(lambda o: get_cosine_schedule_with_warmup(o, warmup, total)), abs=1e-12)
    assert max(ours) == pytest.approx(0.3) and (ours[total] == 0.0 or warmup == total)  # not a constant schedule


# -- checkpoint bookkeeping -------------------------------------------------------------------------------------------
def _fake_save(out: Path, step: int, keep_last: int = 2) -> Path:
    tmp = out / f"{TMP_PREFIX}{step:08d}"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"w" * 10)
    publish_checkpoint(tmp, out / f"{CKPT_PREFIX}{step:08d}", {"step": step}, keep_last)
    return out / f"{CKPT_PREFIX}{step:08d}"


def test_publish_renames_points_latest_and_prunes_after(tmp_path):
    for step in (2, 4, 6):
        _fake_save(tmp_path, step)
    assert [d.name for d in complete_checkpoints(tmp_path)] == ["step-00000004", "step-00000006"]
    assert (tmp_path / "latest").read_text().strip() == "step-00000006"
    assert latest_checkpoint(tmp_path).name == "step-00000006"
    assert json.loads((tmp_path / "step-00000006" / STATE_FILE).read_text())["step"] == 6
    assert not list(tmp_path.glob(".tmp-*"))


def test_partial_checkpoint_is_never_resumed_and_is_cleaned(tmp_path):
    _fake_save(tmp_path, 2)
    partial = tmp_path / f"{TMP_PREFIX}00000004"  # a save killed before publish
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    assert latest_checkpoint(tmp_path).name == "step-00000002"
    unsealed = tmp_path / "step-00000009"  # a directory without trainer_state.json is not a checkpoint either
    unsealed.mkdir()
    assert latest_checkpoint(tmp_path).name == "step-00000002"
    (tmp_path / "latest").write_text("step-00000007\n")  # stale pointer: fall back to the newest complete one
    assert latest_checkpoint(tmp_path).name == "step-00000002"
    assert remove_stale_temporaries(tmp_path) == [partial] and not partial.exists()


def test_resaving_a_step_replaces_it_atomically(tmp_path):
    _fake_save(tmp_path, 2)
    _fake_save(tmp_path, 2)
    assert sorted(d.name for d in tmp_path.iterdir()) == ["latest", "step-00000002"]


def test_output_dir_checks(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match=r"output directory '.*file/run' is not writable"):
        check_output_dir(str(blocker / "run"))
    monkeypatch.setenv("TRAIN_TEST_FREE_BYTES", str(10**9))
    check_free_space(tmp_path, 5 * 10**8, "one checkpoint")
    with pytest.raises(UserError, match=r"not enough disk space in '.*': one checkpoint needs about 2.00 GB, 1.00 GB"):
        check_free_space(tmp_path, 2 * 10**9, "one checkpoint")


def test_resume_refuses_changed_data_order(tmp_path):
    args = parse_args(["--output-dir", str(tmp_path), "--global-batch", "8", "--max-steps", "10"])
    state = {"step": 4, "global_batch": 16, "seq_len": args.seq_len, "seed": args.seed}
    with pytest.raises(UserError, match=r"written with --global-batch 16, this run has 8"):
        check_resume_compatible(state, args, tmp_path)
    _fake_save(tmp_path, 4)
    with pytest.raises(UserError, match=r"already holds checkpoint step-00000004; pass --resume"):
        find_resume(args, tmp_path)


# -- user errors through the real entry point ---------------------------------------------------------------------
def _main_error(capsys, argv) -> str:
    import train  # the script's entry point, importable because its main() is guarded

    assert train.main(argv) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err  # (transformers' own progress bars may precede the one error line)
    return err.splitlines()[-1]


@pytest.fixture()
def accel_reset():
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)


def test_user_errors_are_one_line(tiny, tmp_path, capsys, accel_reset):
    common = ["--model", str(tiny), "--seq-len", "32", "--micro-batch", "1", "--global-batch", "2", "--max-steps", "2"]
    common += ["--output-dir", str(tmp_path / "o"), "--no-export"]
    assert "max_position_embeddings 128" in _main_error(capsys, [*common[:2], "--seq-len", "256", *common[4:]])
    assert "cannot load model '/nonexistent/m'" in _main_error(capsys, ["--model", "/nonexistent/m", *common[2:]])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"foo": 1}\n')
    assert "no usable column (found ['foo'])" in _main_error(capsys, [*common, "--dataset", str(bad)])
    good = ROOT / "recipes" / "data" / "synthetic_text.jsonl"
    assert "needs a CUDA GPU" in _main_error(capsys, [*common, "--method", "qlora", "--dataset", str(good)])
    assert "cannot load dataset" in _main_error(capsys, [*common, "--dataset", str(tmp_path / "missing.jsonl")])


def test_cli_user_error_exits_2_without_traceback(tmp_path):
    """Through a real interpreter: the world-size check fires before torch is even imported."""
    env = {"WORLD_SIZE": "4", "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, str(ROOT / "train.py"), "--global-batch", "6", "--output-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "train.py: error: --global-batch 6 is not divisible by --micro-batch 1 x 4 processes = 4; use a multiple of 4 "
        "or change the config's num_processes"
    )


@pytest.mark.parametrize(
    ("strategy", "init", "efficient_loading", "free_gb", "expect"),
    [
        ("ddp", "pretrained", False, 140, True),
        ("fsdp", "pretrained", True, 140, False),  # rank 0 reads the checkpoint on the host
        ("zero3", "pretrained", False, 140, False),  # zero.Init partitions the weights as they load
        ("zero3", "random", False, 140, True),  # built whole on the GPU like every other strategy
        ("zero3", "random", False, 60, False),  # 7B in fp32 (29 GB) over a third of the free memory: zero.Init
        ("fsdp", "random", True, 140, True),
        ("fsdp", "random", True, 60, False),
        ("zero3_offload", "random", False, 140, False),
        ("zero1", "random", False, 10, True),  # unsharded strategies need the whole model on the GPU anyway
    ],
)
def test_where_the_model_is_built(monkeypatch, strategy, init, efficient_loading, free_gb, expect):
    import types

    import torch
    from transformers import MistralConfig

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (free_gb * 1e9, 141e9))
    args = types.SimpleNamespace(init=init, model="mistral-7b", load_dtype="fp32")
    config = MistralConfig()  # Mistral-7B's shape, 7.24B parameters
    plugin = types.SimpleNamespace(cpu_ram_efficient_loading=efficient_loading) if strategy == "fsdp" else None
    assert build_on_gpu(args, config, strategy, plugin) is expect


def test_outside_zero_init_hides_zero3_from_transformers_then_restores_it(monkeypatch):
    """Faked HfDeepSpeedConfig (the real one needs DeepSpeed installed): transformers decides zero.Init from the
    registered config's stage alone, so the build must see no config and prepare must find it registered again."""
    import types
    import weakref

    from transformers.integrations import deepspeed as hf_ds

    class Stage3:
        def is_zero3(self):
            return True

    held = Stage3()
    plugin = types.SimpleNamespace(set_deepspeed_weakref=lambda: setattr(hf_ds, "_hf_deepspeed_config_weak_ref", ref))
    ref = weakref.ref(held)
    monkeypatch.setattr(hf_ds, "_hf_deepspeed_config_weak_ref", ref)
    accelerator = types.SimpleNamespace(state=types.SimpleNamespace(deepspeed_plugin=plugin))
    assert hf_ds.is_deepspeed_zero3_enabled()
    with pytest.raises(RuntimeError), outside_zero_init(accelerator):
        assert not hf_ds.is_deepspeed_zero3_enabled()
        raise RuntimeError("a failed build still restores the config")
    assert hf_ds.is_deepspeed_zero3_enabled()
