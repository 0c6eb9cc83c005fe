"""The parts of train.py, one concept per module; train.py itself reads top to bottom and calls them.

Nothing here imports torch, transformers or accelerate at module level: `train.py --help` and the argument checks
answer before any of them loads. The manual is docs/train.md.
"""
