"""The reference engine's tests import `refengine` from arms/reference-engine (it is not installed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "arms" / "reference-engine"))
