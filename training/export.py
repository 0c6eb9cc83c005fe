"""The final export: a Hugging Face model directory, or the LoRA adapter alone, written aside and renamed into place."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from training.checkpoints import fsync_tree


def export(accelerator, model, tok, path: Path, adapter_only: bool) -> None:
    """Full HF model (safetensors) or the LoRA adapter, written to a temporary directory and renamed into place."""
    state_dict = accelerator.get_state_dict(model)  # collective under FSDP / ZeRO-3: every rank calls it
    if accelerator.is_main_process:
        tmp = path.with_name(f".tmp-{path.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        unwrapped = accelerator.unwrap_model(model)
        if adapter_only:
            save_adapter(unwrapped, state_dict, tmp)
        else:
            unwrapped.save_pretrained(str(tmp), state_dict=state_dict, safe_serialization=True)
        tok.save_pretrained(str(tmp))
        fsync_tree(tmp)
        old = path.with_name(f".old-{path.name}")
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
        print(f"train.py: exported {'LoRA adapter' if adapter_only else 'model'} to {path}", flush=True)
    accelerator.wait_for_everyone()


def save_adapter(peft_model, state_dict: dict, out: Path) -> None:
    """adapter_config.json + adapter_model.safetensors, as PeftModel.save_pretrained writes them, from the gathered
    state dict. Written here because under FSDP2 peft's own save filtered the gathered dict down to nothing."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    adapter = get_peft_model_state_dict(peft_model, state_dict=state_dict)
    if not adapter:  # same rule as peft's: LoRA tensors, adapter name dropped from the key
        adapter = {k.replace(".default.", "."): v for k, v in state_dict.items() if "lora_" in k}
    if not adapter:
        raise RuntimeError(f"no LoRA weights among {len(state_dict)} gathered tensors; cannot export the adapter")
    out.mkdir(parents=True, exist_ok=True)
    peft_model.peft_config["default"].save_pretrained(str(out))
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in adapter.items()},
        str(out / "adapter_model.safetensors"),
        metadata={"format": "pt"},
    )
