"""One verbs layer (issue 46): every verb is `verbs/NAME.py`'s `main`, the only place that parses a verb's
arguments, and "a sweep, or one run?" is answered in one place."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.config.search import CommandLine

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"
# Files shipped into an arm's image and run there, with a command line of their own (not a verb's).
SHIPPED = {"probes"}


def test_every_verb_is_a_module_of_verbs_with_main_and_every_module_a_verb() -> None:
    modules = {p.stem for p in (PACKAGE / "verbs").glob("*.py")} - {"__init__", "arguments"}
    assert modules == set(cli.VERBS)
    for verb in cli.VERBS:
        main = importlib.import_module(f"orchestrator.verbs.{verb}").main
        assert callable(main) and list(main.__annotations__) == ["argv", "return"], verb
        assert f"orchestrator {verb}" in cli.USAGE, f"{verb} is missing from the usage text"


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text(encoding="utf-8")) for p in PACKAGE.rglob("*.py")
            if p.relative_to(PACKAGE).parts[0] not in SHIPPED]


def test_only_verbs_arguments_parses_a_command_line() -> None:
    parsing = [str(p.relative_to(PACKAGE)) for p, text in _sources() if re.search(r"^\s*import argparse\b", text, re.M)]
    assert parsing == ["verbs/arguments.py"]


def test_sweep_or_run_is_decided_by_the_command_line_alone() -> None:
    """-m and the config's own hydra.mode are read in config/search.py's CommandLine only."""
    deciding = sorted(str(p.relative_to(PACKAGE)) for p, text in _sources() if re.search(r"\bMULTIRUN\b", text)
                      and p.name != "__main__.py")  # __main__'s docstring names the mode
    assert deciding == ["config/search.py"]


@pytest.mark.parametrize(("argv", "sweeps", "to_hydra"), [
    (["study=x"], False, False),
    (["-m", "study=x"], True, False),
    (["--multirun", "a=1,2"], True, False),
    (["--cfg", "job", "study=x"], False, True),
    (["-m", "--info", "searchpath"], True, True),
])
def test_the_command_line_says_sweep_or_run(argv: list[str], sweeps: bool, to_hydra: bool) -> None:
    line = CommandLine.parse(argv, environ={})
    assert (line.sweeps(), line.to_hydra()) == (sweeps, to_hydra)
    assert [o for o in line.overrides if "=" in o] == [a for a in argv if "=" in a]


def test_a_config_that_makes_itself_a_sweep_is_one() -> None:
    from orchestrator.run.refusals import study_config

    line = CommandLine.parse(["hydra.mode=MULTIRUN"], environ={})
    composed = study_config(line.overrides, line.dirs)[0]
    assert not line.sweeps() and line.sweeps(composed)


def test_a_flag_a_verb_does_not_take_is_one_line_naming_what_it_takes() -> None:
    from orchestrator.errors import ConfigError
    from orchestrator.verbs.arguments import hydra_line

    with pytest.raises(ConfigError, match=r"plan does not take -m: it takes Hydra overrides and --like"):
        hydra_line("plan", ["-m", "study=x"], "--like")
    assert hydra_line("plan", ["--like=runs/x", "study=x"], "--like").value("--like", "a run dir") == "runs/x"


def test_check_of_a_sweep_checks_every_job_and_names_the_one_refused(tmp_path: Path) -> None:
    """`check -m` composes and refuses each job as `run -m` does, before any starts: a job's bad value is a
    line naming the job (the first job refused here, so nothing reaches Docker)."""
    from orchestrator.errors import ConfigError
    from orchestrator.verbs import check

    with pytest.raises(ConfigError, match=r"^job 1 \(protocol=probe protocol.request.max_tokens=0 [^)]*\): "
                                          r"protocol.request.max_tokens=0: must be at least 1"):
        check.main(["-m", "protocol=probe", "protocol.request.max_tokens=0,4", f"hydra.sweep.dir={tmp_path}/s"])
