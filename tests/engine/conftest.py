"""The reference engine's tests import `refengine` from arms/reference-engine, and the hooked engine's import
`hookedengine` from arms/transformers-hooked (neither is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "arms" / "reference-engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "arms" / "transformers-hooked"))
