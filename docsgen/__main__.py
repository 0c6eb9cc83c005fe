"""`python -m docsgen`: regenerate recipes/ and accelerate_configs/ in the checkout (run from the repository root)."""

from __future__ import annotations

from docsgen import readme_plans, recipes, reference_configs


def main() -> int:
    written = [*reference_configs.regenerate(), *recipes.regenerate()]
    for path in [*written, *readme_plans.regenerate(done=tuple(written))]:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
