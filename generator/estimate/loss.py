"""The loss's memory: what ForCausalLMLoss holds while it runs and in its backward, the logits the training loop keeps,
and TRL's fused LM head, which builds no logits (estimate.activations adds them to each phase). Pure."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.scripts import liger_fused_loss
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

# Loss terms in bytes per token per vocabulary entry (ForCausalLMLoss: logits.float() then cross_entropy).
LOSS_FORWARD_BYTES = 10.0  # while the loss is computed: bf16 logits 2 + fp32 upcast 4 + log-softmax kept by nll 4
LOSS_BACKWARD_BYTES = 12.0  # loss backward: log-softmax 4 + d(log-softmax) 4 + d(logits) 4, beside the kept logits


def logits_kept_bytes(workload: Workload, strategy: str) -> float:
    """Bytes per token per vocab entry of the logits the training loop holds through backward."""
    if liger_fused_loss(workload):
        return 0.0
    return 2.0 if catalog.strategy(strategy).framework == "deepspeed" else 4.0


# TRL's chunked fused LM head (trl/kernels/chunked_logprob.py 326-347, 404-413): tiles of at most this many tokens
# by this many vocabulary entries, one bf16 tile buffer at a time (Triton folds the softmax into it in place).
FUSED_HEAD_TOKEN_CHUNK = 4096
FUSED_HEAD_VOCAB_CHUNK = 32768


def fused_head_bytes(model: ModelSpec, workload: Workload) -> tuple[float, float]:
    """(forward, backward) bytes of TRL's fused LM-head loss (`trainer` script), which never builds the logits.

    Forward: the bf16 tile buffer. Backward: the tile again, the fp32 gradient of the hidden states [tokens, h], and,
    when lm_head trains (full fine-tune), its fp32 gradient accumulator [vocab, h] (chunked_logprob.py 404-413)."""
    tokens = workload.seq_len * workload.micro_batch
    tile = 2.0 * min(tokens, FUSED_HEAD_TOKEN_CHUNK) * min(model.vocab_size, FUSED_HEAD_VOCAB_CHUNK)
    grads = 4.0 * tokens * model.hidden_size
    if workload.method == "full":
        grads += 4.0 * model.vocab_size * model.hidden_size
    return tile, tile + grads
