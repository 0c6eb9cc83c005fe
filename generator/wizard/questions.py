"""The wizard's questions before the first plan, as data, and the request they make. Each choice list and default is a
function of the answers so far; `_live` holds the topology detected on this machine (or None), `_machines` the bundled
reference machines. What is asked once a plan is shown is in review.py."""

from __future__ import annotations

from generator.estimate.scripts import parse_lora_targets
from generator.plan.fabrics import FABRICS
from generator.plan.types import PlanRequest
from generator.wizard.kernels import answered_attentions, kernel_choices, kernel_fields
from generator.wizard.precision import precision_fields
from generator.wizard.runner import Answers, QuestionSpec
from generator.wizard.validators import (
    auto_or_positive_int,
    known_model,
    positive_int,
    positive_number,
    readable_topology,
)

FILE = "file"
"""Machine answer meaning "read a topology file"."""
LIVE = "live"
"""Machine answer meaning "this machine, as detected"."""


def auto_int(text: str) -> int | None:
    return None if text == "auto" else int(text)


def machine_choices(answers: Answers) -> list[tuple[str, str]]:
    live = answers.get("_live")
    first = [(f"This machine ({len(live.gpus)}x {live.gpus[0].name})", LIVE)] if live is not None else []
    refs = [(f"{name}: {what}", name) for name, what in answers.get("_machines", {}).items()]
    return first + refs + [("A topology file (nvidia-smi topo -m output or saved JSON)", FILE)]


def model_choices(answers: Answers) -> list[str]:
    return sorted(answers.get("_presets", ()))


