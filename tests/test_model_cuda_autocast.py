"""CUDA autocast's cast policy where torch's own does not run (model.cuda_autocast): on CPU tensors here, on meta in
the sizing count; on a GPU (bench/gpu_tests.sh) the same block's saved tensors against torch.autocast("cuda")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from generator.model.cuda_autocast import cuda_autocast  # noqa: E402
from generator.model.saved_storages import SavedStorages  # noqa: E402

H, S = 64, 32


class _Block(torch.nn.Module):
    """A LayerNorm feeding three projections, as StarCoder2's attention input does, then a gelu_new-style pow."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)
        self.q, self.k, self.v = (torch.nn.Linear(H, H) for _ in range(3))

    def forward(self, x):
        y = self.norm(x)
        return self.q(y) + self.k(y) * torch.pow(self.v(y), 3.0)


def test_the_policy_casts_as_cuda_autocast_does():
    x = torch.randn(S, H, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(H, H, requires_grad=True)  # an fp32 leaf: a full fine-tune's weight
    with cuda_autocast() as mode:
        assert torch.nn.functional.layer_norm(x, (H,)).dtype == torch.float32
        assert torch.nn.functional.linear(x.float(), w).dtype == torch.bfloat16
        torch.nn.functional.linear(x, w)
        assert len(mode.cache) == 1  # one bf16 copy of the weight for the forward, as autocast caches it
        assert torch.softmax(x, -1).dtype == torch.float32
        assert torch.softmax(x, -1, dtype=torch.bfloat16).dtype == torch.bfloat16  # an explicit dtype is kept
        assert x.sum(-1).dtype == torch.float32 and (x**2).dtype == torch.float32
        assert torch.cat([x, x.float()]).dtype == torch.float32
        assert torch.nn.functional.gelu(x).dtype == torch.bfloat16  # on no list: the input's dtype
        tables = torch.randn(S, 1) @ torch.randn(1, H)  # no grad, all fp32: rotary tables, autocast disabled there
        assert tables.dtype == torch.float32
        y = x.detach().clone()
        assert y.pow_(2).dtype == torch.bfloat16  # in-place ops are not eligible


def _saved_bytes(block, x, autocast) -> int:
    saved = SavedStorages(block, lambda: "block")
    with saved.hooks(), autocast:
        out = block(x)
    total = saved.by_owner()["block"]
    del out
    return total


def test_a_layernorm_keeps_an_fp32_input_and_each_projection_its_own_bf16_copy():
    block = _Block().to(torch.bfloat16)
    x = torch.randn(S, H, dtype=torch.bfloat16, requires_grad=True)
    bf16 = _saved_bytes(block, x, torch.autocast("cpu", enabled=False))
    cast = _saved_bytes(block, x, cuda_autocast())
    # per element: the norm's input cast to fp32 (+2 bytes); q, k and v each cast the norm's fp32 output to a bf16
    # copy where the bf16 run shares one (+4); pow keeps v's output cast to fp32 and the product keeps pow's fp32
    # output (+2 each). Beside them only the norm's weight and bias cast to fp32 and its per-row statistics.
    more = S * H * (2 + 4 + 2 + 2)
    assert more <= cast - bf16 <= more + 2 * H * 4 + 2 * S * 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch's own autocast to compare with")
def test_the_emulation_keeps_what_cuda_autocast_keeps():
    block = _Block().to(torch.bfloat16)
    x = torch.randn(S, H, dtype=torch.bfloat16, requires_grad=True)
    emulated = _saved_bytes(block, x, cuda_autocast())
    gpu = block.cuda()
    real = _saved_bytes(gpu, x.detach().cuda().requires_grad_(), torch.autocast("cuda", dtype=torch.bfloat16))
    assert emulated == real
