"""`plan` over every causal-LM type the installed transformers knows, each with that type's default config (most are a
released checkpoint's shape): does it plan a LoRA run on 8x H200 (at plan's default length: 4,096 tokens, or the
model's positions where fewer), is it too large for that (said in one line), or is it refused in one line (and why).
CPU only, about two minutes with the meta cache cold (each model's own layer is counted as it is sized). The README's
"Which models" counts come from this file's output.

    python bench/scripts/model_types.py --out bench/results/cpu-model-types-<date>.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def plan_one(model_type: str, workdir: Path) -> tuple[str, str]:
    """(outcome, detail): plan and the chosen strategy, too-large or refused and the error line, or
    no-default-config where transformers cannot create one."""
    from transformers import AutoConfig

    from generator.cli import main

    try:
        config = AutoConfig.for_model(model_type).to_dict()
    except Exception as exc:  # transformers' own validation of its defaults
        return "no-default-config", str(exc).strip().splitlines()[0][:200]
    config["model_type"] = model_type
    directory = workdir / model_type
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, default=str))
    out, err = io.StringIO(), io.StringIO()
    # no --seq-len: plan's default, 4,096 tokens or the model's positions where fewer
    argv = ["plan", "--model", str(directory), "--machine", "hgx-h200-8", "--method", "lora", "--json",
            "--output", str(workdir / f"{model_type}.yaml"), "--force"]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    errors = [line for line in err.getvalue().splitlines() if line.startswith("error:")]
    if code == 0:
        return "plan", json.loads(out.getvalue())["strategy"]
    line = (errors[0] if errors else err.getvalue().strip()[-200:]).replace(str(directory), model_type)
    return ("too-large" if "does not fit" in line else "refused"), line[:300]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        results = {t: plan_one(t, Path(tmp)) for t in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)}
    counts = Counter(outcome for outcome, _ in results.values())
    doc = {
        "what": "plan --method lora --machine hgx-h200-8 for each causal-LM type's default config "
        "(bench/scripts/model_types.py)",
        "date": time.strftime("%Y-%m-%d"),
        "transformers": transformers.__version__,
        "counts": dict(counts),
        "seconds": round(time.time() - start, 1),
        "results": {t: {"outcome": o, "detail": d} for t, (o, d) in results.items()},
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"transformers {transformers.__version__}: {len(results)} types, {dict(counts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
