"""Soak: start small studies and interrupt them at random moments, with Ctrl-C (SIGINT) or kill -9, many times;
count what was left running and what was lost. Run by hand (not in CI); figures go to docs/reliability.md.

    python scripts/soak.py --runs 50 [--runtime process|docker] [--seed 1]

Left behind: a server process (its state record) or a container whose owner was the killed orchestrator,
10 s after the kill. Lost rows (Ctrl-C only; a kill -9 loses what was not yet flushed, which `run --resume`
re-sends): completions the server logged as answered, minus the rows the record holds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDY = ["~arms.wide_batch", "protocol.phases.sequential.repeats=40", "protocol.phases.concurrent.repeats=8",
         "protocol.phases.concurrent.batches=3", "protocol.request.max_tokens=8"]
# The arm: tests/faults/server.py answering well (it logs every completion it answers, so lost rows count).
PROCESS = ["runtime=process", "arm@arms.baseline=reference_process", "arms.baseline.build.context=tests/faults",
           "arms.baseline.command=[python3,tests/faults/server.py]", "arms.baseline.knobs.entrypoint=null",
           "arms.baseline.knobs.command=null", "arms.baseline.metrics_path=null"]
DOCKER = ["arms.baseline.image=orchestrator/debian-python:bookworm", "arms.baseline.build.context=null",
          "arms.baseline.command=[python3,/faults/server.py,--host,0.0.0.0]", "arms.baseline.knobs.command=null",
          "arms.baseline.metrics_path=null", f"arms.baseline.volumes=[{{host: {ROOT / 'tests' / 'faults'}, "
          "container: /faults}]"]


def leftovers(state: Path, owner_pid: int, docker: bool) -> list[str]:
    found = [p.parent.name for p in state.glob("*/process.json")]
    if docker:
        out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=org.orchestrator.owner.pid={owner_pid}"],
                             capture_output=True, text=True).stdout.split()
        found += out
    return found


def lost_rows(run_dir: Path) -> int | None:
    """Completions the server logged minus rows recorded; None when the record holds no logs (killed early)."""
    import pyarrow.parquet as pq

    logs_dir, responses_dir = run_dir / "data" / "logs", run_dir / "data" / "responses"
    if not logs_dir.is_dir() or not any(logs_dir.glob("*.parquet")):
        return None
    logged = sum("POST /v1/completions" in row["text"] for row in pq.read_table(logs_dir).to_pylist())
    rows = pq.read_table(responses_dir).num_rows if any(responses_dir.glob("*.parquet")) else 0
    return max(0, logged - rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--runtime", choices=("process", "docker"), default="process")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    docker = args.runtime == "docker"
    totals = {"runs": 0, "sigint": 0, "kill9": 0, "left_behind": 0, "lost_rows": 0, "checked_rows": 0}
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        state = Path(tmp) / "state"
        env = {**os.environ, "ORCHESTRATOR_PROCESS_DIR": str(state)}
        for index in range(args.runs):
            run_dir = Path(tmp) / f"run-{index}"
            argv = [sys.executable, "-m", "orchestrator", "run", f"hydra.run.dir={run_dir}", *STUDY,
                    *(DOCKER if docker else PROCESS)]
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            time.sleep(rng.uniform(0.3, 8.0))
            how = rng.choice(("sigint", "kill9"))
            os.kill(proc.pid, signal.SIGINT if how == "sigint" else signal.SIGKILL)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and leftovers(state, proc.pid, docker):
                time.sleep(0.25)
            left = leftovers(state, proc.pid, docker)
            lost = lost_rows(run_dir) if how == "sigint" else None
            totals["runs"] += 1
            totals[how] += 1
            totals["left_behind"] += len(left)
            if lost is not None:
                totals["checked_rows"] += 1
                totals["lost_rows"] += lost
            print(json.dumps({"run": index, "how": how, "exit": proc.returncode, "left": left, "lost_rows": lost}),
                  flush=True)
    print(json.dumps(totals))
    return 0 if totals["left_behind"] == 0 and totals["lost_rows"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
