"""Documents built from the generator's own output: recipes/ (docsgen.recipes), accelerate_configs/
(docsgen.reference_configs) and the measured lines a recipe quotes from bench/results (docsgen.recipe_evidence).

Lives beside bench/, outside the installed `generator` package: it reads the checkout's files; the generator reads
none. Regenerate everything with `python -m docsgen`; tests/test_recipes_regenerate.py and
tests/test_plan_reference_configs.py fail on any byte of difference."""
