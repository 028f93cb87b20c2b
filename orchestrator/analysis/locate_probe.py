"""The op probe at the first difference's real shapes, as the `orchestrator probe` command that runs it (in the
study's arm: its image, or its interpreter and code). A Linear: the GEMM probe at M (the batch's rows), K and N;
an RMSNorm: the ops probe's rmsnorm at M rows of its width; a split between an attention module's projections:
the ops probe's decode (or, in the prefill, prefill) attention at the heads, KV heads and head dim read off the
q/k projections and the rotary embedding, over the step's context, at the two batch sizes. A GEMM or norm split
with the same M on both sides gets no probe (`not_applicable`); an attention split on a packed row (continuous
batching) gets one with a note that its padded sequences cannot settle it."""

from __future__ import annotations

import json
import shlex
from typing import Any

from orchestrator.analysis.locate_results import BETWEEN, Difference, ProbeAsk, ProbeVerdict

# (device kind) -> (GEMM preset, ops preset): the presets the shapes override
PRESETS = {"cpu": ("cpu_small", "ops_cpu_small"), "cuda": ("h200_default", "ops_h200")}
GEMM_DTYPES = ("fp32", "bf16")  # the GEMM probe's plain arms
ATTENTION_ARM = "eager"  # matmul, softmax in fp32, matmul: the ops probe's stand-in for eager attention


def not_applicable(difference: Difference) -> str | None:
    """Why no op probe can speak to this split: a GEMM's or a norm's output split with the same M on both sides
    is not that op's variance with M (what the probes sweep)."""
    if difference.kind == BETWEEN or difference.a.rows_total != difference.b.rows_total:
        return None
    op = "GEMM" if difference.module_type == "Linear" else "norm" if difference.module_type.endswith("RMSNorm") \
        else None
    if op is None:
        return None
    a, b = difference.a, difference.b
    window = f" (what differs is the window: {a.batch_size} vs {b.batch_size} requests)" \
        if a.batch_size != b.batch_size else ""
    return (f"M equal on both sides ({a.rows_total} vs {b.rows_total}): not the {op}'s variance with M{window}; "
            "the op probe does not apply")


def probe_ask(difference: Difference, step_rows: list[dict[str, Any]], arm: str, run_dir: str,
              device: tuple[str, str] | None) -> ProbeAsk | None:
    """None where no probe op matches the module; a `note` says what the shapes lack."""
    kind, dtype = device or ("cpu", "fp32")
    gemm_preset, ops_preset = PRESETS.get(kind, PRESETS["cpu"])
    sizes = sorted({1, difference.a.batch_size, difference.b.batch_size})
    common = [f"device={kind}"]
    unknown = None if device else "the arm's log names no device and dtype: cpu and fp32 assumed"
    if difference.kind != BETWEEN and difference.module_type == "Linear":
        m = sorted({1, difference.a.rows_total, difference.b.rows_total})
        k, n = difference.a.in_shape[-1], difference.a.out_shape[-1]
        if dtype not in GEMM_DTYPES:
            return None
        sets = [f"shapes={json.dumps({difference.module: [k, n]})}", f"m={json.dumps(m)}",
                f"arms={json.dumps([dtype])}", *common]
        return _ask("gemm", gemm_preset, sets, {"M": difference.a.rows_total, "K": k, "N": n}, m, arm, run_dir,
                    unknown)
    if difference.kind != BETWEEN and difference.module_type.endswith("RMSNorm"):
        m = sorted({1, difference.a.rows_total, difference.b.rows_total})
        hidden = difference.a.out_shape[-1]
        entry = {"op": "rmsnorm", "hidden": hidden, "dtype": dtype}
        sets = [f"ops={json.dumps({'norm': entry})}", f"m={json.dumps(m)}", *common]
        return _ask("rmsnorm", ops_preset, sets, {"M": difference.a.rows_total, "hidden": hidden}, m, arm, run_dir,
                    unknown)
    if difference.kind == BETWEEN and difference.parent:
        return _attention(difference, step_rows, dtype, ops_preset, sizes, common, arm, run_dir, unknown)
    return None


def _attention(difference: Difference, step_rows: list[dict[str, Any]], dtype: str, preset: str, sizes: list[int],
               common: list[str], arm: str, run_dir: str, unknown: str | None) -> ProbeAsk | None:
    inside = [r for r in step_rows if str(r["module"]).startswith(f"{difference.parent}.")]
    last = {str(r["module"]).rsplit(".", 1)[-1]: r for r in inside}
    if "q_proj" not in last or "k_proj" not in last:
        return None  # not an attention module's projections: no probe op matches
    head_dim = _head_dim(step_rows, inside)
    if head_dim is None:
        return None
    packed = [side.rows_total for side in (difference.a, difference.b) if side.packed]
    if packed:
        said = (f"a packed batch: every request's tokens in one row [1, T, H], T = {' vs '.join(map(str, packed))}; "
                "the probe runs padded sequences, not a packed row, so its verdict can neither confirm nor refute "
                "this split")
        unknown = f"{unknown}; {said}" if unknown else said
    shape = {"heads": last["q_proj"]["out_shape"][-1] // head_dim, "kv_heads": last["k_proj"]["out_shape"][-1]
             // head_dim, "head_dim": head_dim, "context": difference.a.context_tokens}
    op = "prefill_attention" if difference.step == 0 else "decode_attention"
    entry = {"op": op, "arms": [ATTENTION_ARM, "sdpa_math"], **shape, "dtype": dtype}
    sets = [f"ops={json.dumps({'attention': entry})}", f"m={json.dumps(sizes)}", *common]
    ask = _ask(op, preset, sets, shape, sizes, arm, run_dir, unknown)
    ask.packed = bool(packed)
    return ask


def _head_dim(step_rows: list[dict[str, Any]], inside: list[dict[str, Any]]) -> int | None:
    """The rotary embedding's width (its cos/sin are [.., head dim]), else a per-head module's (q_norm)."""
    for row in step_rows:
        if "Rotary" in str(row["module_type"]) and row["out_shape"]:
            return int(row["out_shape"][-1])
    for row in inside:
        if len(row["out_shape"] or []) == 4:
            return int(row["out_shape"][-1])
    return None


def _ask(op: str, preset: str, sets: list[str], shape: dict[str, int], m: list[int], arm: str, run_dir: str,
         note: str | None) -> ProbeAsk:
    words = ["orchestrator", "probe", "--preset", preset, "--arm", arm, "--out", run_dir]
    for item in sets:
        words += ["--set", item]
    return ProbeAsk(op, preset, sets, shape, m, arm, shlex.join(words), note)


def probe_verdict(rows: list[dict[str, Any]]) -> ProbeVerdict:
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
