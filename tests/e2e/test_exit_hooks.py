"""A sweep ends through the interpreter's exit hooks (a joblib launcher's pool is shut down by them), also
where the study's own config makes it a sweep (`hydra.mode: MULTIRUN`), and with the sweep's status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PROBE = '''
import atexit
import os

from hydra.experimental.callback import Callback


class ExitProbe(Callback):
    """Registers an exit hook when the sweep starts, as a launcher's pool does."""

    def on_multirun_start(self, config, **kwargs):
        path = os.environ["EXIT_PROBE_FILE"]
        atexit.register(lambda: open(path, "w").write("exit hooks ran\\n"))
'''
STUDY = '''# @package _global_
defaults:
  - /arm@arms.a: reference_process
study:
  name: exits
arms:
  a:
    command: [python3, -c, "raise SystemExit(1)"]  # the arm fails at once: the sweep's status is 4
hydra:
  mode: MULTIRUN
  callbacks:
    exit_probe:
      _target_: exit_probe.ExitProbe
'''


def test_a_sweep_its_config_turns_on_runs_the_exit_hooks_and_exits_with_its_status(tmp_path: Path) -> None:
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "exit_probe.py").write_text(PROBE)
    (tmp_path / "conf" / "study").mkdir(parents=True)
    (tmp_path / "conf" / "study" / "exits.yaml").write_text(STUDY)
    hooked = tmp_path / "hooked"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path / "py")]),
           "EXIT_PROBE_FILE": str(hooked)}
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--config-dir", str(tmp_path / "conf"),
                           "study=exits", "runtime=process", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stderr[-3000:]
    assert (tmp_path / "sweep" / "0" / "run.json").is_file()  # it ran as a sweep's job
    assert hooked.read_text() == "exit hooks ran\n", done.stderr[-3000:]
