"""`check` is `run`'s checks (run/refusals.py `refusals`): every problem of a command line at once, one line
each, the same lines from both verbs, and nothing written by a refused run."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.config.probe import load_probe_config
from orchestrator.config.search import ENV_VAR
from orchestrator.console import Outcome
from orchestrator.errors import ConfigError
from orchestrator.run import placement
from orchestrator.run.refusals import config_check, study_config
from orchestrator.runtime.spec import Inventory


def errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith("error: ") for line in lines), lines
    return lines


def test_every_command_line_problem_at_once_not_only_the_first() -> None:
    _, typed, found = study_config(["arms.baseline.portt=1", "arms.baseline.port=abc", "protocol=smok",
                                    "arms.baseline.port=[1", "+arms.baseline.nope=1",
                                    "protocol.request.max_tokens=-1"], [])
    assert len(found) == 5, found
    said = "\n".join(found)
    assert "override 'arms.baseline.port=[1' does not parse" in said  # Hydra's own message names no override
    assert "unknown key 'portt' in arms.baseline" in said and "unknown key 'nope' in arms.baseline" in said
    assert "arms.baseline.port: Value 'abc'" in said and "unknown protocol 'smok'" in said
    # what composed without them is still checked: the range below is found beside them
    assert config_check(typed).problems == ["protocol.request.max_tokens=-1: must be >= 0"]


def test_check_lists_command_line_problems_with_the_refusals_after_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "arms.baseline.portt=1", "arms.baseline.cpus=100000",
                     "arms.wide_batch.cpus=100000"]) == 2
    lines = errors(capsys)
    assert len(lines) == 3 and "unknown key 'portt'" in lines[0], lines
    assert all("needs no GPU, 100000 cores" in line for line in lines[1:]), lines
    assert cli.main(["check", "protocol.request.temperature=5"]) == 2
    assert errors(capsys)[0] == "error: protocol.request.temperature=5.0: must be in [0, 2]"  # the range, no filler


@pytest.mark.parametrize(("override", "fix"), [
    ("+prompts.prompts.new={text: hi}", "write it in a prompt set, DIR/prompts/SET.yaml"),
    ("+arms.baseline.scratch.x={container: /x}", "write it in an arm file, DIR/arm/NAME.yaml"),
    ("+arms.new={image: x}", "+arm@arms.NAME=TEMPLATE"),
])
def test_a_new_map_entry_on_the_command_line_says_where_to_write_it(override: str, fix: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", override]) == 2
    [line] = errors(capsys)
    assert line.startswith(f"error: {override}: a new ") and fix in line and "Invalid type" not in line


def test_an_arm_that_fits_on_no_host_is_one_line_naming_its_keys() -> None:
    _, typed, _ = study_config(["arms.baseline.cpus=4", "arms.wide_batch.cpus=4"], [])
    lines = placement.problems(typed, lambda host: Inventory(cpus=(0, 1)))
    assert lines == [f"arm '{arm}' needs no GPU, 4 cores: more than any host has (local: 2 cores, 0 GPUs); "
                     f"lower arms.{arm}.gpu_count/cpus/memory, or add a host to runtime.hosts"
                     for arm in ("baseline", "wide_batch")]
    assert placement.problems(typed, lambda host: Inventory(cpus=tuple(range(8)))) == []


def test_a_process_arm_cannot_be_given_privileges_or_a_memory_limit() -> None:
    _, typed, found = study_config(["runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
                                    "arms.baseline.privileged=true", "arms.baseline.memory=1g",
                                    "+runtime.allow=[privileged]"], [])
    assert found == []
    assert [p.split(":")[0] for p in config_check(typed).problems] == ["arms.baseline.privileged=true",
                                                                 "arms.baseline.memory='1g'"]


def test_run_refuses_what_check_refuses_with_the_same_lines_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = ["runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
             "arms.baseline.cpus=100000"]
    said = {}
    for verb in ("check", "run"):
        assert cli.main([verb, *study, f"hydra.run.dir={tmp_path / 'run'}"]) == 2
        said[verb] = errors(capsys)
    assert said["check"] == said["run"] and "needs no GPU, 100000 cores" in said["run"][0]
    assert not (tmp_path / "run").exists()  # refused before Hydra made the run dir


def test_no_docker_host_is_a_refusal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")  # nothing listens there
    assert cli.main(["check"]) == 2
    [line] = errors(capsys)
    assert "no Docker host reachable" in line


def test_probe_finds_an_arm_in_the_user_s_config_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "arm").mkdir()
    (tmp_path / "arm" / "mine.yaml").write_text("defaults:\n  - reference\n  - _self_\ngpus: '0'\n")
    probe = load_probe_config("cpu_small", [], "mine", None, [tmp_path])
    assert (probe.image, probe.gpus) == ("orchestrator/reference-engine:0.1.0", "0")  # its template's image
    assert cli.main(["probe", "--config-dir", str(tmp_path), "--arm", "mine", "--print-spec"]) == 0
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert cli.main(["probe", "--arm", "mine", "--print-spec"]) == 0
    monkeypatch.delenv(ENV_VAR)
    capsys.readouterr()
    assert cli.main(["probe", "--arm", "mine", "--print-spec"]) == 2
    assert "unknown arm 'mine'" in capsys.readouterr().err


def test_hydra_s_re_run_recipe_takes_out_like_the_other_re_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`run --config-dir RUN/.hydra --config-name config --out DIR` is `run --from RUN --out DIR`."""
    from orchestrator.reproduce import rerun

    hydra = tmp_path / "run" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text("{}\n")
    (hydra / "overrides.yaml").write_text("[]\n")
    called: list[tuple[Path, Path | None, list[str]]] = []

    def run_from(run: Path, out: Path | None, allow: list[str], output: list[str]) -> Outcome:
        called.append((run, out, output))
        return Outcome()

    monkeypatch.setattr(rerun, "run_from", run_from)
    assert cli.main(["run", "--config-dir", str(hydra), "--config-name", "config", "--out", str(tmp_path / "new")]) == 0
    assert called == [(hydra.parent, tmp_path / "new", [])]
    assert cli.main(["run", "--out", str(tmp_path / "new")]) == 2  # a new study's run dir is Hydra's
    assert errors(capsys) == ["error: run takes no --out for a new study: name its run dir with hydra.run.dir=DIR "
                              "(--out is for a re-run: run --from RUN --out DIR)"]


