"""`run` composes a single study once and runs it through Hydra's run_job; a sweep (-m, or a config that sets
hydra.mode=MULTIRUN) goes through Hydra's main. Routing only: nothing is started."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.config.schema import Config
from orchestrator.config.search import CommandLine
from orchestrator.run.refusals import Refusals
from orchestrator.sweep import app


class _Routed(Exception):
    pass


def _route(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def single(composed: Any, typed: Config, checked: Refusals) -> int:
        seen.update(single=typed)
        raise _Routed

    def sweep(overrides: list[str], dirs: list[Any]) -> list[list[str]]:
        seen.update(sweep=overrides)
        raise _Routed

    monkeypatch.setattr(app, "run_composed", single)
    monkeypatch.setattr(app, "refusals", lambda *args, **kwargs: Refusals([]))  # no image, no knob listing
    monkeypatch.setattr(app, "jobs", sweep)
    return seen


@pytest.mark.parametrize(("argv", "route"), [
    (["protocol=probe"], "single"),
    (["-m", "protocol=probe"], "sweep"),
    (["protocol=probe", "hydra.mode=MULTIRUN"], "sweep"),  # the config makes itself a sweep
])
def test_a_single_study_is_composed_once_and_a_sweep_goes_to_hydra(monkeypatch: pytest.MonkeyPatch,
                                                                   argv: list[str], route: str) -> None:
    seen = _route(monkeypatch)
    with pytest.raises(_Routed):
        app.run_with_hydra(CommandLine.parse(argv))
    assert list(seen) == [route]
    if route == "single":
        assert isinstance(seen["single"], Config) and seen["single"].protocol.name == "probe"
