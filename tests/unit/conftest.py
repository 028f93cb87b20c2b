"""Unit tests keep facts cached between runs (knob listings) in a folder of their own: the fake images' ids
are the same in every test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_knob_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("orchestrator.guard.knobs.user_cache_dir", lambda: tmp_path / "cache")
