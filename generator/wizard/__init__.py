"""The interactive wizard: tables of questions (questions.py before the plan, review.py once it is shown), a tiny
questionary runner (runner.py) and the plan -> review -> write flow (flow.py). Entry point: `python -m generator` with
no verb."""
