"""The storages autograd saves for backward, each counted once while the graph holds it: what the sizing count
(generator/model/saved_count.py), the norms' count (generator/model/meta.py) and the audit on real tensors
(bench/scripts/saved_audit.py) all measure with. Works on meta tensors as on real ones (a storage's size is its
metadata); torch is imported only when the hooks are on."""

from __future__ import annotations

import weakref
from collections import Counter


class _Box:
    """What the graph holds instead of the tensor, so the count forgets a storage when its last holder is freed."""

    __slots__ = ("t", "__weakref__")


class SavedStorages:
    """The storages autograd saves for backward while `hooks()` is on, each counted once while the graph holds it,
    against where() at its first save; the model's parameters (views of them included) and what skip(t) names are
    left out. bench/scripts/saved_audit.py counts real tensors with it too."""

    def __init__(self, model, where, skip=None):
        self.params = {p.untyped_storage()._cdata for p in model.parameters()}
        self.where, self.skip = where, skip
        self.owner: dict[int, tuple[object, int]] = {}
        self.holders: Counter = Counter()

    def hooks(self):
        import torch

        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda box: box.t)

    def by_owner(self) -> Counter:
        """Bytes still held, by where they were first saved."""
        totals: Counter = Counter()
        for where, nbytes in self.owner.values():
            totals[where] += nbytes
        return totals

    def _release(self, key: int) -> None:
        self.holders[key] -= 1
        if not self.holders[key]:
            del self.owner[key]

    def _pack(self, t):
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self.params and not (self.skip and self.skip(t)):
            self.owner.setdefault(key, (self.where(), storage.nbytes()))
            self.holders[key] += 1
        box = _Box()
        box.t = t
        if key in self.owner:
            weakref.finalize(box, self._release, key)
        return box
