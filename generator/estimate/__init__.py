"""The estimator: memory per GPU, communication and step time for every strategy. Pure functions; no torch import."""

from generator.estimate.checkpoint import checkpoint_size_gb
from generator.estimate.core import applicable, estimate, estimate_all
from generator.estimate.hardware import gpu_peak_tflops, gpu_rates
from generator.estimate.types import METHODS, STRATEGIES, Estimate, Placement, Workload

__all__ = [
    "METHODS",
    "STRATEGIES",
    "Estimate",
    "Placement",
    "Workload",
    "applicable",
    "checkpoint_size_gb",
    "estimate",
    "estimate_all",
    "gpu_peak_tflops",
    "gpu_rates",
]
