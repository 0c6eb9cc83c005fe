"""`python -m docsgen`: regenerate recipes/ and accelerate_configs/ in the checkout (run from the repository root)."""

from __future__ import annotations

from docsgen import recipes, reference_configs


def main() -> int:
    for path in [*reference_configs.regenerate(), *recipes.regenerate()]:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
