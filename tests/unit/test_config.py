from __future__ import annotations

import pytest

from orchestrator import config
from orchestrator.config import security, validate
from orchestrator.config.schema import PhaseKind
from orchestrator.errors import ConfigError
from tests.conftest import orchestrator


def load(*overrides: str):  # type: ignore[no-untyped-def]
    return validate.load(list(overrides))


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
    ("+arms.baseline.imgae=x", "unknown key 'imgae' in arms.baseline (on the command line). Did you mean 'image'?"),
    ("protocol=smok", "unknown protocol 'smok' (on the command line). Did you mean 'smoke'?"),
    ("arm@arms.baseline=refrence", "unknown arm 'refrence'"),
    ("protocol.phases.sequential.repeats=abc", "protocol.phases.sequential.repeats: Value 'abc'"),
    ("protocol.target_bound=abc", "could not be converted to Float (on the command line); give a number, e.g. 0.05"),
    ("protocol.request.echo=maybe", "is not a valid bool (type str) (on the command line); give true or false"),
    ("protocol.phases.sequential.kind=paralel", "expected one of [sequential, concurrent, load]"),
    ("study.baseline=nope", "study.baseline='nope' names nothing that exists. Available: baseline, wide_batch"),
    ("study.control=nope", "study.control='nope' names nothing that exists. Available: baseline, wide_batch"),
    ("arms.baseline.gpus=al", "arms.baseline.gpus='al': must be null, 'all' or device ids"),
])
def test_bad_config_is_one_clear_error(override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(override)
    assert expected in str(err.value)


@pytest.mark.parametrize(("override", "kind"), [
    ("arms.baseline.volumes=[{host: /var/run/docker.sock, container: /sock}]", "docker_socket_mount"),
    ("arms.baseline.volumes=[{host: /, container: /host}]", "host_root_mount"),
    ("arms.baseline.ipc_mode=host", "host_ipc"),
    ("arms.baseline.network_host=true", "host_network"),
    ("arms.baseline.cap_add=[SYS_ADMIN]", "cap_add"),
])
def test_dangerous_options_need_an_explicit_allow(override: str, kind: str) -> None:
    typed = config.to_typed(config.compose([override]))
    with pytest.raises(ConfigError, match=rf"\({kind}\), refused; to accept it, pass runtime.allow=\[{kind}\]"):
        security.enforce(typed, [], "runtime.allow=[{kind}]")
    security.enforce(typed, [kind], "runtime.allow=[{kind}]")  # allowed: no error
    with pytest.raises(ConfigError, match="allow='everything' names nothing that exists"):
        security.enforce(typed, ["everything"], "")


def test_missing_prompt_file_names_path() -> None:
    cfg = config.to_typed(config.compose(["prompts.prompts.capital.text=null",
                                          "prompts.prompts.capital.file=nope.txt"]))
    with pytest.raises(ConfigError, match=r"prompt .capital.: file nope.txt not found \(looked in .*conf/prompts\)"):
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


def test_the_worst_exit_status_wins_by_the_conventions_precedence() -> None:
    from orchestrator.errors import worst

    assert worst() == 0 and worst(0, 3) == 3 and worst(3, 4) == 4 and worst(4, 2) == 2
    assert worst(2, 1) == 1 and worst(1, 130) == 130 and worst(0, 99) == 1  # unknown: a bug


def test_relative_arm_paths_resolve_beside_the_users_arm_files_then_the_project(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    user = tmp_path / "mine"
    (user / "arm" / "engine-src").mkdir(parents=True)
    (user / "arm" / "my_arm.yaml").write_text(
        "defaults: [reference, _self_]\nbuild:\n  context: engine-src\n"
        "volumes:\n  - {host: models, container: /models}\n")
    monkeypatch.chdir(tmp_path)
    typed = config.to_typed(config.compose(["arm@arms.baseline=my_arm"], [user]))
    assert typed.arms["baseline"].build.context == str(user / "arm" / "engine-src")  # beside the arm file
    assert typed.arms["baseline"].volumes[0].host == str(tmp_path / "models")  # not there: the working dir
    assert typed.arms["wide_batch"].build.context == str(Path(config.PROJECT_ROOT) / "arms" / "reference-engine")
