"""The interactive wizard: a table of questions (questions.py), a tiny questionary runner (runner.py) and the
plan -> review -> write flow (flow.py). Entry point: `python -m generator` with no verb."""
