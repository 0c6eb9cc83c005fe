"""Pick a distributed-training strategy and GPU ids from how this machine's GPUs are wired.

Data flows one way through the subpackages:
topology -> model (+ workload) -> estimate -> plan -> emit -> launch.
Nothing on the planning path imports torch or transformers.
"""

__version__ = "0.1.0"
