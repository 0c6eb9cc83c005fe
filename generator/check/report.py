"""Printing findings: one line each (severity, key, problem, fix), or JSON."""

from __future__ import annotations

import json

from generator.check.types import Finding, exit_code

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def summary(findings: list[Finding]) -> str:
    counts = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "info")}
    verdict = {0: "clean", 1: "warnings only", 2: "errors"}[exit_code(findings)]
    return f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s): {verdict}"


def render_json(
    path: str,
    findings: list[Finding],
    fixed_path: str | None = None,
    assumed: str | None = None,
    changes: list[str] | None = None,
) -> str:
    return json.dumps(
        {
            "config": path,
            "assumed": assumed,
            "exit_code": exit_code(findings),
            "findings": [f.as_dict() for f in findings],
            "fixed_output": fixed_path,
            "changes": changes,
        },
        indent=2,
    )


def print_findings(findings: list[Finding], path: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    for f in findings:
        console.print(
            f"[{_STYLE[f.severity]}]{f.severity:<7}[/] [bold]{escape(f.key)}[/]: {escape(f.problem)} "
            f"[dim]Fix:[/] {escape(f.fix)}"
        )
    console.print(f"{escape(path)}: {summary(findings)}")
