"""Write docs/errors.md from the code's error definitions (orchestrator/errors.py, config/catalog.py)."""

from pathlib import Path

from orchestrator.config.catalog import errors_markdown

Path(__file__).resolve().parent.parent.joinpath("docs", "errors.md").write_text(errors_markdown())
