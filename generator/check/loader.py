"""Read an Accelerate config safely: bounded size, no aliases/anchors (YAML bombs), bounded nesting, no custom tags.

Resolution stays YAML 1.1 (PyYAML's SafeLoader), exactly as accelerate reads the file, so `distributed_type: NO`
arrives here as False just as it does in `accelerate launch`: the rules can then say so.
"""

from __future__ import annotations

import yaml

from generator.errors import UserError
from generator.fileio import read_text

MAX_CONFIG_BYTES = 256 * 1024  # real configs are under 2 KB
MAX_DEPTH = 20  # accelerate configs nest two levels


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases, caps nesting, and records duplicate mapping keys."""

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0
        self.duplicates: list[str] = []

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise UserError(f"YAML aliases (*name) are not allowed in a config (line {mark.line + 1})")
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise UserError(f"YAML anchors (&name) are not allowed in a config (line {event.start_mark.line + 1})")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise UserError(f"config nests deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1})")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                self.duplicates.append(str(key))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_config(text: str, where: str = "config") -> tuple[dict, tuple[str, ...]]:
    """Parse YAML text into the top-level mapping; returns (mapping, duplicate keys). Raises UserError on bad input."""
    loader = None
    try:
        loader = _ConfigLoader(text)  # the reader rejects control characters already here
        data = loader.get_single_data()
    except UserError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where} is not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise UserError(f"{where} nests too deeply to parse") from None
    except Exception as exc:  # PyYAML's constructors raise plain errors on odd scalars (e.g. a huge !!timestamp)
        raise UserError(f"{where} holds a value YAML cannot construct ({type(exc).__name__}); quote it") from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        raise UserError(f"{where} is empty; expected an Accelerate config mapping (distributed_type: ...)")
    if not isinstance(data, dict):
        raise UserError(f"{where} holds a YAML {type(data).__name__}, expected a mapping (key: value lines)")
    return data, tuple(loader.duplicates) if loader is not None else ()


def load_config(path: str) -> tuple[dict, tuple[str, ...]]:
    """Read and parse the config at `path` (`-` = stdin)."""
    text = read_text(path, "config", max_bytes=MAX_CONFIG_BYTES)
    return parse_config(text, where=f"config {path!r}")
