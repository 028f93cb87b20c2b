"""The kernel probes' shared harness: digests, fixed-M repeats, the M sweep with row 0 against M=1, the
environment header and the command line. Shipped with gemm.py and ops.py (stdlib + torch only).

An op's call returns one tensor or a tuple of tensors (e.g. log-probabilities, top-k values and indices);
every tensor is compared and hashed bitwise, and "row 0" is row 0 of each.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from typing import Any, Union

import torch

Output = Union[torch.Tensor, tuple[torch.Tensor, ...]]  # noqa: UP007 (a runtime alias; Python 3.9 images)
Call = Callable[[], Output]
Emit = Callable[[dict[str, Any]], None]
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Unsupported(Exception):
    """This configuration cannot run here: recorded as a cell with the reason, never emulated."""


def _tensors(out: Output) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The output's bits as integers of the same width (bf16 -> int16): compared and hashed bitwise."""
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def digest(out: Output) -> str:
    """sha256 of every output tensor's bits (copied to the CPU), without numpy; first 16 hex digits."""
    sha = hashlib.sha256()
    for t in _tensors(out):
        host = bits(t.detach()).cpu().contiguous()
        size = host.numel() * host.element_size()
        sha.update(memoryview((ctypes.c_char * size).from_address(host.data_ptr())) if size else b"")
    return sha.hexdigest()[:16]


def same_bits(a: Output, b: Output) -> bool:
    """Bitwise equality on the tensors' own device (no copy to the host)."""
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(bits(x), bits(y)))
                                      for x, y in zip(ta, tb, strict=True))


def bf16_ulp(magnitude: float) -> float:
    """One bf16 ulp at this magnitude (8 significant bits)."""
    if not magnitude > 0 or not math.isfinite(magnitude):
        return 2.0 ** -133
    return 2.0 ** (math.floor(math.log2(magnitude)) - 7)


def ulps(a: torch.Tensor, b: torch.Tensor, scale_of: torch.Tensor) -> float:
    """max|a - b| in bf16 ulps at the magnitude of max|scale_of|."""
    diff = (a.double() - b.double()).abs().max().item()
    return diff / bf16_ulp(scale_of.double().abs().max().item())


def row0(out: Output) -> Output:
    """Row 0 of every output tensor, kept apart from the output's storage."""
    rows = tuple(t[0].clone() for t in _tensors(out))
    return rows if isinstance(out, tuple) else rows[0]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_call(call: Call, device: torch.device) -> Output:
    """The first call, synchronized: any error here makes the configuration unsupported."""
    try:
        out = call()
        sync(device)
        return out
    except Unsupported:
        raise
    except Exception as exc:  # an unsupported configuration is a result, not a crash
        raise Unsupported(f"{type(exc).__name__}: {str(exc).strip()[:400]}") from exc


