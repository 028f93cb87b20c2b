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


def test_a_run_dir_s_prompts_are_taken_by_content_where_their_files_are_gone(tmp_path: Path) -> None:
    """`triage --from RUN_DIR` of a run dir handed on (its config dirs not on this machine): its prompts are the
    texts RUN/prompts.json recorded, as `run --from` takes them."""
    from orchestrator.triage.runner import source_from_run

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        "study: {baseline: baseline}\narms: {baseline: {engine: reference, env: {}, engine_args: {}}}\n"
        "runtime: {kind: process}\nprotocol: {request: {max_tokens: 4}, endpoint: completions}\n"
        f"config_dirs: [{tmp_path / 'gone'}]\n"
        "prompts: {name: story, prompts: {story: {file: story.txt, repeat_to_chars: null}}}\n")
    (run / "prompts.json").write_text('{"story": {"text": "Once upon a time", "sha256": "x"}}')
    story = source_from_run(run, None).prompts["prompts"]["story"]
    assert story["text"] == "Once upon a time" and not story.get("file")  # before: file story.txt, not found
