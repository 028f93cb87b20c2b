"""GEMM kernel probe: fixed-M repeatability and M-invariance of one projection, inside an arm's image.

Standalone: stdlib + torch and the shared harness.py, nothing else of the orchestrator (it is shipped into
containers and run on machines that have only torch, bundled with harness.py by `probes.bundle`). From the
repository root:

    python3 -m orchestrator.probes.gemm --spec '{"shapes": {"q_proj": [4096, 4096]}, "m": [1, 2, 64]}'
    python3 -m orchestrator.probes.gemm --spec-file spec.json     (or --spec - to read the JSON from stdin)

It prints JSON lines: one {"kind": "env"} header, one {"kind": "cell"} per (shape, arm, M), one
{"kind": "done"} footer. A cell never crashes the probe: an arm the device cannot run is a cell with
`unsupported` set to the error text.

Arms (spec "arms"):
  bf16                 torch.mm(x, w.T) in bf16
  fp32                 torch.mm in fp32 (a CPU check: fp32 row 0 changes with M there)
  fp8_tensor           FP8 e4m3, one scale per tensor
  fp8_rowwise          FP8, one scale per activation row and per weight row
  fp8_block            FP8, 1x128 activation scales, 128x128 weight scales, production layouts:
                       activation scales M-major, weight scales K-major
  fp8_block_ue8m0      the same with power-of-two (UE8M0) scale values
  fp8_block_rowmajor   negative control: the scale values written row-major in memory while the kernel
                       reads them M-major / K-major (what a kernel that deduces the layout from the shape
                       does); the float64 reference must flag it (`flagged`)

Fixed-M repeats: the same input tensors every call; each output is compared bitwise on the device against
the first (integer view), and only outputs that differ are copied and hashed, so 1000 repeats stay cheap.
Digests are sha256 of the output's integer view (int16 for bf16 bits), first 16 hex digits. A second
loop of `hash_repeats` calls hashes every output on the CPU, as the classic script does, so the speed-up
of device-side comparison is measured in the same run.

M-invariance: activations are drawn once for the largest M and quantized once; the input at M is its
first M rows, so row 0 is the same input at every M. Row 0 is compared with the same arm at M=1
(bitwise, and as the largest difference in bf16 ulps at the magnitude of max|row 0|), and rows 0 and M-1
with a float64 reference computed from the dequantized inputs and the intended scale values.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch

from orchestrator.probes import contend
from orchestrator.probes.harness import (
    Call,
    Emit,
    Output,
    Unsupported,
    environment,
    parse_spec,
    pick_device,
    print_json,
    refuse,
    sweep_m,
    sync,
    ulps,
)

DEFAULT_M = [1, 2, 3, 4, 8, 9, 16, 32, 64, 128, 256, 740, 1024, 4096, 5571]
ARMS = ("bf16", "fp32", "fp8_tensor", "fp8_rowwise", "fp8_block", "fp8_block_ue8m0", "fp8_block_rowmajor")
DEFAULT_ARMS = ["bf16", "fp8_tensor", "fp8_rowwise", "fp8_block", "fp8_block_ue8m0", "fp8_block_rowmajor"]
FP8_MAX = 448.0
BLOCK = 128
DEFAULTS = {
    "shapes": {"tiny": [256, 256]},  # name -> [K, N] of the projection (x: [M, K], w: [N, K])
    "m": DEFAULT_M,
    "repeats": 30,
    "hash_repeats": 3,  # calls hashed on the CPU for the timing comparison (and counted as evidence)
    "seed": 0,
    "arms": DEFAULT_ARMS,
    "device": "auto",  # auto: cuda when available, else cpu
    "backend": "auto",  # auto | scaled_mm | emulate  (FP8 arms)
    "perturb_allocator": False,
    "mode": "all",  # all | repeats | m_invariance
    "contend": None,  # null | process | stream (CUDA): busy on the same device while it repeats (contend.py)
    "layout_tolerance_ulps": 4.0,  # vs float64 beyond this: the scale layout (or the kernel) is wrong
}


# --- inputs and quantization --------------------------------------------------------------------
def _blocky(rows: int, cols: int, block_rows: int, gen: torch.Generator) -> torch.Tensor:
    """Gaussian values whose magnitude varies by 2^[-3, 3] from one (block_rows x 128) block to the next,
    so that scales differ between blocks and a scrambled scale layout changes the result."""
    x = torch.randn(rows, cols, generator=gen)
    rb, cb = -(-rows // block_rows), -(-cols // BLOCK)
    mag = torch.exp2(torch.randint(-3, 4, (rb, cb), generator=gen).float())
    mag = mag.repeat_interleave(block_rows, 0)[:rows].repeat_interleave(BLOCK, 1)[:, :cols]
    return x * mag


def _amax_blocks(t: torch.Tensor, block_rows: int) -> torch.Tensor:
    rows, cols = t.shape
    rb, cb = -(-rows // block_rows), -(-cols // BLOCK)
    padded = torch.zeros(rb * block_rows, cb * BLOCK, dtype=t.dtype, device=t.device)
    padded[:rows, :cols] = t.abs()
    return padded.view(rb, block_rows, cb, BLOCK).amax(dim=(1, 3))


def _scale(amax: torch.Tensor, ue8m0: bool) -> torch.Tensor:
    s = (amax.float() / FP8_MAX).clamp(min=1e-12)
    return torch.exp2(torch.ceil(torch.log2(s))) if ue8m0 else s


def _expand(scales: torch.Tensor, block_rows: int, rows: int, cols: int) -> torch.Tensor:
    """Per-block scales -> per-element (reads the scale tensor through its strides)."""
    return scales.repeat_interleave(block_rows, 0)[:rows].repeat_interleave(BLOCK, 1)[:, :cols]


def _to_fp8(t: torch.Tensor, per_element_scale: torch.Tensor) -> torch.Tensor:
    return (t / per_element_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


class Operands:
    """Inputs for one shape at the largest M, made once; cells slice the first M rows."""

    def __init__(self, k: int, n: int, m_max: int, seed: int, device: torch.device) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.k, self.n = k, n
        self.x = _blocky(m_max, k, 1, gen).to(device)  # float32 [M_max, K]
        self.w = _blocky(n, k, BLOCK, gen).to(device)  # float32 [N, K]
        self._quant: dict[str, tuple[torch.Tensor, ...]] = {}

    def quantized(self, arm: str) -> tuple[torch.Tensor, ...]:
        """(x_fp8, w_fp8, x_scales, w_scales): logical scale values (as the test intends them)."""
        if arm not in self._quant:
            x, w = self.x, self.w
            if arm == "fp8_tensor":
                sx, sw = _scale(x.abs().max(), False), _scale(w.abs().max(), False)
                self._quant[arm] = (_to_fp8(x, sx), _to_fp8(w, sw), sx, sw)
            elif arm == "fp8_rowwise":
                sx, sw = _scale(x.abs().amax(1, keepdim=True), False), _scale(w.abs().amax(1, keepdim=True), False)
                self._quant[arm] = (_to_fp8(x, sx), _to_fp8(w, sw), sx, sw)
            else:  # blockwise: x 1x128 -> [M, K/128]; w 128x128 -> [N/128, K/128]
                ue8m0 = arm == "fp8_block_ue8m0"
                sx, sw = _scale(_amax_blocks(x, 1), ue8m0), _scale(_amax_blocks(w, BLOCK), ue8m0)
                self._quant[arm] = (_to_fp8(x, _expand(sx, 1, *x.shape)), _to_fp8(w, _expand(sw, BLOCK, *w.shape)),
                                    sx, sw)
        return self._quant[arm]


# --- the GEMM of each arm ------------------------------------------------------------------------
def _round_up(v: int, to: int) -> int:
    return -(-v // to) * to


def _strided(values: torch.Tensor, strides: tuple[int, int], storage: int, row_major_memory: bool) -> torch.Tensor:
    """A [r, c] scale tensor with `strides` as the kernel reads it. Production: the values are placed so that
    reading through `strides` gives them back. Row-major mistake: the memory holds the values row-major
    (what torch.contiguous() gives) and the kernel still reads it through `strides`."""
    flat = torch.zeros(storage, dtype=values.dtype, device=values.device)
    if row_major_memory:
        flat[:values.numel()] = values.contiguous().view(-1)
        return torch.as_strided(flat, values.shape, strides)
    view = torch.as_strided(flat, values.shape, strides)
    view.copy_(values)
    return view


def _block_layouts(m: int, kb: int, nb: int) -> list[tuple[str, tuple[int, int], int, tuple[int, int], int]]:
    """Candidate (name, x-scale strides, storage, w-scale strides, storage) with x scales [M, K/128]
    M-major and w scales [K/128, N/128] K-major; the padded leading dimensions are what some cuBLAS
    builds require. The first one the kernel accepts is the production layout of this run."""
    out = []
    for pad in (1, 4):
        lm, lk = _round_up(m, pad), _round_up(kb, pad)
        out.append((f"x:M-major(ld={lm}) w:K-major(ld={lk})", (1, lm), lm * kb, (1, lk), lk * nb))
    return out


class Gemm:
    """One arm at one M: `run()` is the call under test; inputs are fixed once here."""

    def __init__(self, arm: str, ops: Operands, m: int, backend: str, device: torch.device,
                 layout: tuple[str, tuple[int, int], int, tuple[int, int], int] | None = None) -> None:
        self.arm, self.m, self.backend, self.device = arm, m, backend, device
        self.kernel_layout: str | None = None
        self.impl = "torch.mm"
        if arm in ("bf16", "fp32"):
            dtype = torch.bfloat16 if arm == "bf16" else torch.float32
            self.a = ops.x[:m].to(dtype).contiguous()
            self.b = ops.w.to(dtype).contiguous()
            self.ref_a, self.ref_b = self.a.double(), self.b.double()
            return
        xq, wq, sx, sw = ops.quantized(arm)
        self.a, self.b_t = xq[:m].contiguous(), wq.contiguous()  # b = w.T: column-major [K, N]
        kb, nb = -(-ops.k // BLOCK), -(-ops.n // BLOCK)
        if arm == "fp8_tensor":
            self.sa, self.sb = sx.reshape(()).float(), sw.reshape(()).float()
            ref_sa, ref_sb = self.sa, self.sb
        elif arm == "fp8_rowwise":
            self.sa, self.sb = sx[:m].float().contiguous(), sw.float().reshape(1, -1).contiguous()
            ref_sa, ref_sb = self.sa, self.sb.reshape(-1, 1)
        else:
            assert layout is not None
            self.kernel_layout, sa_strides, sa_storage, sb_strides, sb_storage = layout
            mistake = arm == "fp8_block_rowmajor"
            sx_m, sw_t = sx[:m].float(), sw.float().t()  # logical [M, K/128] and [K/128, N/128]
            self.sa = _strided(sx_m, sa_strides, sa_storage, mistake)
            self.sb = _strided(sw_t, sb_strides, sb_storage, mistake)
            ref_sa = _expand(sx_m, 1, m, ops.k)
            ref_sb = _expand(sw.float(), BLOCK, ops.n, ops.k)
            assert kb == sx_m.shape[1] and nb == sw_t.shape[1]
        self.ref_a = self.a.double() * ref_sa.double()
        self.ref_b = self.b_t.double() * ref_sb.double()
        self.impl = "torch._scaled_mm" if backend == "scaled_mm" else "emulated"

    def _emulate(self) -> torch.Tensor:
        """Dequantize with the scales as the kernel reads them (through their strides), fp32 matmul."""
        m, k = self.a.shape
        n = self.b_t.shape[0]
        if self.arm == "fp8_tensor":
            sa, sb = self.sa, self.sb
        elif self.arm == "fp8_rowwise":
            sa, sb = self.sa, self.sb.reshape(-1, 1)
        else:
            sa, sb = _expand(self.sa, 1, m, k), _expand(self.sb.t(), BLOCK, n, k)
        return torch.mm(self.a.float() * sa, (self.b_t.float() * sb).t()).to(torch.bfloat16)

    def run(self) -> torch.Tensor:
        if self.arm in ("bf16", "fp32"):
            return torch.mm(self.a, self.b.t())
        if self.impl == "emulated":
            return self._emulate()
        return torch._scaled_mm(self.a, self.b_t.t(), scale_a=self.sa, scale_b=self.sb, out_dtype=torch.bfloat16)

    def reference_rows(self, rows: list[int]) -> torch.Tensor:
        return self.ref_a[rows] @ self.ref_b.t()


def build(arm: str, ops: Operands, m: int, backend: str, device: torch.device) -> tuple[Gemm, torch.Tensor, str | None]:
    """Construct the arm and make its first call; try the candidate block layouts in order. Returns the
    gemm, its first output and a note (why the CPU fell back to emulation)."""
    blockwise = arm.startswith("fp8_block")
    layouts = _block_layouts(m, -(-ops.k // BLOCK), -(-ops.n // BLOCK)) if blockwise else [None]
    kinds = ["scaled_mm"] if backend == "scaled_mm" else ["emulate"] if backend == "emulate" else \
        ["scaled_mm"] + (["emulate"] if device.type == "cpu" else [])
    if arm in ("bf16", "fp32"):
        kinds = ["mm"]
    errors: list[str] = []
    for kind in kinds:
        for layout in (layouts if kind != "emulate" else layouts[:1]):
            try:
                gemm = Gemm(arm, ops, m, kind, device, layout)
                out = gemm.run()
                sync(device)
                return gemm, out, ("; ".join(errors) or None)
            except Exception as exc:  # an unsupported configuration is a result, not a crash
                errors.append(f"{kind}{'[' + layout[0] + ']' if layout else ''}: {type(exc).__name__}: "
                              f"{str(exc).strip()[:400]}")
    raise Unsupported(" | ".join(errors))


def probe(spec: dict[str, Any], emit: Emit) -> None:
    device = pick_device(spec["device"])
    emit({"kind": "env", **environment(device), "spec": spec})
    started = time.perf_counter()
    with contend.running(spec["contend"], str(device)) as contention:
        _sweep(spec, device, emit)
    emit({"kind": "done", "wall_s": time.perf_counter() - started, **contention})


def _sweep(spec: dict[str, Any], device: torch.device, emit: Emit) -> None:
    ms = sorted(set(int(m) for m in spec["m"]))
    for shape, (k, n) in spec["shapes"].items():
        ops = Operands(int(k), int(n), max(ms), int(spec["seed"]), device)
        for arm in spec["arms"]:
            base = {"shape": shape, "op": "gemm", "arm": arm, "N": int(n), "K": int(k), "seed": int(spec["seed"]),
                    "device": str(device), "perturb_allocator": bool(spec["perturb_allocator"]), "mode": spec["mode"],
                    **_arm_facts(arm), "negative_control": arm == "fp8_block_rowmajor"}
            def bind(m: int, arm: str = arm, ops: Operands = ops) -> tuple[Call, Output, dict[str, Any]]:
                gemm, first, note = build(arm, ops, m, spec["backend"], device)
                return gemm.run, first, {"impl": gemm.impl, "kernel_layout": gemm.kernel_layout, "note": note}

            def extra(call: Call, first: Output) -> dict[str, Any]:
                gemm = call.__self__  # type: ignore[attr-defined]  # bind's call is the Gemm's bound run
                assert isinstance(first, torch.Tensor)
                return _versus_float64(gemm, first, spec)

            sweep_m(ms, base, bind, spec, device, emit, extra)
        del ops


def _arm_facts(arm: str) -> dict[str, Any]:
    dtype = {"bf16": "bf16", "fp32": "fp32"}.get(arm, "fp8_e4m3fn")
    layout = {"bf16": "none", "fp32": "none", "fp8_tensor": "per_tensor", "fp8_rowwise": "rowwise"}.get(
        arm, "block_1x128_128x128")
    values = "ue8m0" if arm == "fp8_block_ue8m0" else "none" if dtype != "fp8_e4m3fn" else "float32"
    storage = "row_major_mistake" if arm == "fp8_block_rowmajor" else "production" if layout.startswith("block") \
        else None
    return {"dtype": dtype, "scale_layout": layout, "scale_values": values, "scale_storage": storage}


def _versus_float64(gemm: Gemm, first: torch.Tensor, spec: dict[str, Any]) -> dict[str, Any]:
    """Rows 0 and M-1 against the float64 reference from the dequantized inputs and intended scales."""
    out: dict[str, Any] = {}
    rows = sorted({0, gemm.m - 1})
    ref = gemm.reference_rows(rows)
    out["max_ulps_vs_float64"] = max(ulps(first[r], ref[i], ref[i]) for i, r in enumerate(rows))
    out["row0_ulps_vs_float64"] = ulps(first[0], ref[0], ref[0])
    out["layout_ok"] = out["max_ulps_vs_float64"] <= float(spec["layout_tolerance_ulps"])
    out["flagged"] = not out["layout_ok"]
    return out


def main(argv: list[str] | None = None) -> int:
    spec = parse_spec("gemm.py", DEFAULTS, sys.argv[1:] if argv is None else argv)
    bad = [a for a in spec["arms"] if a not in ARMS]
    if bad:
        refuse("gemm.py", [f"unknown arm(s) {bad}; known: {list(ARMS)}"])
    contention = contend.check(spec["contend"], str(pick_device(spec["device"])))
    if contention:
        refuse("gemm.py", [contention])
    if spec["mode"] not in ("all", "repeats", "m_invariance") or \
            spec["backend"] not in ("auto", "scaled_mm", "emulate"):
        refuse("gemm.py", ["mode must be all|repeats|m_invariance; backend auto|scaled_mm|emulate"])
    probe(spec, print_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
