"""`orchestrator ls [DIR]`: every run below a folder (study, date, arms, verdict, path), and `orchestrator show
RUN_DIR`: a run's verdict, the lines report.md opens with (report.json `front`), its environment and the cells
that diverged in the terminal (`--cell`: where one split). Both read what a run wrote (run.json and
report.json); nothing is re-computed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.analysis.attribution import Attribution
from orchestrator.analysis.locate_results import CellInside
from orchestrator.config.catalog import line
from orchestrator.errors import ConfigError, RecordError, counted
from orchestrator.record.paths import RunPaths
from orchestrator.report.locate import SECTION, answer_line
from orchestrator.report.probes import attribution_line


@dataclass
class RunSummary:
    path: Path
    study: str
    started: str  # UTC, to the minute
    arms: list[str]
    verdict: str


# A run.json without report.json and no mark of an interruption: kill -9 (or a lost machine) leaves no mark
NO_REPORT = "no report: killed before it (kill -9 leaves no mark) or still running; run --resume finishes a dead one"


def verdict(report: dict[str, Any] | None) -> str:
    """The run's state in a few words: interrupted or failed arms first, else the gate and report.json's
    `summary` (each arm's repeatability and each pair's result)."""
    if report is None:
        return NO_REPORT
    stopped = [f["arm"] for f in report.get("failures") or [] if f.get("status") == "interrupted"]
    if stopped:  # an interrupted run is not a failed measurement: resume finishes it
        return "interrupted: " + ", ".join(stopped) + " (run --resume finishes it)"
    if report.get("failures"):
        return "measurement failed: " + ", ".join(f["arm"] for f in report["failures"])
    gate = (report.get("gate") or {}).get("verdict")
    cells = report.get("cells") or []
    varying = sum(c.get("distinct_signatures") not in (None, 1) for c in cells)  # a report without `summary`
    said = report.get("summary") or (f"{varying} of {len(cells)} cells vary" if varying
                                     else f"no difference in {counted(len(cells), 'cell')}" if cells
                                     else "no cell measured")
    said = f"gate {gate}; {said}" if gate in ("passed", "failed") else said
    missing = report.get("incomplete") or []  # killed (kill -9 leaves no mark): requests of the protocol without a row
    return f"INCOMPLETE ({counted(len(missing), 'arm')} short; run --resume finishes it): {said}" if missing else said


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary(paths: RunPaths) -> RunSummary:
    meta = _read(paths.meta) or {}
    report = _read(paths.report_json)
    started = meta.get("started") or datetime.fromtimestamp(paths.meta.stat().st_mtime, UTC).isoformat()
    arms = [a["arm"] for a in (report or {}).get("arms", [])] or list(meta.get("planned_arms") or [])
    said = verdict(report) if report is not None else "interrupted, no report (run --resume finishes it)" \
        if meta.get("interrupted") else NO_REPORT
    if abandoned(paths):
        said = ABANDONED
    return RunSummary(paths.root, str(meta.get("study", "?")), started[:16].replace("T", " "), arms, said)


ABANDONED = "abandoned by the onset search's interrupted round: not counted, not to resume (its ../report.md)"


def abandoned(paths: RunPaths) -> bool:
    """A job dir an onset search's interrupted round left (onset.json `abandoned`): the resumed search planned
    its point again, so `run --resume` of it would measure nothing the search counts."""
    return paths.root.name in (_read(paths.root.parent / "onset.json") or {}).get("abandoned", [])


def runs(root: Path) -> list[RunSummary]:
    """Every run dir (a folder with run.json) below `root`, oldest first."""
    if not root.is_dir():
        raise RecordError(f"{root.absolute()} is not a folder: pass the folder that holds run directories "
                          "(default: runs, below the working directory)")
    found = [summary(RunPaths(meta.parent)) for meta in root.rglob("run.json")]
    return sorted(found, key=lambda r: (r.started, str(r.path)))


def render_runs(found: list[RunSummary]) -> str:
    if not found:
        return "no runs found"
    rows = [("study", "started (UTC)", "arms", "verdict", "path")]
    rows += [(r.study, r.started, ", ".join(r.arms) or "-", r.verdict, str(r.path)) for r in found]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)), row[4]]).rstrip()
                     for row in rows)


def show(run_dir: Path) -> str:
    """The verdict, report.md's opening lines and the environment of one run, as plain text; an interrupted run
    without a report: what its record holds."""
    paths = RunPaths(run_dir)
    meta = _read(paths.meta) or {}
    if paths.meta.is_file() and not paths.report_json.is_file():
        return show_interrupted(paths, meta)
    report = _report(run_dir)
    out = [f"study {report.get('study')}, run {report.get('run_id')} ({run_dir})", ""]
    out += [f"verdict: {verdict(report)}", ""]  # each arm's repeatability and each pair's result, in one line
    # report.md's first lines as they are: per arm start, correctness and cost; the verdict, gate and guard
    out += report.get("front") or [f"(report.json has no opening lines: `orchestrator compare {run_dir}` "
                                   "re-makes it)", ""]
    env = report.get("environment") or {}
    out += ["environment" + (f" (orchestrator host {env['host']})" if env.get("host") else "")]
    for arm in env.get("arms", []):
        libraries = ", ".join(f"{k} {v}" for k, v in (arm.get("packages") or {}).items()) or "-"
        out += [f"  {arm['arm']} ({arm['status']}): {arm.get('image_ref') or ''} {arm['identity']}".rstrip(),
                f"    engine {arm.get('engine_version') or '-'}; {libraries}; python {arm.get('python') or '-'}",
                f"    GPU {arm.get('gpu') or 'none'}; CUDA {arm.get('cuda') or '-'}; host {arm.get('host')}; "
                f"matrix key {arm.get('matrix_key') or '-'}",
                f"    $ {arm.get('command') or '(not recorded)'}"]
        out += [f"    digests not recorded: {arm['digests_note']}"] if arm.get("digests_note") else []
    out += ["", *(f"{what}: {command}" for what, command in (env.get("commands") or {}).items())]
    found = [Attribution.from_json(a) for a in report.get("attribution") or []]
    out += ["", "candidate causes (kernel probes):", *map(attribution_line, found)] if found else []
    inside = [CellInside.from_json(c) for c in report.get("inside") or []]
    out += ["", f"{SECTION.lower()} (digests):", *(f"  {c.label}: {answer_line(c)}" for c in inside),
            f"`orchestrator locate {run_dir} --cell ARM/PROMPT/PHASE`: the details"] if inside else []
    return "\n".join([*out, *diverged(report, run_dir)])


def show_interrupted(paths: RunPaths, meta: dict[str, Any]) -> str:
    """A run without its report (stopped by Ctrl-C or SIGTERM, killed, or still running): per arm, its status and
    the answers recorded."""
    from orchestrator.record.recorded import read_run

    run = read_run(paths, meta)
    status = {arm.arm: arm.status for arm in run.arms}  # the start that ran the protocol
    rows = run.reads.ledger().select(["arm", "role", "error"]).to_pylist()
    expected = meta.get("expected_requests_per_arm")
    state = f"INTERRUPTED at {meta['interrupted']}, before its report" if meta.get("interrupted") else NO_REPORT
    out = [f"study {meta.get('study')}, run {meta.get('run_id')} ({paths.root}): {state}", ""]
    for arm in dict.fromkeys([*(meta.get("planned_arms") or []), *status]):
        mine = [r for r in rows if r["arm"] == arm]
        answered = sum(r["error"] is None for r in mine)
        cut = sum(r["role"] == "interrupted" for r in mine)
        out.append(f"- {arm} ({status.get(arm, 'not started')}): {answered}"
                   + (f" of {expected}" if expected else "") + " requests answered"
                   + (f", {len(mine) - answered - cut} with an error" if len(mine) - answered - cut else "")
                   + (f", {cut} cut off by the stop" if cut else ""))
    if abandoned(paths):
        return "\n".join([*out, "", f"{ABANDONED}."])
    return "\n".join([*out, "", f"`orchestrator run --resume {paths.root}` sends the rest; `orchestrator compare "
                       f"{paths.root}` makes a report of what it has"])


def diverged(report: dict[str, Any], run_dir: Path) -> list[str]:
    """Every cell with more than one signature, where it first split, and how to see one."""
    labels = set(diverged_labels(report))
    cells = [c for c in report.get("cells") or [] if f"{c['arm']}/{c['prompt_id']}/{c['phase']}" in labels]
    if not cells:
        return []
    on_text = {e["label"]: e["window_start"] for e in report.get("explorer") or [] if e.get("basis") == "text"}
    on_logprobs = {e["label"]: split for e in report.get("explorer") or [] if (split := _logprob_split(e)) is not None}
    out = ["", f"cells that diverged ({len(cells)}):"]
    for c in cells:
        label, where = f"{c['arm']}/{c['prompt_id']}/{c['phase']}", c.get("first_divergent_position")
        tie = " (near-tie)" if c.get("near_tie") else ""
        token = "first other token at" if label in on_logprobs else "first split at token"
        out.append(f"  {label}: {c['distinct_signatures']} signatures in {c['n']}"
                   + (f", first split at token {on_logprobs[label]} (same token, other logprobs)"
                      if label in on_logprobs else "")
                   + (f", {token} {where}{tie}" if where is not None else "")
                   + (f", first split at character {on_text[label]} (signed on text)" if label in on_text else ""))
    return [*out, f"`orchestrator show {run_dir} --cell ARM/PROMPT/PHASE`: where one split"]


def show_cell(run_dir: Path, label: str) -> str:
    """Where one cell's completions split (or an A/B pair's, `ARM_B vs ARM_A/PROMPT/PHASE`), for stdout."""
    from orchestrator.report.explorer_md import from_json
    from orchestrator.report.explorer_text import render

    report = _report(run_dir)
    explored = {e["label"]: e for e in [*(report.get("explorer") or []), *(report.get("pair_explorer") or [])]}
    if label in explored:
        return render(from_json(explored[label]))
    cells = [f"{c['arm']}/{c['prompt_id']}/{c['phase']}" for c in report.get("cells") or []]
    if label not in cells:
        raise ConfigError(line("unknown-name", "--cell", label, list(explored) or cells))
    reason = "it has one signature" if label not in diverged_labels(report) else \
        f"the report explores at most a limited number; `orchestrator compare {run_dir}` re-makes it"
    from orchestrator.record.ledger import Reads  # pyarrow: only here

    if Reads(RunPaths(run_dir)).parts("digests"):
        beside = {c["label"] for c in report.get("inside") or []}  # the cells that ran beside others
        reason += (f"; `orchestrator locate {run_dir} --cell {label}` compares its digests against "
                   f"{'a sequential request' if label in beside else 'a request of another phase'}")
    raise RecordError(f"cell {label} has no explorer in {run_dir}/report.json: {reason}")


def _logprob_split(explored: dict[str, Any]) -> int | None:
    """Where an explored cell first split, when that is on logprobs alone (its tokens part later, if at all)."""
    splits = [c for c in explored["completions"][1:] if c.get("split") is not None]
    first = min(splits, key=lambda c: c["split"], default=None)
    return first["split"] if first is not None and first.get("split_kind") == "logprob" else None


def diverged_labels(report: dict[str, Any]) -> list[str]:
    return [f"{c['arm']}/{c['prompt_id']}/{c['phase']}" for c in report.get("cells") or []
            if c.get("distinct_signatures") not in (None, 1)]


def _report(run_dir: Path) -> dict[str, Any]:
    paths = RunPaths(run_dir)
    report = _read(paths.report_json)
    if report is None and not paths.meta.is_file():
        raise RecordError(f"{run_dir} is not a run directory (no run.json): pass a folder that `orchestrator run` "
                          "wrote; `orchestrator ls` lists them")
    if report is None:
        raise RecordError(f"no report.json in {run_dir}: `orchestrator compare {run_dir}` re-makes it from the "
                          "record")
    return report