def run_cell(call: Call, first: Output, spec: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Fixed-M repeats: the same inputs every call, each output compared on the device against the first;
    only differing outputs are copied and hashed. Then `hash_repeats` calls hashed on the CPU (the classic
    check), so the per-call cost of both is measured in the same run."""
    repeats = int(spec["repeats"]) if spec.get("mode", "all") != "m_invariance" else 1
    perturb = bool(spec.get("perturb_allocator"))
    digests = [digest(first)]
    divergent = 0
    ptrs = [_tensors(first)[0].data_ptr()]  # each repeat's output address: the perturbation's evidence
    held: list[torch.Tensor] = []  # the allocator perturbation: the previous output and a block, across a call
    compare_s = 0.0
    sync(device)
    start = time.perf_counter()
    for r in range(1, repeats):
        if perturb:  # an extra block of varying size, beside the previous output: no address can be replayed
            held.append(torch.empty(((r * 7919) % 61 + 1) * 65536, dtype=torch.uint8, device=device))
        out = call()
        sync(device)
        t0 = time.perf_counter()
        same = same_bits(out, first)
        compare_s += time.perf_counter() - t0
        ptrs.append(_tensors(out)[0].data_ptr())
        if not same:
            divergent += 1
            d = digest(out)
            if d not in digests:
                digests.append(d)
        held[:] = _tensors(out) if perturb else ()
        del out
    device_loop_s = time.perf_counter() - start
    hash_repeats = min(int(spec["hash_repeats"]), repeats) if spec.get("mode", "all") != "m_invariance" else 0
    hash_digests = []
    start = time.perf_counter()
    for _ in range(hash_repeats):
        hash_digests.append(digest(call()))
    hash_loop_s = time.perf_counter() - start
    per_device = device_loop_s / max(repeats - 1, 1)
    per_hash = hash_loop_s / hash_repeats if hash_repeats else None
    return {
        "repeats": repeats, "distinct_digests": len(digests), "divergent_repeats": divergent,
        "first_digest": digests[0], "digests": digests, "out_ptrs": ptrs,
        "out_ptrs_distinct": len(set(ptrs)),
        "hash_repeats": hash_repeats, "hash_divergent": sum(d != digests[0] for d in hash_digests),
        "device_loop_s": device_loop_s, "device_compare_s": compare_s, "hash_loop_s": hash_loop_s,
        "device_s_per_call": per_device if repeats > 1 else None, "hash_s_per_call": per_hash,
        "speedup_per_call": (per_hash / per_device) if per_hash and repeats > 1 and per_device > 0 else None,
    }


def row0_check(first: Output, ref: tuple[int, Output]) -> dict[str, Any]:
    """Row 0 at this M against row 0 at the reference M (1, or the smallest M that ran): bitwise, and in bf16
    ulps (of the first floating output) at the magnitude of max|row 0|."""
    mine, (ref_m, theirs) = row0(first), ref
    floats = [(a, b) for a, b in zip(_tensors(mine), _tensors(theirs), strict=True) if a.is_floating_point()]
    return {"row0_ref_m": ref_m, "row0_bits_equal_m1": same_bits(mine, theirs),
            "row0_max_ulps_vs_m1": ulps(floats[0][0], floats[0][1], floats[0][0]) if floats else None}


def sweep_m(ms: list[int], base: dict[str, Any], build: Callable[[int], tuple[Call, Output, dict[str, Any]]],
            spec: dict[str, Any], device: torch.device, emit: Emit,
            extra: Callable[[Call, Output], dict[str, Any]] | None = None) -> None:
    """One cell per M: `build(m)` binds the op at M and makes its first call (raising Unsupported where it
    cannot run) and returns (call, first output, facts). M=1 is measured even if not asked: its row 0 is
    the reference; where it is unsupported, the smallest M that ran is."""
    ref: tuple[int, Output] | None = None
    for m in sorted(set(ms) | {1}):
        cell = {**base, "kind": "cell", "M": m, "contend": spec.get("contend")}
        t0 = time.perf_counter()
        try:
            call, first, facts = build(m)
        except Unsupported as exc:
            if m in ms:
                emit({**cell, "unsupported": str(exc), "wall_s": time.perf_counter() - t0})
            continue
        cell.update(facts, unsupported=None)
        if ref is None:
            ref = (m, row0(first))
        if m in ms:
            cell.update(run_cell(call, first, spec, device))
            cell.update(row0_check(first, ref))
            if extra is not None:
                cell.update(extra(call, first))
            cell["wall_s"] = time.perf_counter() - t0
            emit(cell)
        del call, first
    if device.type == "cuda":
        torch.cuda.empty_cache()


def pick_device(name: str) -> torch.device:
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "device": str(device), "gpu": None, "capability": None,
                           "host": platform.node()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(device))
    else:
        env["threads"] = torch.get_num_threads()
    return env


def parse_spec(prog: str, defaults: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """--spec JSON | --spec - (stdin) | --spec-file PATH, over `defaults`; an unknown key is refused."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--spec", help=f"JSON object (keys: {', '.join(defaults)}), or - for stdin")
    parser.add_argument("--spec-file", help="a file holding the JSON spec")
    args = parser.parse_args(argv)
    text = "{}"
    if args.spec_file:
        with open(args.spec_file, encoding="utf-8") as handle:
            text = handle.read()
    elif args.spec == "-":
        text = sys.stdin.read()
    elif args.spec:
        text = args.spec
    given = json.loads(text)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        parser.error(f"unknown spec key(s) {unknown}; known: {sorted(defaults)}")
    return {**defaults, **given}


SPEC_REFUSED = 2  # the exit status of a refused spec: argparse's for a bad command line, so one for both


def refuse(prog: str, problems: list[str]) -> None:
    """A spec this probe cannot run: one line naming each problem and the valid choices, exit SPEC_REFUSED."""
    print(f"{prog}: " + "; ".join(problems), file=sys.stderr)
    sys.exit(SPEC_REFUSED)


def print_json(row: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
    sys.stdout.flush()


class OpKind:
    """One kind of op for ops.py: its arms (implementations), its parameters' defaults, `prepare` (inputs for
    the largest M, drawn once from a CPU generator so every device and process gets the same values) and
    `bind` (the call at M over the first M rows; raises Unsupported where this arm cannot run here); optional
    `facts` (more of a cell's columns from (inputs, arm, M, params, call, first output, repeats)) and `check`
    (what is wrong with the parameters, each naming the valid choices)."""

    def __init__(self, arms: tuple[str, ...], defaults: dict[str, Any],
                 prepare: Callable[[dict[str, Any], int, torch.Generator, torch.device], Any],
                 bind: Callable[[Any, str, int, dict[str, Any]], Call],
                 dims: Callable[[dict[str, Any]], tuple[int, int, int | None]],
                 control: str | None = None,
                 facts: Callable[[Any, str, int, dict[str, Any], Call, Output, int], dict[str, Any]] | None = None,
                 check: Callable[[dict[str, Any]], list[str]] | None = None) -> None:
        self.arms, self.defaults, self.prepare, self.bind, self.dims = arms, defaults, prepare, bind, dims
        self.control = control  # "must_vary" | "must_not_vary": a negative control of the harness itself
        self.facts, self.check = facts, check


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def dtype_of(params: dict[str, Any]) -> torch.dtype:
    return DTYPES[str(params.get("dtype", "bf16"))]
