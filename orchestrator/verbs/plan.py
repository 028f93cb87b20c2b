"""`orchestrator plan [--config-dir DIR] [OVERRIDES] [--like RUN_DIR]`: each arm's equivalent `docker run` (or
command line), the requests its cells take and their expected engine time (run/plan.py), nothing started."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome, answer, note
from orchestrator.verbs.arguments import asks_help, hydra_line

USAGE = """usage: orchestrator plan [--config-dir DIR] [HYDRA OVERRIDES...] [--like RUN_DIR]

Each arm's equivalent `docker run` (or command line), its waves, the requests its cells take and, with
--like RUN_DIR (an earlier run of the study), their expected engine time. Refused as `run` would refuse it."""


def main(argv: list[str]) -> Outcome:
    from orchestrator import config
    from orchestrator.run.execute import preflight
    from orchestrator.run.plan import absent_images, render

    if asks_help(argv):
        return answer(USAGE)
    line = hydra_line("plan", argv, "--like")
    like = line.value("--like", "a run dir: plan ... --like RUN_DIR")
    typed = config.to_typed(config.compose(line.overrides, line.dirs))
    arms = preflight(typed)  # the checks `run` makes: a plan of a study that would be refused is refused
    warnings = (f"warning: {w}" for w in absent_images(typed, arms))  # the plan itself does not depend on them
    return note(*warnings) + answer(render(typed, Path(like) if like else None, arms).removesuffix("\n"))
