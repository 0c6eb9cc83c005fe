"""An adapted down_proj's backward transient against what autograd really allocates: peft's LoRA on a frozen bf16
Linear under bf16 autocast, on the CPU, every op's output counted from when an op makes it until the tensor is freed.
Pins estimate.activations.LORA_DOWN_TRANSIENT_F_BYTES (with and without dropout) to behaviour, and shows why the
SwiGLU product's BACKWARD_TRANSIENT_F_BYTES no longer sets the peak of a layer whose down_proj is adapted."""

from __future__ import annotations

import weakref

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from generator.estimate.activations import BACKWARD_TRANSIENT_F_BYTES, LORA_DOWN_TRANSIENT_F_BYTES  # noqa: E402

TOKENS, HIDDEN, F = 512, 64, 256


class LiveBytes(TorchDispatchMode):
    """The peak of bytes held by tensors the ops inside the mode made (each storage counted once)."""

    def __init__(self):
        super().__init__()
        self.now = self.peak = 0
        self.held: set[int] = set()

    def _freed(self, ptr: int, n: int) -> None:
        self.now -= n
        self.held.discard(ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(t, torch.Tensor):
                continue
            ptr, n = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
            if n and ptr not in self.held:
                self.held.add(ptr)
                self.now += n
                self.peak = max(self.peak, self.now)
                weakref.finalize(t, self._freed, ptr, n)
        return out


def backward_peak_per_token_and_f(adapted: bool, dropout: float) -> float:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    down = torch.nn.Linear(F, HIDDEN, bias=False).to(torch.bfloat16).requires_grad_(False)
    if adapted:  # peft keeps the adapters in fp32 on a bf16 base (autocast_adapter_dtype)
        cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout, target_modules=["down"])
        down = get_peft_model(torch.nn.ModuleDict({"down": down}), cfg).base_model.model["down"]
    x = torch.randn(TOKENS, F, dtype=torch.bfloat16, requires_grad=True)  # the SwiGLU product, as in a layer
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = down(x)
    grad = torch.randn_like(y)
    with LiveBytes() as live:
        y.backward(grad)
    return live.peak / (TOKENS * F)


@pytest.mark.parametrize("dropout", [0.0, 0.05])
def test_adapted_down_proj_backward_holds_what_the_estimator_counts(dropout):
    measured = backward_peak_per_token_and_f(True, dropout)
    assert measured == pytest.approx(LORA_DOWN_TRANSIENT_F_BYTES[dropout > 0], abs=0.3)
    assert measured > BACKWARD_TRANSIENT_F_BYTES  # it, not the SwiGLU product, sets the layer's backward peak


def test_frozen_down_proj_alone_holds_its_input_gradient():
    assert backward_peak_per_token_and_f(False, 0.0) == pytest.approx(2.0, abs=0.3)  # a bf16 [tokens, F] gradient
