"""Kernel probes beyond GEMM: decode and prefill attention, RMSNorm, log_softmax with top-k/argmax, grouped
MoE GEMM, top-k under controlled ties (ops_ties.py), and the harness's two negative controls; on the same
harness as gemm.py (harness.py): fixed-M repeats with distinct outputs counted, row 0 compared bitwise at
every M against M=1, the per-call cost; an op's own `facts` add columns (the tie probe's per-row counts).

Shipped bundled with its modules (`probes.bundle("ops")`, stdlib + torch only). From the repository root:

    python3 -m orchestrator.probes.ops --spec '{"ops": {"norm": {"op": "rmsnorm", "hidden": 4096}}, "m": [1, 8]}'

The spec's "ops" maps an entry name to {"op": KIND, "arms": [...], "m": [...], "expect_invariant": bool,
PARAM: value...}: KIND is one of `OPS` below, arms default to all of the kind's, m to the spec's, params to
the kind's defaults. It prints JSON lines: {"kind": "env"}, one {"kind": "cell"} per (entry, arm, M),
{"kind": "done"}. An arm that cannot run here is a cell with `unsupported` set to the reason.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch

from orchestrator.probes import contend, ops_attention, ops_controls, ops_moe, ops_norm, ops_sampling, ops_ties
from orchestrator.probes.harness import (
    DTYPES,
    Call,
    Emit,
    OpKind,
    Output,
    environment,
    first_call,
    parse_spec,
    pick_device,
    print_json,
    refuse,
    sweep_m,
)

OPS: dict[str, OpKind] = {**ops_attention.OPS, **ops_norm.OPS, **ops_sampling.OPS, **ops_moe.OPS,
                          **ops_controls.OPS, **ops_ties.OPS}
ENTRY_KEYS = ("op", "arms", "m", "expect_invariant")
DEFAULTS: dict[str, Any] = {
    "ops": {"norm": {"op": "rmsnorm", "hidden": 256}},
    "m": [1, 2, 4, 8],
    "repeats": 10,
    "hash_repeats": 2,
    "seed": 0,
    "device": "auto",  # auto: cuda when available, else cpu
    "perturb_allocator": False,
    "mode": "all",  # all | repeats | m_invariance
    "contend": None,  # null | process | stream (CUDA): busy on the same device while it repeats (contend.py)
}


def entry_problems(name: str, entry: dict[str, Any]) -> list[str]:
    """What is wrong with one entry of the spec's "ops", naming the valid choices."""
    kind = OPS.get(str(entry.get("op")))
    if kind is None:
        return [f"ops.{name}: op {entry.get('op')!r} is not one of {sorted(OPS)}"]
    problems = [f"ops.{name}: unknown key {k!r}; known: {sorted({*ENTRY_KEYS, *kind.defaults})}"
                for k in entry if k not in ENTRY_KEYS and k not in kind.defaults]
    problems += [f"ops.{name}: arm {a!r} is not one of {list(kind.arms)}" for a in entry.get("arms") or []
                 if a not in kind.arms]
    if "dtype" in entry and entry["dtype"] not in DTYPES:
        problems.append(f"ops.{name}: dtype {entry['dtype']!r} is not one of {sorted(DTYPES)}")
    if kind.check is not None and not problems:
        try:
            problems += [f"ops.{name}: {p}" for p in kind.check({**kind.defaults, **entry})]
        except (TypeError, ValueError) as exc:  # a number given as text, or a list
            problems.append(f"ops.{name}: a parameter is not a number ({exc}); known: {sorted(kind.defaults)}")
    return problems


def probe(spec: dict[str, Any], emit: Emit) -> None:
    device = pick_device(spec["device"])
    emit({"kind": "env", **environment(device), "spec": spec})
    started = time.perf_counter()
    with contend.running(spec["contend"], str(device)) as contention:
        _sweep(spec, device, emit)
    emit({"kind": "done", "wall_s": time.perf_counter() - started, **contention})


def _sweep(spec: dict[str, Any], device: torch.device, emit: Emit) -> None:
    for name, entry in spec["ops"].items():
        kind = OPS[entry["op"]]
        params = {**kind.defaults, **{k: v for k, v in entry.items() if k not in ENTRY_KEYS}}
        ms = sorted(set(int(m) for m in entry.get("m") or spec["m"]))
        n, k, context = kind.dims(params)
        inputs = kind.prepare(params, max(ms), torch.Generator().manual_seed(int(spec["seed"])), device)
        for arm in entry.get("arms") or kind.arms:
            base = {"shape": name, "op": entry["op"], "arm": arm, "N": n, "K": k, "context": context,
                    "seed": int(spec["seed"]), "device": str(device), "mode": spec["mode"],
                    "perturb_allocator": bool(spec["perturb_allocator"]), "dtype": params.get("dtype", "fp32"),
                    "control": kind.control, "negative_control": kind.control is not None,
                    "expect_invariant": entry.get("expect_invariant"), "impl": arm,
                    "params": json.dumps(params, sort_keys=True)}

            def bind(m: int, kind: OpKind = kind, arm: str = arm, params: dict[str, Any] = params,
                     inputs: Any = inputs) -> tuple[Call, Output, dict[str, Any]]:
                call = kind.bind(inputs, arm, m, params)
                first = first_call(call, device)
                repeats = int(spec["repeats"]) if spec["mode"] != "m_invariance" else 1
                return call, first, kind.facts(inputs, arm, m, params, call, first, repeats) if kind.facts else {}

            sweep_m(ms, base, bind, spec, device, emit)
        del inputs


def main(argv: list[str] | None = None) -> int:
    spec = parse_spec("ops.py", DEFAULTS, sys.argv[1:] if argv is None else argv)
    problems = [p for name, entry in spec["ops"].items() for p in entry_problems(name, entry)]
    problems += filter(None, [contend.check(spec["contend"], str(pick_device(spec["device"])))])
    if spec["mode"] not in ("all", "repeats", "m_invariance"):
        problems.append(f"mode {spec['mode']!r} is not one of all, repeats, m_invariance")
    if problems:
        refuse("ops.py", problems)
    probe(spec, print_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
