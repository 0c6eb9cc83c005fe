"""DeepSpeed rules: the JSON-file/YAML conflict, stage-dependent keys, NVMe paths launch never exports."""

from __future__ import annotations

from generator.check import known_keys as K
from generator.check.types import DELETE, CheckContext, Finding
from generator.check.view import as_bool, as_int, distributed_type, section

S = "deepspeed_config"


def _ds(cfg: dict) -> dict | None:
    return section(cfg, S) if distributed_type(cfg) == "DEEPSPEED" else None


def _has_file(ds: dict) -> bool:
    return ds.get("deepspeed_config_file") not in (None, "", "none")


def file_conflicts(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ds = _ds(cfg)
    if ds is None or not _has_file(ds):
        return []
    out = []
    for key in K.DS_FILE_FORBIDDEN:
        if key in ds:
            out.append(
                Finding(
                    "error",
                    f"{S}.{key}",
                    "set in the YAML next to deepspeed_config_file: Accelerator() "
                    "raises ValueError ('...will be ignored...').",
                    "move it into the DeepSpeed JSON and delete it here.",
                    "file_conflicts",
                    (((S, key), DELETE),),
                )
            )
    path = str(ds["deepspeed_config_file"])
    if not path.startswith("/"):
        out.append(
            Finding(
                "info",
                f"{S}.deepspeed_config_file",
                f"relative path {path!r} is resolved from the directory each process starts in.",
                "use an absolute path.",
                "file_conflicts",
            )
        )
    if "mixed_precision" in cfg:
        out.append(
            Finding(
                "error",
                "mixed_precision",
                "top-level mixed_precision with a deepspeed_config_file: Accelerator() raises ValueError.",
                "set bf16.enabled in the JSON (or 'auto' and pass "
                "--mixed_precision bf16 on the launch command line) and delete it here.",
                "file_conflicts",
                ((("mixed_precision",), DELETE),),
            )
        )
    return out


def stage_keys(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ds = _ds(cfg)
    if ds is None or _has_file(ds):
        return []
    out = []
    raw = ds.get("zero_stage")
    stage = as_int(raw if raw is not None else 2)
    if stage not in (0, 1, 2, 3):
        out.append(
            Finding("error", f"{S}.zero_stage", f"{raw!r} is not a ZeRO stage (0-3).", "use 1, 2 or 3.", "stage_keys")
        )
        return out
    if raw is None:
        out.append(
            Finding(
                "info",
                f"{S}.zero_stage",
                "missing: DeepSpeedPlugin defaults to ZeRO-2.",
                "write zero_stage explicitly.",
                "stage_keys",
                (((S, "zero_stage"), 2),),
            )
        )
    param = str(ds.get("offload_param_device", "none")).lower()
    if stage < 3 and param not in ("none", "false"):
        out.append(
            Finding(
                "warning",
                f"{S}.offload_param_device",
                f"parameter offload needs ZeRO-3; stage {stage} ignores it.",
                "use zero_stage: 3 or offload_param_device: none.",
                "stage_keys",
                (((S, "offload_param_device"), "none"),),
            )
        )
    if stage < 3 and as_bool(ds.get("zero3_init_flag"), False):
        out.append(
            Finding(
                "info",
                f"{S}.zero3_init_flag",
                f"only used by ZeRO-3; forced off at stage {stage}.",
                "set it to false.",
                "stage_keys",
                (((S, "zero3_init_flag"), False),),
            )
        )
    if stage == 3 and "zero3_init_flag" in ds and not as_bool(ds.get("zero3_init_flag"), True):
        # accelerate 1.15 registers the stage-3 HfDeepSpeedConfig whatever the flag (DeepSpeedPlugin.select ->
        # set_deepspeed_weakref), and transformers decides zero.Init from that config's stage alone.
        out.append(
            Finding(
                "warning",
                f"{S}.zero3_init_flag",
                "false has no effect on transformers models: Accelerator() still registers the ZeRO-3 config, so "
                "from_pretrained/from_config build under zero.Init anyway.",
                "write true (what happens); to build a model whole, call "
                "transformers.integrations.unset_hf_deepspeed_config() around the load.",
                "stage_keys",
                (((S, "zero3_init_flag"), True),),
            )
        )
    if stage == 3 and "zero3_init_flag" not in ds:
        out.append(
            Finding(
                "info",
                f"{S}.zero3_init_flag",
                "missing; ZeRO-3 turns it on (model built sharded).",
                "write zero3_init_flag: true explicitly.",
                "stage_keys",
                (((S, "zero3_init_flag"), True),),
            )
        )
    for key in ("offload_optimizer_nvme_path", "offload_param_nvme_path"):
        if key in ds:
            out.append(
                Finding(
                    "warning",
                    f"{S}.{key}",
                    "accelerate launch never exports it, so the path is lost.",
                    "configure NVMe offload in a DeepSpeed JSON (deepspeed_config_file).",
                    "stage_keys",
                    (((S, key), DELETE),),
                )
            )
    return out


RULES = [file_conflicts, stage_keys]
