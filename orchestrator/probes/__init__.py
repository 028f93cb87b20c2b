"""Standalone scripts shipped into arm containers (stdlib only; torch only where stated).

`environment.py` is run as `python3 -c SOURCE`: it must not import anything of the orchestrator.
"""

from __future__ import annotations

from pathlib import Path

PROBES_DIR = Path(__file__).resolve().parent


def source(name: str) -> str:
    """The text of a probe script, to pass as `python3 -c` inside a container."""
    return (PROBES_DIR / f"{name}.py").read_text(encoding="utf-8")