TOPO_FILE = QuestionSpec(
    "topo_file", "text", "Topology file:", validate=readable_topology, when=lambda a: a["machine"] == FILE
)
MODEL = QuestionSpec(
    "model",
    "autocomplete",
    "Model (preset, Hugging Face id or local directory):",
    model_choices,
    default="mistral-7b",
    validate=known_model,
)
QUESTIONS: tuple[QuestionSpec, ...] = (
    QuestionSpec(
        "machine", "select", "Which machine?", machine_choices, default=lambda a: LIVE if a.get("_live") else None
    ),
    TOPO_FILE,
    MODEL,
    QuestionSpec(
        "method",
        "select",
        "Fine-tuning method?",
        lambda a: [("Full fine-tune", "full"), ("LoRA", "lora"), ("QLoRA (4-bit base)", "qlora")],
        default="full",
    ),
    QuestionSpec("seq_len", "text", "Sequence length (tokens):", default="4096", validate=positive_int, parse=int),
    QuestionSpec(
        "micro_batch",
        "text",
        "Micro-batch per GPU (auto = largest that fits):",
        default="auto",
        validate=auto_or_positive_int,
        parse=auto_int,
    ),  # fmt: skip
    QuestionSpec(
        "global_batch",
        "text",
        "Global batch, sequences per optimizer step (auto = no accumulation):",
        default="auto",
        validate=auto_or_positive_int,
        parse=auto_int,
    ),  # fmt: skip
    # -- the training script: asked before the kernels, whose choices are the script's levers (issue 25) --
    QuestionSpec(
        "script",
        "select",
        "Which script will you launch the config with?",
        lambda a: [
            ("train.py (this repository's)", "train.py"),
            ("TRL's SFT script (trl.scripts.sft) or your own Trainer / SFTTrainer script", "trainer"),
            ("My own Accelerate loop (torch AdamW defaults)", "custom"),
        ],
        default="train.py",
    ),
    QuestionSpec(
        "script_path",
        "text",
        lambda a: SCRIPT_PATH_PROMPT[a["script"]],
        default="",
        when=lambda a: a["script"] in SCRIPT_PATH_PROMPT,
    ),
    QuestionSpec(
        "lora_targets",
        "select",
        "Which projections does LoRA adapt?",
        lambda a: [
            (
                "The script's default ("
                + ("all linear layers" if a["script"] == "train.py" else "q_proj and v_proj, peft's default")
                + ")",
                "default",
            ),
            ("All linear layers (all-linear)", "all-linear"),
            ("q_proj and v_proj", "qv"),
        ],  # fmt: skip
        default="default",
        when=lambda a: a["method"] != "full",
    ),
    QuestionSpec(
        "kernels",
        "select",
        "Kernels?",
        lambda a: kernel_choices(a["script"], answered_attentions(a["model"])),
        default="auto",
    ),
    QuestionSpec(
        "doc_tokens",
        "text",
        "Mean tokens per training example, for the attention kernel (auto = examples fill each sequence):",
        default="auto",
        validate=auto_or_positive_int,
        parse=auto_int,
        when=lambda a: a["kernels"] in ("auto", "flex", "liger-flex"),
    ),  # fmt: skip
    QuestionSpec("num_machines", "text", "Number of machines:", default="1", validate=positive_int, parse=int),
    QuestionSpec(
        "main_process_ip",
        "text",
        "Machine 0's private IP address (rendezvous; keep it inside the cluster):",
        validate=lambda t: bool(t.strip()) or "an address is needed",
        when=lambda a: a["num_machines"] > 1,
    ),  # fmt: skip
    QuestionSpec(
        "main_process_port",
        "text",
        "Rendezvous port on machine 0 (open it only to the other machines):",
        default="29500",
        validate=lambda t: t.strip().isdigit() and 0 < int(t) < 65536 or "a TCP port, 1-65535",
        parse=int,
        when=lambda a: a["num_machines"] > 1,
    ),  # fmt: skip
    QuestionSpec(
        "machine_rank",
        "text",
        "This machine's rank (0 = the main one):",
        default="0",
        validate=lambda t: t.strip().isdigit() or "0, 1, ...",
        parse=int,
        when=lambda a: a["num_machines"] > 1,
    ),  # fmt: skip
    QuestionSpec(
        "fabric",
        "select",
        "Network between machines?",
        lambda a: [(f"{name}: {f.what}", name) for name, f in FABRICS.items()] + [("I measured it (GB/s)", "measured")],
        default="ib-ndr",
        when=lambda a: a["num_machines"] > 1,
    ),  # fmt: skip
    QuestionSpec(
        "inter_node_gbps",
        "text",
        "Measured all-reduce busbw between machines (GB/s):",
        validate=positive_number,
        parse=float,
        when=lambda a: a.get("fabric") == "measured",
    ),  # fmt: skip
    QuestionSpec(
        "trial",
        "confirm",
        "After you accept, run a short trial of the top candidates on these GPUs and write the fastest? (minutes)",
        default=False,
        # the trial launches train.py: it measures nothing of another script
        when=lambda a: (
            a.get("_live") is not None
            and a["machine"] == LIVE
            and a["num_machines"] == 1
            and a.get("script", "train.py") == "train.py"
        ),
    ),  # fmt: skip
)


SCRIPT_PATH_PROMPT = {
    "trainer": "Path of your script (empty: TRL's own trl.scripts.sft):",
    "custom": "Path of your training loop script (empty: a placeholder name in the launch line):",
}


def request_from_answers(a: Answers) -> PlanRequest:
    multi = a.get("num_machines", 1) > 1
    return PlanRequest(
        method=a["method"],
        seq_len=a["seq_len"],
        micro_batch=a["micro_batch"],
        global_batch=a["global_batch"],
        **kernel_fields(a.get("kernels", "auto")),
        doc_tokens=a.get("doc_tokens"),
        num_gpus=a.get("num_gpus"),
        exclude=tuple(a.get("exclude", ())),
        strategy=a.get("strategy", "auto"),
        num_machines=a.get("num_machines", 1),
        machine_rank=a.get("machine_rank", 0) if multi else 0,
        main_process_ip=a.get("main_process_ip") if multi else None,
        main_process_port=a.get("main_process_port", 29500) if multi else 29500,
        fabric=a.get("fabric") if multi and a.get("fabric") != "measured" else None,
        inter_node_gbps=a.get("inter_node_gbps") if multi else None,
        script=a.get("script", "train.py"),
        script_path=a.get("script_path") or None,
        lora_targets=None if a.get("lora_targets", "default") == "default" else parse_lora_targets(a["lora_targets"]),
        precision=a.get("precision", "auto"),
        **precision_fields(),
    )
