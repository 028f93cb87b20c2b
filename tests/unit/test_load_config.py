"""A bad load point is one line each, all at once, exit 2 before anything starts (config/validate.py)."""

from __future__ import annotations

import pytest

from orchestrator import cli
from orchestrator.config.validate import MAX_RATE_PER_S, load

AT = "protocol.phases.load.load"


def _problems(*overrides: str) -> list[str]:
    from orchestrator.errors import ConfigError

    try:
        load(["study=load_point", *overrides])
    except ConfigError as exc:
        return list(exc.problems)
    return []


def test_the_shipped_load_point_is_valid() -> None:
    assert _problems() == []


@pytest.mark.parametrize(("overrides", "said"), [
    ([f"{AT}.rate_per_s=-1"], f"{AT}.rate_per_s=-1.0: must be > 0"),
    ([f"{AT}.rate_per_s=0"], f"{AT}.rate_per_s=0.0: must be > 0"),
    ([f"{AT}.rate_per_s={MAX_RATE_PER_S * 2:g}"], "the most this machine's load generator was measured to pace"),
    ([f"{AT}.duration_s=10"], "one stop, a count or a duration (both requests and duration_s set)"),
    ([f"{AT}.requests=null"], "one stop, a count or a duration (neither requests nor duration_s set)"),
    ([f"{AT}.concurrency=0"], f"{AT}.concurrency=0: must be >= 1"),
    ([f"{AT}.rate_per_s=null", f"{AT}.concurrency=null"], "a rate, a concurrency, or both"),
    ([f"{AT}.arrivals=gamma", f"{AT}.gamma_shape=0"], f"{AT}.gamma_shape=0.0: must be > 0 with arrivals=gamma"),
    ([f"{AT}.windows=0"], f"{AT}.windows=0: must be >= 1"),
    ([f"{AT}.probe_every=0"], f"{AT}.probe_every=0: must be >= 1"),
    ([f"{AT}.grace_s=-1"], f"{AT}.grace_s=-1.0: must be >= 0"),
    ([f"{AT}.background_max_tokens=[]"], "a non-empty list of max_tokens >= 1"),
    ([f"{AT}.background_max_tokens=[8,0]"], "a non-empty list of max_tokens >= 1"),
    ([f"{AT}.background=no_such_set"], "load.background no_such_set: no prompt set no_such_set.yaml"),
    ([f"{AT}.background=synthetic", f"{AT}.synthetic.prefix_share=1.5"],
     "synthetic.prefix_share=1.5: must be in [0, 1]"),
    ([f"{AT}.synthetic.input_words_mean=0"], f"{AT}.synthetic.input_words_mean=0.0: must be >= 1"),
    ([f"{AT}.synthetic.prompts=0"], f"{AT}.synthetic.prompts=0: must be >= 1, or null"),
    ([f"{AT}.background=study", f"{AT}.synthetic.prefix_share=0.5"], "must be 0 unless background=synthetic"),
    ([f"{AT}.warmup.requests=2", f"{AT}.warmup.duration_s=1"], "only with warmup.requests=0 (one stop)"),
])
def test_a_bad_load_point_is_one_line_naming_the_fix(overrides: list[str], said: str) -> None:
    found = _problems(*overrides)
    assert len(found) == 1 and said in found[0], found


def test_check_refuses_a_bad_load_point_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "study=load_point", f"{AT}.rate_per_s=-1", f"{AT}.windows=0"]) == 2
    err = capsys.readouterr().err
    assert f"{AT}.rate_per_s=-1.0" in err and f"{AT}.windows=0" in err
