"""Shipped into a `transformers serve` arm and run there as `python -c SOURCE`: the flags of the `serve`
command as its own command-line parser declares them (click, or Typer on click in older releases), with the
version they were listed from. Standard library only (transformers is imported by name, inside the arm).
Prints one JSON object on its last line:

    {"engine": "transformers_serve", "version": "5.25.0", "distribution": "transformers",
     "flags": ["--attn-implementation", "--continuous-batching", "--no-continuous-batching", ...], "env": [],
     "types": {"--continuous-batching": "switch", "--default-seed": "int", ...}, "choices": {"--reasoning": [...]}}

`types` and `choices` are what click states (a flag, an integer or float, a Choice), so the orchestrator
refuses a value the command would (guard/knobs.py).

transformers serve reads no documented env names of its own, so `env` is empty: the guard then checks no
env names for this engine (its env_prefixes are empty).
"""

from __future__ import annotations

import importlib
import json
import sys
from importlib import metadata


def main() -> None:
    app = importlib.import_module("transformers.cli.transformers").app
    # A click group already in recent releases (huggingface_hub's CLI framework); a Typer app before.
    group = app if hasattr(app, "commands") else importlib.import_module("typer.main").get_command(app)
    serve = group.commands["serve"]
    flags = sorted({opt for param in serve.params for opt in [*param.opts, *param.secondary_opts]
                    if opt.startswith("--")})
    types: dict[str, str] = {}
    choices: dict[str, list[str]] = {}
    for param in serve.params:
        names = [opt for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--")]
        kind = "switch" if getattr(param, "is_flag", False) else {"integer": "int", "float": "float"}.get(
            getattr(param.type, "name", ""))
        types.update(dict.fromkeys(names, kind) if kind and param.nargs == 1 else {})
        if getattr(param.type, "choices", None) and param.nargs == 1:
            choices.update(dict.fromkeys(names, sorted(map(str, param.type.choices))))
    print(json.dumps({"engine": "transformers_serve", "version": metadata.version("transformers"),
                      "distribution": "transformers", "flags": flags, "env": [], "types": types, "choices": choices}))


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # one line the orchestrator reports, not a traceback
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
