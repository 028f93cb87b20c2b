"""Property tests over the config layer: any override of any leaf, of any type or value, gives a valid plan
or one clear error per problem (exit 2), never a traceback or an internal error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import cli

LEAVES = [
    "protocol.request.max_tokens", "protocol.request.temperature", "protocol.request.logprobs",
    "protocol.request.prompt_logprobs", "protocol.request.echo", "protocol.request.seed", "protocol.request_timeout_s",
    "protocol.significant_digits", "protocol.endpoint", "protocol.phases.sequential.repeats",
    "protocol.phases.sequential.kind", "protocol.phases.concurrent.batches", "protocol.phases.concurrent.repeats",
    "arms.baseline.port", "arms.baseline.startup_timeout_s", "arms.baseline.gpus", "arms.baseline.image",
    "arms.baseline.engine_args.max-num-seqs", "arms.wide_batch.knobs.timeout_s", "arms.baseline.shm_size",
    "arms.baseline.privileged", "arms.baseline.command", "study.baseline", "study.allow_confounded",
    "gate.max_divergence_rate", "runtime.stop_timeout_s", "runtime.kind", "prompts.prompts.capital.text",
    "prompts.prompts.capital.repeat_to_chars", "prompts.prompts.count.expect.min_share", "stand_in",
]
VALUES = st.one_of(
    st.integers(min_value=-10**12, max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: str(f).replace("inf", "inf")),
    st.sampled_from(["true", "false", "null", "[]", "[1,2]", "{}", "{a: 1}", "''", "abc", "sequential", "docker",
                     "process", "all", "0,1", "baseline", "nope", "'x y'", "1e400", "-0", "nan"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(LEAVES), VALUES), min_size=1, max_size=4))
def test_any_override_gives_a_plan_or_one_clear_line_per_problem(capsys: pytest.CaptureFixture[str],
                                                                 overrides: list[tuple[str, str]]) -> None:
    argv = ["plan", *(f"{key}={value}" for key, value in overrides)]
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status in (0, 2), (argv, err)
    assert "Traceback" not in err and "internal error" not in err
    if status == 0:
        assert out.startswith("# study")
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and all(line.startswith("error: ") for line in lines), (argv, err)
