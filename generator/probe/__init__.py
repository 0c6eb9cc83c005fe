"""`probe`: measure collective bus bandwidth of the GPU subsets that matter; write a bandwidth file for `plan`.

Only generator.probe.worker and generator.probe.runner import torch, and only when a measurement runs."""
