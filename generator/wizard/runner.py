"""A tiny runner for a table of questions: asks each QuestionSpec with questionary, in order, skipping those whose
`when` is false, and returns the answers converted to values. Ctrl-C propagates as KeyboardInterrupt."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

Answers = dict[str, Any]


@dataclass(frozen=True)
class QuestionSpec:
    key: str
    """Where the answer goes in the answers dict."""
    kind: str
    """select | checkbox | autocomplete | text | confirm."""
    message: str | Callable[[Answers], str]
    """The question, or a callable of the answers so far (one question worded per earlier answer)."""
    choices: Callable[[Answers], Sequence[Any]] | None = None
    """For select and checkbox: (title, value) pairs; for autocomplete: strings offered while typing."""
    default: Any = None
    """A value, or a callable of the answers so far; for a checkbox, the values ticked at first."""
    validate: Callable[[Any], bool | str] | None = None
    """Check of the typed text (a checkbox: the list of ticked values), run when the user presses Enter: True, or a
    message shown under the prompt until the answer is fixed."""
    when: Callable[[Answers], bool] | None = None
    """Ask only when this is true of the answers so far."""
    parse: Callable[[str], Any] | None = None
    """Turns accepted text into the stored value (e.g. "4096" -> 4096)."""


def ask(spec: QuestionSpec, answers: Answers) -> Any:
    """Ask one question with a real questionary prompt (on the current prompt_toolkit app session)."""
    import questionary

    default = spec.default(answers) if callable(spec.default) else spec.default
    message = spec.message(answers) if callable(spec.message) else spec.message
    spec = replace(spec, message=message)
    if spec.kind == "select":
        choices = [questionary.Choice(title, value=value) for title, value in spec.choices(answers)]
        values = [c.value for c in choices]
        question = questionary.select(
            spec.message,
            choices=choices,
            default=default if default in values else None,
            use_jk_keys=False,  # letters type into the search filter instead
            use_search_filter=True,
        )
    elif spec.kind == "checkbox":
        ticked = set(default or ())
        choices = [questionary.Choice(t, value=v, checked=v in ticked) for t, v in spec.choices(answers)]
        question = questionary.checkbox(spec.message, choices=choices, validate=spec.validate or (lambda _: True))
    elif spec.kind == "autocomplete":
        question = questionary.autocomplete(
            spec.message,
            choices=list(spec.choices(answers)),
            default=str(default or ""),
            validate=spec.validate,
            validate_while_typing=False,  # a validator may read a file or ask the hub: once, on Enter
        )
    elif spec.kind == "text":
        question = questionary.text(
            spec.message, default=str(default or ""), validate=spec.validate, validate_while_typing=False
        )
    elif spec.kind == "confirm":
        question = questionary.confirm(spec.message, default=bool(default))
    else:
        raise ValueError(f"unknown question kind {spec.kind!r}")
    value = question.unsafe_ask()  # unsafe: Ctrl-C raises instead of returning None
    if isinstance(value, str):
        value = value.strip()
        if spec.parse is not None:
            value = spec.parse(value)
    return value


def run_questions(specs: Sequence[QuestionSpec], answers: Answers | None = None) -> Answers:
    """Ask every applicable question in order; `answers` may carry facts known beforehand (keys starting with _)."""
    answers = dict(answers or {})
    for spec in specs:
        if spec.when is None or spec.when(answers):
            answers[spec.key] = ask(spec, answers)
    return answers
