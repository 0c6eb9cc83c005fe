"""Build model directories for tests and offline benchmarks without downloading anything.

`build_tokenizer(dir)`  a character-level tokenizer (every printable ASCII character is one token) with BOS/EOS/PAD and
                        a chat template, saved as a Hugging Face tokenizer directory.
`build_tiny_mistral(dir)`  that tokenizer plus a tiny random MistralForCausalLM (config.json + model.safetensors).
`build_mistral_7b_config(dir, layers=None)`  Mistral-7B-v0.1's architecture (config.json only) plus the tokenizer:
                        what `train.py --init random` needs on a machine that cannot reach the Hub. `layers` cuts it
                        down to that many decoder layers with the same widths (a full fine-tune whose checkpoint fits
                        a small disk: bench/preempt.py).
`build_preset_config(name, dir, layers)`  any generator preset's architecture (generator/presets/NAME.json, the
                        config.json the planner sizes) or a bench model's (bench/models/NAME.json: a public config
                        no preset and no probe row holds), optionally cut to its first N decoder layers, plus the
                        tokenizer.

    python tests/tiny_model.py tiny OUT_DIR        # or: python tests/tiny_model.py mistral-7b OUT_DIR [--layers 8]
    python tests/tiny_model.py preset mixtral-8x7b OUT_DIR --layers 8
"""

from __future__ import annotations

import argparse
import json
import string
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Mistral-7B-v0.1's config.json values (public model card), so random-init benchmarks size the real architecture.
MISTRAL_7B = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=32768,
    rope_theta=10000.0,
    sliding_window=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)


def build_tokenizer(out_dir: str | Path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in string.printable:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(out_dir))
    return hf


def build_tiny_mistral(out_dir: str | Path, seed: int = 0, **overrides) -> Path:
    """A ~0.2M-parameter Mistral: 2 layers, hidden 64, GQA 4/2 heads, 128-token context."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    out = Path(out_dir)
    tokenizer = build_tokenizer(out)
    cfg = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=None,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = MistralForCausalLM(MistralConfig(**cfg))
    model.save_pretrained(str(out))
    return out


def build_mistral_7b_config(out_dir: str | Path, layers: int | None = None) -> Path:
    from transformers import MistralConfig

    out = Path(out_dir)
    build_tokenizer(out)
    MistralConfig(**{**MISTRAL_7B, **({"num_hidden_layers": layers} if layers else {})}).save_pretrained(str(out))
    return out


def preset_config(name: str, layers: int | None = None) -> dict:
    """The preset's config.json as transformers reads it: provenance keys (`_source`) dropped, the char tokenizer's
    special-token ids, and `num_hidden_layers` cut to `layers` (a model that fits where the whole one does not)."""
    dirs = (REPO / "generator" / "presets", REPO / "bench" / "models")  # presets, then the bench's unseen models
    path = next((d / f"{name}.json" for d in dirs if (d / f"{name}.json").is_file()), None)
    if path is None:
        names = ", ".join(sorted(p.stem for d in dirs for p in d.glob("*.json")))
        raise SystemExit(f"error: no preset or bench model {name!r} ({names})")
    cfg = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    cfg.update(bos_token_id=SPECIALS.index("<s>"), eos_token_id=SPECIALS.index("</s>"), pad_token_id=0)
    if layers is not None:
        if not 1 <= layers <= cfg["num_hidden_layers"]:
            raise SystemExit(f"error: --layers {layers}: {name} has {cfg['num_hidden_layers']} decoder layers")
        cfg["num_hidden_layers"] = layers
        if "max_window_layers" in cfg:  # Qwen2: a layer index, which must stay within the cut model
            cfg["max_window_layers"] = min(cfg["max_window_layers"], layers)
    return cfg


def build_preset_config(name: str, out_dir: str | Path, layers: int | None = None) -> Path:
    from transformers import AutoConfig

    out = Path(out_dir)
    build_tokenizer(out)
    cfg = preset_config(name, layers)
    AutoConfig.for_model(cfg.pop("model_type"), **cfg).save_pretrained(str(out))
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="tests/tiny_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("tiny", "mistral-7b", "preset"))
    ap.add_argument("args", nargs="+", help="OUT_DIR, or for preset: NAME OUT_DIR")
    ap.add_argument("--layers", type=int, default=None, help="mistral-7b and preset: keep the first N decoder layers")
    a = ap.parse_args(argv)
    if a.what == "preset":
        if len(a.args) != 2:
            ap.error("preset takes NAME OUT_DIR")
        out = build_preset_config(a.args[0], a.args[1], a.layers)
    elif len(a.args) != 1 or (a.layers is not None and a.what == "tiny"):
        ap.error(f"{a.what} takes OUT_DIR only" + (" (--layers goes with mistral-7b or preset)" if a.layers else ""))
    elif a.layers is not None and a.layers < 1:
        ap.error("--layers takes a positive count")
    else:
        out = build_tiny_mistral(a.args[0]) if a.what == "tiny" else build_mistral_7b_config(a.args[0], a.layers)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
