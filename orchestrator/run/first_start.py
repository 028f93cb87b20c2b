"""The `run` verb's runner: a new run's first arm is started right after the checks, in a thread, as an early
start that `StudyRunner.run` takes up as the arm's own; its engine loads while Hydra records the run dir and the
study writes its first files (sweep/app.py `run_composed`). The reaper exists before (run/execute.py `begin`)."""

from __future__ import annotations

from orchestrator.run import placement
from orchestrator.run.arms import StudyRunner


class FirstStartRunner(StudyRunner):
    def start_first(self) -> None:
        """The first arm started now (not for a resumed run, nor for arms placed in waves)."""
        first = next(iter(self.arms.values()), None)
        if first is None or self.resume is not None or placement.uses_placement(self.config):
            return
        launch = self._new_launch(first, self._runtime_for(first))
        self._early[first.name] = (launch, self._starter.submit(self._launch, launch))