@pytest.mark.parametrize(("study", "override", "where", "closest"), [
    ("load_point", "protocol.phases.load.load.rate_per_sec=8", "protocol.phases.load.load", "rate_per_s"),
    ("load_point", "+protocol.phases.load.load.rate_per_sec=8", "protocol.phases.load.load", "rate_per_s"),
    ("load_point", "protocol.phases.load.load.warmup.rate_per_sec=2", "protocol.phases.load.load.warmup",
     "rate_per_s"),
    ("load_point", "protocol.request.logprob=3", "protocol.request", "logprobs"),
    ("default", "arms.baseline.volumes=[{host: /x, contaner: /y}]", "arms.baseline.volumes", "container"),
    ("onset_indexer_budget", "hydra.sweeper.axis.hig=5", "hydra.sweeper.axis", "high"),
    ("onset_indexer_budget", "hydra.sweeper.target.phse=x", "hydra.sweeper.target", "phase"),
    ("onset_indexer_budget", "hydra.sweeper.max_job=5", "hydra.sweeper", "max_jobs"),
    ("onset_indexer_budget", "+hydra.sweeper.max_job=5", "hydra.sweeper", "max_jobs"),  # refused by check too
    ("onset_indexer_budget", "+hydra.sweeper.axis.hig=5", "hydra.sweeper.axis", "high"),
])
def test_a_typo_in_any_block_gets_its_closest_key(study: str, override: str, where: str, closest: str) -> None:
    """Every nested block of the schema (and the onset sweeper's), written with or without a leading +."""
    key = {"volumes": "contaner"}.get(key := override.split("=", 1)[0].rsplit(".", 1)[1], key)
    _, _, found = study_config([f"study={study}", override], [])
    assert found == [f"unknown key '{key}' in {where} (on the command line). Did you mean '{closest}'? "
                     + found[0].split("? ", 1)[1]], found
    assert "Available: (none)" not in found[0]


def test_the_onset_sweepers_settings_name_the_closest_key_of_each_typo() -> None:
    """hydra.sweeper's keys given with a leading + reach the sweeper untyped: it judges them, all at once."""
    from orchestrator.errors import ConfigError
    from orchestrator.sweep.onset_config import settings

    with pytest.raises(ConfigError) as err:
        settings({"max_job": 5, "axis": {"key": "a", "hig": 4}})
    assert [p.split("?")[0] for p in err.value.problems] == [
        "unknown key 'max_job' in hydra.sweeper. Did you mean 'max_jobs'",
        "unknown key 'hig' in hydra.sweeper.axis. Did you mean 'high'"]


