"""Presentation shared by the verbs, the wizard and the trial: the plan request built from parsed flags, the
estimates table, a plan printed or turned into JSON. Above the planner and the emitter, below every verb."""
