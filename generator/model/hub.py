"""Whether the Hugging Face hub can answer, decided at once: huggingface_hub retries an unreachable host for tens of
seconds (five retry lines) before failing, so both the generator and train.py ask here first and fail in one line."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

CONNECT_TIMEOUT_S = 3.0
"""A TCP connect to the hub answers in well under a second where there is network."""


def hub_offline_reason(timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the hub cannot be used now ("HF_HUB_OFFLINE=1 is set", "cannot reach huggingface.co:443 (...)"), or None."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "0").strip().lower() not in ("", "0", "false", "no", "off"):
            return f"{var}={os.environ[var]} is set"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"cannot reach {host}:{port} ({exc.strerror or type(exc).__name__})"
    return None