def test_a_config_files_problems_are_all_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A study of the user's with a misspelled key: every problem of what they wrote, each where it is written,
    and nothing of the default study (whose arms a typo once brought back)."""
    (tmp_path / "study").mkdir()
    (tmp_path / "protocol").mkdir()
    (tmp_path / "study" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /arm@arms.a: reference_process\n  - override /protocol: mine\n"
        "study:\n  name: mine\narms:\n  a:\n    engine_arg:\n      max-num-seqs: 8\n    startup_timeout_s: -5\n")
    (tmp_path / "protocol" / "mine.yaml").write_text(
        "defaults:\n  - load\n  - _self_\nname: mine\nrequest:\n  max_tokens: many\n"
        "phases:\n  load:\n    load:\n      rate_per_sec: 8\n      warmup:\n        rate_per_sec: 2\n")
    assert cli.main(["check", "--config-dir", str(tmp_path), "study=mine", "runtime=process"]) == 2
    lines = [line.split(" Available:")[0] for line in errors(capsys)]
    study, protocol = tmp_path / "study" / "mine.yaml", tmp_path / "protocol" / "mine.yaml"
    assert lines == [
        f"error: unknown key 'engine_arg' in arms.a (in {study}). Did you mean 'engine_args'?",
        f"error: unknown key 'rate_per_sec' in protocol.phases.load.load.warmup (in {protocol}). "
        "Did you mean 'rate_per_s'?",
        f"error: unknown key 'rate_per_sec' in protocol.phases.load.load (in {protocol}). Did you mean 'rate_per_s'?",
        f"error: protocol.request.max_tokens: Value 'many' of type 'str' could not be converted to Integer "
        f"(in {protocol}); give a whole number, e.g. 8",
        "error: arms.a.startup_timeout_s=-5.0: must be > 0"], lines


def test_a_study_files_typos_in_the_onset_sweepers_settings_are_all_named(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "search.yaml").write_text(
        "# @package _global_\ndefaults:\n  - onset_indexer_budget\n  - _self_\nstudy:\n  name: search\n"
        "hydra:\n  sweeper:\n    max_job: 4\n    axis: {hig: 4096}\narms:\n  random_topk:\n    imgae: x\n")
    assert cli.main(["check", "--config-dir", str(tmp_path), "study=search"]) == 2
    study = tmp_path / "study" / "search.yaml"
    assert sorted(line.split(" Available:")[0] for line in errors(capsys)) == [
        f"error: unknown key 'hig' in hydra.sweeper.axis (in {study}). Did you mean 'high'?",
        f"error: unknown key 'imgae' in arms.random_topk (in {study}). Did you mean 'image'?",
        f"error: unknown key 'max_job' in hydra.sweeper (in {study}). Did you mean 'max_jobs'?"]


def test_a_stand_in_that_serves_no_chat_endpoint_is_refused_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reference engine answers every arm under stand_in=IMAGE and serves no chat endpoint: a chat arm's
    study is refused by `check` (it passed, then failed mid-run), one line naming the arm and both fixes."""
    stand_in = ["study=vllm_cpu_chat", "stand_in=orchestrator/reference-engine:0.1.0"]
    assert cli.main(["check", *stand_in]) == 2
    assert errors(capsys) == [
        "error: arms.chat.endpoint='chat': must be an endpoint the stand-in serves (engine reference in "
        "orchestrator/reference-engine:0.1.0 serves no chat endpoint); run the study without stand_in, or set "
        "arms.chat.endpoint=completions"]
    assert cli.main(["run", *stand_in, f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    assert not (tmp_path / "run").exists()
    _, typed, _ = study_config(["study=vllm_cpu_chat"], [])
    assert config_check(typed).problems == []  # its own engine, vLLM, serves chat


@pytest.mark.parametrize(("names", "where", "written", "quoted"), [
    ("arms:\n  off:\n    image: x\n", "arms", "off, no or false as the boolean false", "'off'"),
    ("study:\n  variables:\n    off: [engine_args.seed]\n", "study.variables", "off, no or false", "'off'"),
    ("prompts:\n  prompts:\n    yes: {text: hi}\n", "prompts.prompts", "on, yes or true as the boolean true", "'on'"),
    ("prompts:\n  prompts:\n    null: {text: hi}\n", "prompts.prompts", "null or ~ as null", "'null'"),
])
def test_a_name_yaml_reads_as_a_boolean_says_to_quote_it(tmp_path: Path, names: str, where: str, written: str,
                                                        quoted: str) -> None:
    """An arm or prompt named off (YAML 1.1: false) once said 'Key False (bool) is incompatible with (str)'."""
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "mine.yaml").write_text("# @package _global_\ndefaults:\n  - load_point\n  - _self_\n"
                                                  + names)
    try:  # composing stops at some of them (Hydra), typing collects others
        found = study_config(["study=mine"], [tmp_path])[2]
    except ConfigError as exc:
        found = exc.problems
    [said] = found
    assert said.startswith(f"{where}: YAML read a name written {written}") and f"quote it, e.g. {quoted}" in said
    assert "incompatible" not in said.lower(), said


def test_a_missing_key_with_a_close_one_beside_it_suggests_that_before_adding_it() -> None:
    """Without the '+', a typo of a key the map has was told to be added ('+...max-num-seq=VALUE') and no more."""
    _, _, found = study_config(["study=load_point", "arms.baseline.engine_args.max-num-seq=8",
                                "arms.baseline.engine_args.zzz=8"], [])
    assert found == [
        "arms.baseline.engine_args.max-num-seq is not in the config (on the command line). Did you mean "
        "'max-num-seqs'? To add a new key instead, write '+arms.baseline.engine_args.max-num-seq=VALUE'",
        "arms.baseline.engine_args.zzz is not in the config (on the command line): to add a new key, write "
        "'+arms.baseline.engine_args.zzz=VALUE'"]
