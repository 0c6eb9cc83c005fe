"""Which parameters of 3 or more dimensions each causal-LM type of the installed transformers holds, and which of them
the sizing takes for fused MoE experts (generator/model/config_dims.is_expert_tensor: [experts, out, in] with
`experts` the config's routed count). Each type's default config, built on the meta device (no memory, no weights).
CPU only, about a minute.

Why: the rule was rank alone (3 or more dimensions, neither of the first two 1) until 2026-12-05, which took
RecurrentGemma's RG-LRU gates for experts (so its layer count averaged over blocks that hold no attention and found
none), and a vision tower's patch embedding or a convolution for experts wherever one is 3-D or 4-D. This file lists,
for every type with such a parameter, what the config names as its expert count, the tensors taken as experts and
those left out, so a type whose experts are missed (a count under a key EXPERT_COUNT_KEYS lacks) shows here.

    python bench/scripts/experts_scan.py --out bench/results/cpu-experts-scan-<date>.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def scan_one(model_type: str) -> dict | None:
    """{experts, taken, left} for a type holding any parameter of 3 or more dimensions (shapes by leaf name, once
    each), None for one without or whose default config transformers cannot build."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.model.config_dims import expert_count, is_expert_tensor

    try:
        config = AutoConfig.for_model(model_type)
        with init_empty_weights(include_buffers=True):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # transformers' own checks of a default config: the type is left out, as plan refuses it
        return None
    experts = expert_count(config.get_text_config(decoder=True))
    taken, left = set(), set()
    for name, p in model.named_parameters():
        if len(p.shape) >= 3:
            (taken if is_expert_tensor(p.shape, experts) else left).add((name.rsplit(".", 1)[-1], tuple(p.shape)))
    if not taken and not left:
        return None
    return {"experts": experts, "taken": sorted(map(list, taken)), "left": sorted(map(list, left))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    start = time.time()
    scanned = {t: scan_one(t) for t in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)}
    found = {t: r for t, r in scanned.items() if r is not None}
    moe = sorted(t for t, r in found.items() if r["taken"])
    # an MoE config whose tensors none match would be sized dense: listed apart, so a miss is seen
    missed = sorted(t for t, r in found.items() if r["experts"] > 1 and not r["taken"])
    other = sorted(t for t, r in found.items() if r["left"] and not r["experts"])
    doc = {
        "what": "parameters of 3 or more dimensions of each causal-LM type's default config, built on meta, and which "
        "generator/model/config_dims.is_expert_tensor takes for fused experts (bench/scripts/experts_scan.py)",
        "date": time.strftime("%Y-%m-%d"),
        "transformers": transformers.__version__,
        "seconds": round(time.time() - start, 1),
        "moe_types": moe,
        "expert_count_but_no_expert_tensor": missed,
        "dense_types_with_such_tensors": other,
        "types": found,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"transformers {transformers.__version__}: {len(moe)} MoE types, {len(other)} dense types with 3-D+ weights "
        f"not taken for experts, {len(missed)} with an expert count and no expert tensor: {missed}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
