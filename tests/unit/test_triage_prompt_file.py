"""Triage of a study in a config dir named relative to the working directory (docs/triage.md: `--config-dir
~/my-configs`), whose prompts are files: each step's config names the prompt file by its absolute path, since the
step's config dir is elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.triage.runner import source_from_overrides


def test_a_prompt_file_of_a_relative_config_dir_is_named_absolutely(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = tmp_path / "mine" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "story.txt").write_text("Once upon a time")
    (prompts / "story.yaml").write_text("name: story\nprompts:\n  story:\n    file: story.txt\n")
    monkeypatch.chdir(tmp_path)
    source = source_from_overrides(["prompts=story", "runtime=process", "arm@arms.baseline=reference_process"],
                                   [Path("mine")], None)
    named = Path(source.prompts["prompts"]["story"]["file"])
    assert named.is_absolute() and named == prompts / "story.txt"  # before: mine/prompts/story.txt, not found
