"""Speed and memory of the comparison, side by side with a plain per-row Python version and detllm.

    .venv/bin/python bench/compare_bench.py --responses 100000 --positions 64 --top-k 20 --workdir /tmp/bench
    .venv/bin/python bench/compare_bench.py --responses 1000000 --positions 16 --top-k 5 \\
        --scale-sizes 100000,1000000 --impls ours --workdir /tmp/bench-1m
    .venv/bin/python bench/compare_bench.py --large --scale-sizes 1000000,2000000,4000000 --workdir /tmp/bench-10m

A synthetic record is written straight from numpy/pyarrow (no per-row Python dicts) in the schema of
orchestrator.record.tables: cells (arm, prompt_id, phase) of `--cell-rows` rows; in most cells a known share
of the warm rows diverges from a known generated position onwards (two variants), so every cell's
answer is known in advance and each implementation's answers are checked before its speed is shown.

Each implementation runs in a fresh subprocess, `--repeats` times alternated (times are medians); peak
memory is the child's own VmHWM (/proc/self/status, read by the child at its end), reported as is and minus
the child's RSS right after its imports. wait4's ru_maxrss is printed too but not used: Linux carries the
RSS the child had between fork and exec (a share of this parent's) into it. detllm (PyPI 0.1.1) runs from its
own venv (`--detllm`, default /tmp/detllm-venv/bin/detllm) on the same responses exported to its
trace.jsonl format; see export_traces() for what A and B are.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
TREE = os.environ.get("COMPARE_BENCH_TREE", str(ROOT))  # --before: a child runs another checkout's orchestrator
if TREE not in sys.path:
    sys.path.insert(0, TREE)

from orchestrator.analysis.signatures import text_signature, token_ids_signature, top_logprobs_signature  # noqa: E402
from orchestrator.record.paths import RunPaths  # noqa: E402

try:  # the schemas moved to record/schemas.py; an older checkout (--before) has them in record/tables.py
    from orchestrator.record.schemas import RESPONSES, SCHEMA_VERSION
except ImportError:
    from orchestrator.record.tables import RESPONSES, SCHEMA_VERSION  # type: ignore[attr-defined,no-redef]
from orchestrator.record.tables import iter_batches  # noqa: E402

VOCAB = 50_000
SHIFT = 12_347  # variant v's tokens are (base + v * SHIFT) % VOCAB: never the base token for v in 1, 2
LOGPROB_STEP = 0.25  # variant v's logprobs are the base's minus v * LOGPROB_STEP
PROMPT_TOKENS = 32  # input ids per prompt in the detllm export
ARMS = ("base", "cand")
PHASE = "seq"


# ---------------------------------------------------------------------------------------------------
# Synthetic record with known answers
# ---------------------------------------------------------------------------------------------------

@dataclass
class Expected:
    """What every implementation must find, per cell, plus what the exporter needs."""

    cells: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    keys: list[tuple[str, str, str]] = field(default_factory=list)
    combo_tokens: np.ndarray | None = None  # [cells * 3, T] tokens of (cell, variant)
    combo_logprobs: np.ndarray | None = None  # [cells * 3, T]
    divergent_rows: int = 0
    responses: int = 0


def _cell_sizes(responses: int, cell_rows: int) -> list[int]:
    sizes = [cell_rows] * (responses // cell_rows)
    if responses % cell_rows:
        sizes.append(responses % cell_rows)
    return sizes


def generate(root: Path, responses: int, positions: int, top_k: int, cell_rows: int = 1000,
             divergent_share: float = 0.05, part_rows: int = 4000, seed: int = 0) -> Expected:
    """Write RUN/data/responses/*.parquet; return the known per-cell answers."""
    if positions < 1 or top_k < 2:
        raise ValueError("need positions >= 1 and top-k >= 2 (the top1-top2 gap)")
    rng = np.random.default_rng(seed)
    sizes = _cell_sizes(responses, cell_rows)
    n_cells = len(sizes)
    half = (n_cells + 1) // 2
    keys = [(ARMS[0] if c < half else ARMS[1], f"p{(c if c < half else c - half):05d}", PHASE)
            for c in range(n_cells)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    # Base response of each cell: K candidate tokens and decreasing logprobs per position; the
    # generated token is the rank-1 candidate.
    top_tok = np.stack([rng.choice(VOCAB, size=top_k, replace=False) for _ in range(n_cells * positions)])
    top_tok = top_tok.reshape(n_cells, positions, top_k).astype(np.int64)
    first = -rng.uniform(0.0, 0.3, size=(n_cells, positions, 1))
    gaps = rng.uniform(1e-3, 1.0, size=(n_cells, positions, top_k - 1))
    top_lp = np.concatenate([first, first - np.cumsum(gaps, axis=2)], axis=2)
    # Variants 1 and 2 replace every position from the cell's divergence point p onwards.
    div_pos = rng.integers(0, positions, size=n_cells)
    combo_top_tok = np.repeat(top_tok[:, None], 3, axis=1)  # [C, 3, T, K]
    combo_top_lp = np.repeat(top_lp[:, None], 3, axis=1)
    after = np.arange(positions)[None, :] >= div_pos[:, None]  # [C, T]
    for v in (1, 2):
        combo_top_tok[:, v][after] = (top_tok[after] + v * SHIFT) % VOCAB
        combo_top_lp[:, v][after] = top_lp[after] - v * LOGPROB_STEP
    combo_top_tok = combo_top_tok.reshape(n_cells * 3, positions, top_k)
    combo_top_lp = combo_top_lp.reshape(n_cells * 3, positions, top_k)
    ordered = -np.sort(-combo_top_lp, axis=2)
    combo_gaps = ordered[:, :, 0] - ordered[:, :, 1]
    combo_tokens = combo_top_tok[:, :, 0].copy()
    combo_logprobs = combo_top_lp[:, :, 0].copy()

    vocab_strings = [f"w{i}" for i in range(VOCAB)]
    vocab = pa.array(vocab_strings, pa.string())
    combo_text, combo_sig_text, combo_sig_ids, combo_sig_top = [], [], [], []
    for combo in range(n_cells * 3):
        ids = combo_tokens[combo].tolist()
        text = " ".join(vocab_strings[t] for t in ids)
        top = [[{"token": vocab_strings[t], "logprob": lp} for t, lp in zip(tt, ll, strict=True)]
               for tt, ll in zip(combo_top_tok[combo].tolist(), combo_top_lp[combo].tolist(), strict=True)]
        combo_text.append(text)
        combo_sig_text.append(text_signature(text))
        combo_sig_ids.append(token_ids_signature(ids))
        combo_sig_top.append(top_logprobs_signature(top))

    # Which rows diverge: the first row of each arm is cold (compared apart, never divergent); every
    # tenth cell has no divergence at all; elsewhere round(share * warm) rows, variant 1 or 2.
    cell_of = np.repeat(np.arange(n_cells), sizes)
    variant = np.zeros(responses, dtype=np.int64)
    cold = np.zeros(responses, dtype=bool)
    cold[starts[0]] = True
    if n_cells > half:
        cold[starts[half]] = True
    expected = Expected(keys=keys, combo_tokens=combo_tokens, combo_logprobs=combo_logprobs, responses=responses)
    for c in range(n_cells):
        warm_rows = np.arange(starts[c], starts[c] + sizes[c])
        warm_rows = warm_rows[~cold[warm_rows]]
        n = len(warm_rows)
        d = 0 if c % 10 == 3 else round(divergent_share * n)
        d = min(d, (n - 1) // 2)  # the base must stay the modal signature
        chosen = rng.choice(warm_rows, size=d, replace=False) if d else np.zeros(0, dtype=np.int64)
        variant[chosen] = rng.integers(1, 3, size=d)
        present = sorted(set(variant[chosen].tolist()))
        p = int(div_pos[c])
        expected.cells[keys[c]] = {
            "n": n, "divergent": d, "distinct_signatures": 1 + len(present),
            "distinct_completions": 1 + len(present),
            "first_divergent_position": p if d else None,
            "top1_top2_gap": float(top_lp[c, p, 0] - top_lp[c, p, 1]) if d else None,
            "max_generated_spread": LOGPROB_STEP * max(present) if d else 0.0,
        }
        expected.divergent_rows += d

    folder = RunPaths(root).make().table("responses")
    for old in folder.glob("*.parquet"):
        old.unlink()
    schema = RESPONSES.with_metadata({"orchestrator.schema_version": SCHEMA_VERSION,
                                      "orchestrator.table": "responses"})
    arm_names = np.array([k[0] for k in keys], dtype=object)
    prompt_names = np.array([k[1] for k in keys], dtype=object)
    for part, lo in enumerate(range(0, responses, part_rows)):
        hi = min(lo + part_rows, responses)
        rows = hi - lo
        c = cell_of[lo:hi]
        combo = c * 3 + variant[lo:hi]
        T, K = positions, top_k

        def lists(values: pa.Array, width: int, count: int) -> pa.Array:
            return pa.ListArray.from_arrays(pa.array(np.arange(0, count * width + 1, width, dtype=np.int32)), values)

        tok = combo_tokens[combo].ravel()
        top_struct = pa.StructArray.from_arrays(
            [vocab.take(pa.array(combo_top_tok[combo].ravel())), pa.array(combo_top_lp[combo].ravel())],
            fields=list(RESPONSES.field("top_logprobs").type.value_type.value_type))
        columns: dict[str, pa.Array] = {
            "study": pa.array(["bench"] * rows), "run_id": pa.array(["bench-run"] * rows),
            "arm": pa.array(arm_names[c].tolist()), "prompt_id": pa.array(prompt_names[c].tolist()),
            "phase": pa.array([PHASE] * rows), "phase_kind": pa.array(["sequential"] * rows),
            "batch_id": pa.array(np.arange(lo, hi) - starts[c]),
            "repeat": pa.array(np.arange(lo, hi) - starts[c]),
            "request_index": pa.array(np.arange(lo, hi)),
            "cold": pa.array(cold[lo:hi]),
            "http_status": pa.array(np.full(rows, 200)),
            "completion_text": pa.array(combo_text, pa.string()).take(pa.array(combo)),
            "finish_reason": pa.array(["length"] * rows),
            "completion_tokens": pa.array(np.full(rows, positions)),
            "token_ids": lists(pa.array(tok), T, rows),
            "tokens": lists(vocab.take(pa.array(tok)), T, rows),
            "token_logprobs": lists(pa.array(combo_logprobs[combo].ravel()), T, rows),
            "top_logprobs": lists(lists(top_struct, K, rows * T), T, rows),
            "top_gaps": lists(pa.array(combo_gaps[combo].ravel()), T, rows),  # as the writer computes them
            "sig_text": pa.array(combo_sig_text).take(pa.array(combo)),
            "sig_token_ids": pa.array(combo_sig_ids).take(pa.array(combo)),
            "sig_top_logprobs": pa.array(combo_sig_top).take(pa.array(combo)),
        }
        arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(rows, f.type) for f in schema]
        table = pa.Table.from_arrays(arrays, schema=schema)
        tmp = folder / f".r-{part:05d}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, folder / f"r-{part:05d}.parquet")
    return expected


# ---------------------------------------------------------------------------------------------------
# (a) plain per-row Python implementation of the same cell metrics
# ---------------------------------------------------------------------------------------------------

PLAIN_COLUMNS = ["arm", "prompt_id", "phase", "cold", "error", "sig_text", "sig_top_logprobs", "token_ids",
                 "token_logprobs", "top_logprobs"]


def plain_compare(root: Path) -> list[dict[str, Any]]:
    """Row by row in Python: to_pylist per batch for every column but top_logprobs, of which only the
    reference row of each cell is converted (converting all 100k x 64 x 20 structs to dicts alone would
    take minutes: this baseline is the favourable one)."""
    cells: list[dict[str, Any]] = []
    current: tuple[str, str, str] | None = None
    rows: list[tuple[Any, ...]] = []
    for batch in iter_batches(RunPaths(root), "responses", PLAIN_COLUMNS, 4096):
        cols = {name: batch.column(name).to_pylist() for name in PLAIN_COLUMNS if name != "top_logprobs"}
        top = batch.column("top_logprobs")
        for i in range(batch.num_rows):
            key = (cols["arm"][i], cols["prompt_id"][i], cols["phase"][i])
            if key != current:
                if current is not None:
                    cells.append(_plain_cell(current, rows))
                current, rows = key, []
            rows.append((cols["cold"][i], cols["error"][i], cols["sig_text"][i], cols["sig_top_logprobs"][i],
                         cols["token_ids"][i], cols["token_logprobs"][i], top, i))
    if current is not None:
        cells.append(_plain_cell(current, rows))
    return cells


def _plain_cell(key: tuple[str, str, str], rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    warm = [r for r in rows if not r[0] and r[1] is None]
    out: dict[str, Any] = {"arm": key[0], "prompt_id": key[1], "phase": key[2], "n": len(warm),
                           "divergent": None, "distinct_signatures": None, "distinct_completions": 0,
                           "first_divergent_position": None, "top1_top2_gap": None, "max_generated_spread": None}
    if not warm:
        return out
    counts: dict[Any, int] = {}
    for r in warm:
        counts[r[3]] = counts.get(r[3], 0) + 1
    modal = max(counts, key=lambda s: counts[s])  # first seen wins a tie, as in compare()
    out["distinct_completions"] = len({r[2] for r in warm})
    reference = 0
    if None not in counts:
        out["distinct_signatures"] = len(counts)
        out["divergent"] = len(warm) - counts[modal]
        reference = next(i for i, r in enumerate(warm) if r[3] == modal)
    ref_ids = warm[reference][4] or []
    first: int | None = None
    width = 0
    for r in warm:
        ids = r[4] or []
        width = max(width, len(ids))
        for t in range(max(len(ids), len(ref_ids))):
            a = ids[t] if t < len(ids) else None
            b = ref_ids[t] if t < len(ref_ids) else None
            if a != b:
                if first is None or t < first:
                    first = t
                break
    out["first_divergent_position"] = first
    spread: list[float] = []
    for t in range(width):
        values = [r[5][t] for r in warm if r[5] is not None and t < len(r[5]) and r[5][t] is not None]
        if values:
            spread.append(max(values) - min(values))
    out["max_generated_spread"] = max(spread) if spread else None
    if first is not None:
        _, _, _, _, _, _, top, i = warm[reference]
        ref_top = top[i].as_py() or []
        entries = ref_top[first] if first < len(ref_top) else None
        if entries:
            values = sorted({(e["token"], e["logprob"]) for e in entries}, key=lambda e: -e[1])
            out["top1_top2_gap"] = float(values[0][1] - values[1][1]) if len(values) > 1 else None
    return out


# ---------------------------------------------------------------------------------------------------
# Checking answers
# ---------------------------------------------------------------------------------------------------

CHECKED = ("n", "divergent", "distinct_signatures", "distinct_completions", "first_divergent_position",
           "top1_top2_gap", "max_generated_spread")


def check(cells: list[dict[str, Any]], expected: Expected, label: str) -> int:
    """Every cell's answers equal the injected ones; returns the total divergent rows counted."""
    found = {(c["arm"], c["prompt_id"], c["phase"]): c for c in cells}
    problems = []
    if set(found) != set(expected.cells):
        problems.append(f"cells: got {len(found)}, expected {len(expected.cells)}")
    for key, want in expected.cells.items():
        got = found.get(key, {})
        for name in CHECKED:
            a, b = got.get(name), want[name]
            same = (a is None and b is None) if (a is None or b is None) else (
                abs(a - b) <= 1e-9 * max(1.0, abs(b)) if isinstance(b, float) else a == b)
            if not same:
                problems.append(f"{key} {name}: got {a!r}, expected {b!r}")
    if problems:
        raise AssertionError(f"{label}: {len(problems)} wrong answers, e.g. " + "; ".join(problems[:5]))
    total = sum(c["divergent"] or 0 for c in cells)
    assert total == expected.divergent_rows, (label, total, expected.divergent_rows)
    return total


# ---------------------------------------------------------------------------------------------------
# Timed children
# ---------------------------------------------------------------------------------------------------

def _status_kib(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def _child(impl: str, root: Path, out: Path) -> None:
    # Imported before the baseline and the clock: pyarrow.dataset (which pulls pandas, ~0.5 s on this machine)
    # is imported by the first read_table of a process; that is start-up, not work per row.
    import pyarrow.dataset  # noqa: F401

    import orchestrator.analysis.compare as module

    baseline = _status_kib("VmRSS")
    start, cpu = time.perf_counter(), time.process_time()
    if impl in ("ours", "before"):
        result = module.compare(RunPaths(root))
        cells = [{k: getattr(c, k) for k in ("arm", "prompt_id", "phase", *CHECKED)} for c in result.cells]
    elif impl == "read":  # the floor: what compare() reads of the record, read as it reads it, nothing else
        cells = []
        try:  # the stream moved to analysis/cells.py; an older checkout (--before) has it in compare.py
            from orchestrator.analysis.cells import responses
        except ImportError:
            responses = module.responses
        for _ in responses(RunPaths(root), texts=False):  # texts: only with expectations, as in compare()
            pass
    else:
        cells = plain_compare(root)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    out.write_text(json.dumps({"seconds": seconds, "cpu_s": cpu, "baseline_kib": baseline,
                               "peak_kib": _status_kib("VmHWM"), "cells": cells}))


def _run_child(impl: str, root: Path, workdir: Path, before: Path | None = None) -> dict[str, Any]:
    out = workdir / f"child-{impl}.json"
    env = dict(os.environ)
    if impl == "before" and before is not None:
        env.update(COMPARE_BENCH_TREE=str(before), PYTHONPATH=str(before))
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", impl, "--workdir", str(root),
                             "--child-out", str(out)], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{impl} child failed with status {status}")
    data = json.loads(out.read_text())
    data["ru_maxrss_kib"] = usage.ru_maxrss
    return data


# ---------------------------------------------------------------------------------------------------
# (b) detllm
# ---------------------------------------------------------------------------------------------------

def export_traces(root: Path, expected: Expected, workdir: Path, positions: int) -> tuple[Path, Path, Path]:
    """The same responses in detllm's trace.jsonl (detllm.core.models.TokenTraceRow; one sorted-key JSON
    object per line, as detllm.trace.io.write_trace writes it).

    A  = the responses of the record, in file order (cold rows included: a trace has no cold flag).
    A2 = a byte copy of A: `detllm diff A A2` compares every row and every token (it passes), which
         is the full-work case and the one comparable with a comparison of all responses.
    B  = a second, fully deterministic run of the same requests: A with every divergent row replaced
         by its cell's base response. `detllm diff A B` fails at the first divergent row and stops.
    detllm's `scores` are the generated tokens' logprobs; its format has no top-k alternatives, so the
    top-20 lists are not exported (detllm cannot compare them).
    """
    assert expected.combo_tokens is not None and expected.combo_logprobs is not None
    cell_index = {k: i for i, k in enumerate(expected.keys)}
    prompt_ids: dict[str, tuple[list[int], str]] = {}
    a_path, a2_path, b_path = workdir / "trace_A.jsonl", workdir / "trace_A2.jsonl", workdir / "trace_B.jsonl"
    with a_path.open("w") as a_out, b_path.open("w") as b_out:
        for batch in iter_batches(RunPaths(root), "responses",
                                  ["arm", "prompt_id", "phase", "token_ids", "token_logprobs"]):
            cols = batch.to_pydict()
            for arm, prompt, phase, ids, lps in zip(*cols.values(), strict=True):
                key = (arm, prompt, phase)
                if prompt not in prompt_ids:
                    seed = int(prompt[1:])
                    inputs = [(seed * 7919 + j * 104729) % VOCAB for j in range(PROMPT_TOKENS)]
                    digest = hashlib.sha256(json.dumps(inputs, separators=(",", ":")).encode()).hexdigest()
                    prompt_ids[prompt] = (inputs, digest)
                inputs, digest = prompt_ids[prompt]
                row = {"prompt_id": f"{arm}/{prompt}/{phase}", "input_token_ids": inputs,
                       "input_token_ids_hash": digest, "generated_token_ids": ids, "scores": lps,
                       "tokenizer_id": "synthetic/w50000", "decoding_max_new_tokens": positions,
                       "decoding_do_sample": False, "decoding_temperature": 0.0, "decoding_top_p": 1.0,
                       "decoding_top_k": None}
                a_out.write(json.dumps(row, sort_keys=True) + "\n")
                combo = cell_index[key] * 3
                if ids != expected.combo_tokens[combo].tolist():
                    row["generated_token_ids"] = expected.combo_tokens[combo].tolist()
                    row["scores"] = expected.combo_logprobs[combo].tolist()
                b_out.write(json.dumps(row, sort_keys=True) + "\n")
    shutil.copyfile(a_path, a2_path)
    return a_path, a2_path, b_path


def run_detllm(detllm: str, left: Path, right: Path, out: Path) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.Popen([detllm, "diff", "--left", str(left), "--right", str(right), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    report = json.loads((out / "report.json").read_text())
    body = report.get("data", report)
    return {"seconds": seconds, "peak_kib": usage.ru_maxrss, "exit": os.waitstatus_to_exitcode(status),
            "status": body.get("status"), "category": body.get("category"),
            "first_divergence": (body.get("details") or {}).get("first_divergence")}


# ---------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------

def _mib(kib: float) -> str:
    return f"{kib / 1024:,.0f} MiB"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _measure(args: argparse.Namespace, responses: int, impls: list[str], workdir: Path, repeats: int
             ) -> list[dict[str, Any]]:
    root = workdir / f"run-{responses}"
    start = time.perf_counter()
    expected = generate(root, responses, args.positions, args.top_k, args.cell_rows, args.divergent_share,
                        args.part_rows, args.seed)
    size = sum(p.stat().st_size for p in (root / "data" / "responses").glob("*.parquet"))
    print(f"[generate] {responses:,} responses x {args.positions} positions x top-{args.top_k}: "
          f"{len(expected.cells)} cells, {expected.divergent_rows:,} divergent rows injected, "
          f"{size / 2**20:,.0f} MiB Parquet, {time.perf_counter() - start:.1f} s", flush=True)
    traces = None
    if "detllm" in impls:
        start = time.perf_counter()
        traces = export_traces(root, expected, workdir, args.positions)
        print(f"[detllm] exported traces ({traces[0].stat().st_size / 2**20:,.0f} MiB each) in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for _ in range(repeats):  # alternated, so a burst of load on the shared machine hits every impl alike
        for impl, done in runs.items():
            if impl == "detllm" and traces:  # its full walk: A against a byte copy of A
                data = run_detllm(args.detllm, traces[0], traces[1], workdir / "detllm-full")
                assert data["status"] == "PASS", data
                print(f"[detllm A vs A copy] {data['seconds']:.2f} s, wait4 ru_maxrss {_mib(data['peak_kib'])}",
                      flush=True)
            else:
                data = _run_child(impl, root, workdir, args.before)
                print(f"[{impl}] {data['seconds']:.2f} s ({data['cpu_s']:.2f} CPU s), VmHWM {_mib(data['peak_kib'])} "
                      f"(VmRSS after imports {_mib(data['baseline_kib'])}; wait4 ru_maxrss "
                      f"{_mib(data['ru_maxrss_kib'])}, which counts what the child inherited before exec)", flush=True)
            done.append(data)
    results = []
    for impl, done in runs.items():
        data = {"seconds": statistics.median(d["seconds"] for d in done),
                "cpu_s": statistics.median(d.get("cpu_s", math.nan) for d in done),
                "peak_kib": max(d["peak_kib"] for d in done),
                "baseline_kib": min(d["baseline_kib"] for d in done) if impl != "detllm" else None}
        if impl == "detllm":
            counted = f"A vs A copy: compared all {responses:,} rows, PASS (0 divergences, by construction)"
        elif impl == "read":
            counted = "nothing: the decode floor"
        else:
            total = check(done[0]["cells"], expected, impl)
            print(f"[{impl}] answers of all {len(expected.cells)} cells correct", flush=True)
            counted = (f"every divergent row: {total:,} in {len(expected.cells)} cells "
                       "(+ first position, gap, spread per cell)")
        results.append({"impl": _label(impl, args), "responses": responses, **data, "counted": counted})
    if traces:
        data = run_detllm(args.detllm, traces[0], traces[2], workdir / "detllm-stop")  # stops at its first mismatch
        first = data["first_divergence"]
        print(f"[detllm A vs B] {data['seconds']:.1f} s, peak {_mib(data['peak_kib'])}, exit {data['exit']}, "
              f"status {data['status']} {data['category']}, first_divergence {first}", flush=True)
        assert data["status"] == "FAIL", data
        results.append({"impl": "(b) detllm 0.1.1 diff (A vs B)", "responses": responses, "seconds": data["seconds"],
                        "cpu_s": math.nan, "peak_kib": data["peak_kib"], "baseline_kib": None,
                        "counted": f"A vs B: FAIL, stopped at row {first.get('index')} token "
                                   f"{first.get('token_index')}; reports 1 of {expected.divergent_rows:,} divergent "
                                   f"rows; exit {data['exit']}"})
        for path in traces:
            path.unlink()
    if not args.keep:
        shutil.rmtree(root)
    return results


def _label(impl: str, args: argparse.Namespace) -> str:
    return {"ours": "ours: compare()", "before": f"before: compare() of {args.before}",
            "plain": "(a) plain per-row Python", "read": "Parquet read only (compare()'s columns)",
            "detllm": "(b) detllm 0.1.1 diff (A vs A copy)"}[impl]


def _goals(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Issues 20's and 35's goals for the comparison, from this run's figures (medians where --repeats > 1). On a
    shared machine the CPU times (the child's own, time.process_time) move less with the others' load than wall
    times do."""
    rate = {r["impl"]: r["responses"] / r["seconds"] for r in results}
    cpu = {r["impl"]: r["cpu_s"] for r in results}
    ours, read = rate.get("ours: compare()"), rate.get("Parquet read only (compare()'s columns)")
    detllm = rate.get("(b) detllm 0.1.1 diff (A vs A copy)")
    before = rate.get(_label("before", args))
    print(f"\nmedians of {args.repeats} alternated runs; the machine may be shared: compare it with the read floor")
    if ours:
        print(f"ours: {ours:,.0f} rows/s (goal >= 200,000)")
    if ours and read:
        read_cpu = cpu["Parquet read only (compare()'s columns)"]
        print(f"ours takes {read / ours:.2f}x the time of reading its columns alone ({read:,.0f} rows/s), "
              f"{cpu['ours: compare()'] / read_cpu:.2f}x its CPU time (goal <= 1.5)")
        if before:
            print(f"{args.before} took {read / before:.2f}x the read's time, "
                  f"{cpu[_label('before', args)] / read_cpu:.2f}x its CPU time")
    if ours and detllm:
        print(f"ours: {ours / detllm:.1f}x detllm diff's full walk ({detllm:,.0f} rows/s; goal >= 28)")
    if ours and before:
        print(f"ours: {ours / before:.2f}x the rows/s of {args.before} ({before:,.0f} rows/s)")
    peak = max((r["peak_kib"] for r in results if r["impl"].startswith("ours")), default=None)
    if peak is not None:
        print(f"ours: peak VmHWM {_mib(peak)} (limit {args.memory_limit_mib:,.0f} MiB: "
              f"{'met' if peak / 1024 <= args.memory_limit_mib else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=100_000)
    parser.add_argument("--positions", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--cell-rows", type=int, default=1000)
    parser.add_argument("--part-rows", type=int, default=4000)
    parser.add_argument("--divergent-share", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench"))
    parser.add_argument("--impls", default="ours,plain,read,detllm",
                        help="comma list of ours, before (needs --before), plain, read, detllm")
    parser.add_argument("--scale-sizes", default="",
                        help="comma list of response counts: also run these sizes (ours only) for the memory scaling")
    parser.add_argument("--detllm", default="/tmp/detllm-venv/bin/detllm")
    parser.add_argument("--keep", action="store_true", help="keep the generated records")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each of ours, plain, read, alternated; times are their medians")
    parser.add_argument("--large", action="store_true",
                        help="the streamed-memory goal: 10,000,000 responses x 16 positions x top-5, ours and read, "
                             "once each, against --memory-limit-mib")
    parser.add_argument("--memory-limit-mib", type=float, default=500.0)
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout (e.g. the main branch before a change): its compare() is timed too, "
                             "alternated with this one's (impl 'before')")
    parser.add_argument("--child", choices=["ours", "before", "plain", "read"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.workdir, args.child_out)
        return

    if args.large:
        args.responses, args.positions, args.top_k, args.impls, args.repeats = 10_000_000, 16, 5, "ours,read", 1
    args.workdir.mkdir(parents=True, exist_ok=True)
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    print(f"python {sys.version.split()[0]}, pyarrow {pa.__version__}, numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs", flush=True)
    results = _measure(args, args.responses, impls, args.workdir, args.repeats)
    ours = next((r for r in results if r["impl"].startswith("ours")), None)
    rows = []
    for r in results:
        rate = r["responses"] / r["seconds"]
        ratio = "1.00x" if r is ours else (f"{rate / (ours['responses'] / ours['seconds']):.3f}x" if ours else "-")
        extra = "" if r["baseline_kib"] is None else f" ({_mib(r['peak_kib'] - r['baseline_kib'])} over imports)"
        cpu = "-" if math.isnan(r["cpu_s"]) else f"{r['cpu_s']:.2f} s"
        rows.append([r["impl"], f"{r['responses']:,}", f"{r['seconds']:.2f} s", cpu, f"{rate:,.0f}",
                     _mib(r["peak_kib"]) + extra, ratio, r["counted"]])
    print(f"\n{args.responses:,} responses x {args.positions} positions x top-{args.top_k} "
          f"(cells of {args.cell_rows}, {args.divergent_share:.0%} divergent)")
    print(_table(["implementation", "responses", "time", "CPU time", "rows/s", "peak RSS", "rows/s vs ours",
                  "counted"], rows))
    _goals(results, args)

    sizes = [int(s) for s in args.scale_sizes.split(",") if s.strip()]
    if sizes:
        scale = [r for r in results if r["impl"].startswith("ours")]
        for n in sizes:
            if n != args.responses:
                scale += _measure(args, n, ["ours"], args.workdir, 1)
        scale.sort(key=lambda r: r["responses"])
        print(f"\nours, memory scaling at {args.positions} positions x top-{args.top_k}")
        print(_table(["responses", "time", "rows/s", "peak RSS", "peak - baseline"],
                     [[f"{r['responses']:,}", f"{r['seconds']:.1f} s", f"{r['responses'] / r['seconds']:,.0f}",
                       _mib(r["peak_kib"]), _mib(r["peak_kib"] - r["baseline_kib"])] for r in scale]))


if __name__ == "__main__":
    main()
