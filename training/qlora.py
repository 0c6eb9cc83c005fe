"""QLoRA's 4-bit base: one quantization config for every load, and a random init quantised in memory.

A pretrained QLoRA load is `from_pretrained(model, quantization_config=quantization_config())`: transformers swaps
the Linear layers for bitsandbytes Linear4bit and quantises each weight as it reads it. A random init has no file
to read, so `quantised_random_model` builds the random bf16 model and hands its state dict to the same
`from_pretrained` (transformers 5.x takes `state_dict=` with no model path; checked in 5.17 and 5.24): the result is
the model a bf16 checkpoint with these weights would give, with `is_loaded_in_4bit`, `hf_quantizer` and
`config.quantization_config` set as peft's `prepare_model_for_kbit_training` and accelerate expect. Needs
bitsandbytes, and in train.py a GPU.
"""

from __future__ import annotations


def quantization_config():
    """NF4 with double quantisation, bf16 compute; bf16 storage so FSDP and ZeRO-3 can shard the packed weights."""
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_quant_storage=torch.bfloat16,
    )


def quantised_random_model(config, init_device: str, **load_kwargs):
    """Random weights in bf16 (as a bf16 checkpoint stores them) on `init_device`, loaded through from_pretrained with
    `load_kwargs` (quantization_config, dtype, attn_implementation, device_map) exactly as a pretrained load is.
    Peak memory: the bf16 model plus its 4-bit copy (about 14.5 + 4 GB for 7B) until the bf16 tensors are dropped."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device(init_device):
        random = AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation=load_kwargs.get("attn_implementation")
        )
    model_class, state = type(random), random.state_dict()
    del random
    # The concrete class, not the Auto one: AutoModel.from_pretrained needs a path to look for remote code in.
    return model_class.from_pretrained(None, config=config, state_dict=state, **load_kwargs)
