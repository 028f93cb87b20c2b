"""`orchestrator matrix`'s outputs: the run dirs read once each (run.json, the arms table, report.json, or the
comparison and cost re-made from the record where a run has none), their
cells merged (analysis/matrix.py) and written as matrix.md, matrix.json and matrix.csv (a row per cell and run,
sorted, so that the same runs give the same bytes in any order) and matrix.html (report/matrix_html.py)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

from orchestrator.analysis.compare import NEAR_TIE_GAP, compare
from orchestrator.analysis.cost import cost
from orchestrator.analysis.matrix import KEY_FIELDS, MatrixRow, Measurement, measurements, merge
from orchestrator.errors import RecordError
from orchestrator.record.paths import atomic_write_text, read_json
from orchestrator.record.recorded import Recorded, RecordedRun
from orchestrator.report.build import read_sources
from orchestrator.report.matrix_html import to_html
from orchestrator.report.matrix_sources import side_effects_of, sources

MEASURED = ("run_id", "arm", "phase", "agreement", "starts", "start_failures", "start_failure_upper_95", "n",
            "divergent", "divergence_lower_95", "divergence_upper_95", "output_tokens_per_s",
            "output_tokens_per_s_lower_95", "output_tokens_per_s_upper_95", "latency_p50_s", "latency_p90_s",
            "onset", "side_effects", "evidence", "rerun")
COLUMNS = (*KEY_FIELDS, *MEASURED)


def gather(run_dirs: list[Path]) -> list[MatrixRow]:
    """Every cell of the run dirs, merged; a dir that is no run dir: RecordError."""
    if not run_dirs:
        raise RecordError("no run dir given: pass one or more folders `orchestrator run` printed")
    found: list[Measurement] = []
    given = sources(run_dirs)
    for source, run in zip(given, read_sources([s.run_dir for s in given]), strict=True):
        found += measurements(run, str(run.paths.root), report_of(run), source.at, source.onset, side_effects_of(run))
    return merge(found)


def report_of(run: RecordedRun) -> dict[str, Any]:
    """report.json's cells and cost; where the run has none, re-made from its record as `build` makes them
    (nothing written into the run dir)."""
    if run.paths.report_json.is_file():
        report: dict[str, Any] = read_json(run.paths.report_json)
        return report
    meta = run.meta
    recorded = Recorded.of([run])
    run.reads.gather()
    comparison = compare(recorded, meta.baseline, meta.expectations,
                         NEAR_TIE_GAP if meta.near_tie_gap is None else meta.near_tie_gap, arm_pairs=meta.arm_pairs,
                         stop_after_divergences=(meta.sample_size or {}).get("stop_after_divergences"),
                         control=meta.control)
    costs = cost(recorded, comparison, meta.arm_pairs, [*([meta.baseline] if meta.baseline else [])])
    return {**comparison.to_json(), "cost": dataclasses.asdict(costs)}


def _number(value: float | None) -> str:
    return "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))


def records(rows: list[MatrixRow], out: Path) -> list[dict[str, str]]:
    """A row per cell and run: the cell's key, the run's measurement, its evidence relative to `out` and the
    command that re-runs it."""
    flat = []
    for row in rows:
        for m in row.measurements:
            report = Path(m.run_dir) / "report.md"  # a run without reports: its folder
            evidence = Path(os.path.relpath((report if report.is_file() else Path(m.run_dir)).resolve(),
                                            out.resolve())).as_posix()
            measured: dict[str, Any] = {name: getattr(m, name, None) for name in MEASURED}
            flat.append({**row.key.fields(),
                         **{k: _number(v) if not isinstance(v, str) else v for k, v in measured.items()},
                         "agreement": row.agreement, "evidence": evidence,
                         "rerun": m.rerun})
    return flat


def to_csv(flat: list[dict[str, str]]) -> str:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    return text.getvalue()


def to_markdown(rows: list[MatrixRow], flat: list[dict[str, str]]) -> str:
    differ = sum(row.agreement == "differ" for row in rows)
    twice = sum(len(row.measurements) > 1 for row in rows)
    lines = ["# Support matrix", "",
             f"{len(rows)} cells from {len({f['run_id'] for f in flat})} runs; {twice} measured more than once, "
             f"{differ} of those with measurements that differ (their 95 % divergence intervals do not overlap).",
             "", "Divergence: divergent of n measured requests, with its 95 % interval; throughput: output tokens/s, "
             "with the 95 % interval of its windows' mean; latency: p50/p90 s.", "",
             "| model | engine | runtime | quant | topology | hardware | flags | load point | run | arm | starts "
             "(failed, bound) | divergent/n [95 %] | agreement | onset | tokens/s | latency | "
             "what else its A/B changed | evidence | re-run |",
             "|" + "---|" * 19]
    for f in flat:
        starts = f"{f['starts']} ({f['start_failures']}, ≤{f['start_failure_upper_95']})" if f["starts"] else "-"
        rate = f"{f['divergent']}/{f['n']} [{f['divergence_lower_95']}, {f['divergence_upper_95']}]"
        interval = f"[{f['output_tokens_per_s_lower_95']}, {f['output_tokens_per_s_upper_95']}]"
        tokens = f"{f['output_tokens_per_s']} {interval}" if f["output_tokens_per_s"] else "-"
        latency = f"{f['latency_p50_s']}/{f['latency_p90_s']}" if f["latency_p50_s"] else "-"
        cells = [f"{f['model']}@{f['model_revision'][:19]}", f"{f['engine']} {f['engine_version']}", f["runtime"],
                 f["quantization"], f["topology"], f["hardware"], f"`{f['flags']}`", f["load_point"], f["run_id"],
                 f["arm"], starts, rate, f["agreement"], f["onset"], tokens, latency, f["side_effects"],
                 f"[report.md]({f['evidence']})",
                 f"`{f['rerun']}`"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write(run_dirs: list[Path], out: Path) -> list[MatrixRow]:
    """matrix.md, .html, .json and .csv of the run dirs into `out`."""
    rows = gather(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    flat = records(rows, out)
    atomic_write_text(out / "matrix.csv", to_csv(flat))
    atomic_write_text(out / "matrix.md", to_markdown(rows, flat))
    atomic_write_text(out / "matrix.html", to_html(COLUMNS, flat))
    atomic_write_text(out / "matrix.json", json.dumps({"columns": list(COLUMNS), "rows": flat}, indent=2,
                                                      sort_keys=True) + "\n")
    return rows
