"""`orchestrator locate RUN --cell ARM/PROMPT/PHASE [--against PHASE] [--probe]`: where inside the model a
cell's two requests first split (analysis/locate.py), as text (report/locate.py); `--probe` runs the op probe at
that module's shapes in the arm's image or interpreter, through `orchestrator probe`'s machinery
(run/kernel_probes.py: the rows land in RUN's probes table and RUN/probes.md), and adds its verdict."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orchestrator.analysis.locate_results import ProbeAsk, ProbeVerdict
from orchestrator.console import Outcome, answer, note
from orchestrator.errors import RecordError, UsageError
from orchestrator.record.paths import RunPaths


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def locate_verb(argv: list[str]) -> Outcome:
    from orchestrator.analysis.locate import locate
    from orchestrator.report.locate import render

    parser = _Parser(prog="orchestrator locate", allow_abbrev=False, description="Where inside the model a cell's "
                     "two requests first split, from the digests a hooked engine recorded (docs/locate.md).")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--cell", required=True, metavar="ARM/PROMPT/PHASE", help="the cell (`orchestrator show RUN` "
                        "lists those that diverged)")
    parser.add_argument("--against", metavar="PHASE", help="compare a request of the cell against one of this phase "
                        "(default: the cell's two branches; one signature: the first sequential phase)")
    parser.add_argument("--probe", action="store_true", help="run the op probe at the split's shapes in the arm's "
                        "image or interpreter and add its verdict (its rows go to RUN's probes table)")
    parser.add_argument("--docker-host", default=None, help="the Docker host --probe runs on (default: DOCKER_HOST)")
    args = parser.parse_args(argv)
    if not RunPaths(args.run_dir).meta.is_file():
        raise RecordError(f"{args.run_dir} is not a run directory (no run.json): pass a folder that `orchestrator "
                          "run` wrote; `orchestrator ls` lists them")
    located = locate(RunPaths(args.run_dir), args.cell, args.against)
    if not args.probe:
        return answer(render(located))
    if located.probe is None:
        why = "the op probe does not apply to this split (above)" if located.no_probe else \
            "no op probe matches the first difference" if located.difference else "identical digests, no split"
        return answer(render(located)) + note(f"--probe: {why}; nothing ran")
    located.verdict = run_probe(located.probe, args.run_dir, args.docker_host)
    return answer(render(located))


def run_probe(ask: ProbeAsk, run_dir: Path, docker_host: str | None) -> ProbeVerdict:
    """The probe as `ask.command` runs it: in the study's arm (its image, or its interpreter and code)."""
    from orchestrator.config.locations import INHERIT_ENV, PROJECT_ROOT
    from orchestrator.run.kernel_probes import probe, probe_config
    from orchestrator.runtime import make_runtime

    config = probe_config(ask.preset, ask.sets, ask.arm, None, [], run_dir)
    local = bool(config.of_arm and config.of_arm.on_host)
    runtime = make_runtime("process" if local else "docker", docker_host=docker_host, inherit_env=INHERIT_ENV,
                           workdir=PROJECT_ROOT)
    return verdict(probe(config, runtime, run_dir, local, None).rows)


def verdict(rows: list[dict[str, Any]]) -> ProbeVerdict:
    """M-variant when row 0 of any arm's output changed from its value at the smallest M."""
    ran = [r for r in rows if r.get("unsupported") is None and r.get("process") in (1, None)]
    if not ran:
        reasons = sorted({str(r.get("unsupported")) for r in rows})
        return ProbeVerdict(None, "the probe ran no cell here: " + "; ".join(reasons[:2]))
    changed: dict[str, list[int]] = {}
    for row in ran:
        if row.get("row0_bits_equal_m1") is False:
            changed.setdefault(str(row["arm"]), []).append(int(row["M"]))
    sizes = ", ".join(str(m) for m in sorted({int(r["M"]) for r in ran}))
    if not changed:
        return ProbeVerdict(False, f"not M-variant: row 0 bitwise identical at M = {sizes} "
                                   f"({', '.join(sorted({str(r['arm']) for r in ran}))})")
    said = "; ".join(f"{arm} at M = {', '.join(map(str, sorted(ms)))}" for arm, ms in changed.items())
    return ProbeVerdict(True, f"M-variant: row 0 differs from its value at M = 1 for {said}")
