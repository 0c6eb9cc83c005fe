"""The scripts people launch besides train.py, instrumented for the bench: see docs/scripts.md."""
