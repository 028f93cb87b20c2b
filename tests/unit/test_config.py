from __future__ import annotations

import pytest

from orchestrator import config
from orchestrator.errors import ConfigError
from orchestrator.schema import PhaseKind
from tests.conftest import orchestrator


def load(*overrides: str):  # type: ignore[no-untyped-def]
    return config.to_typed(config.compose(list(overrides)))


def test_default_study_composes_two_reference_arms() -> None:
    cfg = load()
    assert list(cfg.arms) == ["baseline", "wide_batch"]
    assert cfg.arms["wide_batch"].engine_args["max-num-seqs"] == 32
    assert cfg.arms["baseline"].engine_args["max-num-seqs"] == 16
    assert cfg.protocol.phases["concurrent"].kind is PhaseKind.concurrent
    assert cfg.baseline_arm == "baseline"


@pytest.mark.parametrize(("override", "expected"), [
    ("arms.baseline.imgae=x", "unknown key 'imgae' in arms.baseline (on the command line). Did you mean 'image'?"),
    ("study.nme=x", "unknown key 'nme' in study"),
    ("+arms.baseline.imgae=x", "unknown key 'imgae' in arms.baseline. Did you mean 'image'?"),
    ("protocol=smok", "unknown protocol 'smok' (in conf/config.yaml). Did you mean 'smoke'?"),
    ("arm@arms.baseline=refrence", "unknown arm 'refrence'"),
    ("protocol.phases.sequential.repeats=abc", "protocol.phases.sequential.repeats: Value 'abc'"),
    ("protocol.phases.sequential.kind=paralel", "expected one of [sequential, concurrent]"),
    ("study.baseline=nope", "study.baseline 'nope' is not an arm. Available: baseline, wide_batch"),
    ("arms.baseline.ipc_mode=host", "allow_host_ipc"),
    ("arms.baseline.gpus=al", "gpus='al' is not valid"),
])
def test_bad_config_is_one_clear_error(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(override)
    assert expected in str(err.value)


def test_docker_socket_mount_is_refused() -> None:
    with pytest.raises(ConfigError, match="Docker socket"):
        load("arms.baseline.volumes=[{host: /var/run/docker.sock, container: /sock}]")


def test_missing_prompt_file_names_path() -> None:
    cfg = load("prompts.prompts.capital.text=null", "prompts.prompts.capital.file=nope.txt")
    with pytest.raises(ConfigError, match=r"prompt .capital.: file .*nope.txt does not exist"):
        config.resolve_prompts(cfg.prompts)


def test_repeat_to_chars_builds_long_prompt() -> None:
    cfg = load("prompts.prompts.capital.repeat_to_chars=100")
    assert len(config.resolve_prompts(cfg.prompts)["capital"]) == 100


def test_cli_typo_exits_2_with_one_line_and_no_traceback() -> None:
    result = orchestrator("run", "arms.baseline.imgae=x")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Did you mean 'image'?" in lines[0] and "Traceback" not in result.stderr


def test_unknown_verb_lists_choices() -> None:
    result = orchestrator("compre")
    assert result.returncode == 2 and "Did you mean 'compare'?" in result.stderr
