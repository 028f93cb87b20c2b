"""What a running arm really is: facts read from the server, from inside its container (the
environment probe, orchestrator/probes/environment.py, run through the runtime) and from its startup
log; and the matrix key.

The log patterns are the engine profile's (orchestrator/engines/). A fact that no line states is absent,
never guessed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from orchestrator import probes
from orchestrator.engines import ENGINES, profile_for
from orchestrator.errors import ConfigError, ImageError
from orchestrator.runtime.spec import BuildSpec, ExecResult, run_labels

if TYPE_CHECKING:
    from orchestrator.runtime.spec import Handle, Runtime

def log_facts(lines: Iterable[str], engine: str | None = None) -> dict[str, str]:
    """The facts the engine's profile reads from its log (engines/): the first match of each pattern."""
    return profile_for(engine).log_facts(lines)


# The libraries under every engine; the engine's own distributions come from its profile (engines/).
MATRIX_LIBRARIES = ("flashinfer", "torch", "triton")


def matrix_material(image_id: str | None, fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The fields that define "the same cell" across machines: GPU, compute capability, driver, CUDA,
    engine and library versions, image id, quantization, topology, model and revision. Env and log lines are
    left out."""
    probe = fingerprint.get("probe") or {}
    gpu = probe.get("gpu") or {}
    packages = probe.get("packages") or {}
    cell = fingerprint.get("cell") or arm_cell({}, None)  # an image alone: the engine's defaults
    # A record from before arms named their engine: every engine's distributions, as then.
    engines = [profile_for(cell["engine"])] if cell.get("engine") else list(ENGINES.values())
    names = (*MATRIX_LIBRARIES, *(name for engine in engines for name in engine.packages))
    return {
        "image_id": image_id,
        "gpu": gpu.get("name"), "capability": gpu.get("capability"), "driver": gpu.get("driver"),
        "gpu_count": gpu.get("count"), "cuda": probe.get("cuda"),
        "packages": {name: packages.get(name) for name in names if packages.get(name)},
        "quantization": cell.get("quantization"), "topology": cell.get("topology"),
        # only where the model is known: an arm that names none keeps the key it had before
        **({"model": cell["model"], "model_revision": cell.get("model_revision")} if cell.get("model") else {}),
    }


def matrix_key(image_id: str | None, fingerprint: dict[str, Any]) -> str:
    """Short stable hash of `matrix_material`."""
    material = matrix_material(image_id, fingerprint)
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


def arm_cell(engine_args: dict[str, Any], gpus: str | None, engine: str | None = None, model: str | None = None,
             model_revision: str | None = None) -> dict[str, Any]:
    """Quantization and topology, the neutral settings the engine's profile maps to its flags, as the arm's
    flags state them, aliases included (None: the engine's default, or no such flag); the model it serves and
    its revision (guard/model_revision.py; None: not known)."""
    setting = profile_for(engine).setting
    return {"engine": engine, "quantization": setting(engine_args, "quantization"),
            "topology": {"tensor_parallel": setting(engine_args, "tensor_parallel"),
                         "pipeline_parallel": setting(engine_args, "pipeline_parallel"),
                         "data_parallel": setting(engine_args, "data_parallel"), "gpus": gpus},
            "model": model, "model_revision": model_revision}


def probe_result(result: ExecResult, where: str) -> dict[str, Any]:
    """The environment probe's JSON object; {"error": ...} when it failed or printed none."""
    if result.exit_code != 0:
        return {"error": f"{where}: exit {result.exit_code}: {result.output.strip()[-300:]}"}
    value = result.last_json_object()
    return value if value is not None else {"error": f"{where}: the probe printed no JSON: "
                                                      f"{result.output.strip()[-300:]!r}"}


UNKNOWN_INTERPRETER = ("unknown: the arm's command names no Python interpreter (set the arm's `python` to the "
                       "one its engine runs under)")


def probe_container(runtime: Runtime, handle: Handle, secret_names: Iterable[str] = (),
                    python: str | None = "python3") -> dict[str, Any]:
    """Run the environment probe inside a running arm, with its interpreter (`config.arms.arm_interpreter`;
    None: unknown, and no other interpreter is asked). Never raises: a failure is {"error": ...}.
    Env values of `secret_names` (the arm's secret_env) are redacted like the probe's own pattern."""
    if python is None:
        return {"error": UNKNOWN_INTERPRETER}
    probe = _probe_container(runtime, handle, python)
    env = probe.get("env")
    if isinstance(env, dict):
        for name in secret_names:
            if name in env:
                env[name] = "<redacted>"
    return probe


def _probe_container(runtime: Runtime, handle: Handle, arm_python: str) -> dict[str, Any]:
    """With the arm's interpreter (a process arm's venv, not the orchestrator's); `python` where an image
    has no python3."""
    source = probes.source("environment")
    problems = []
    for python in (arm_python, "python") if arm_python == "python3" else (arm_python,):
        try:
            result = runtime.exec(handle, [python, "-c", source])
        except Exception as exc:  # the runtime's own errors and the SDK's alike: the fields become unknown
            problems.append(f"{python}: {type(exc).__name__}: {exc}")
            continue
        if result.exit_code == 0:
            return probe_result(result, python)
        problems.append(f"{python}: exit {result.exit_code}: {result.output.strip()[-200:]}")
    return {"error": "; ".join(problems)}


def probe_image(runtime: Runtime, image: str, labels: dict[str, str], timeout_s: float = 120.0,
                python: str = "python3", gpus: str | None = None) -> dict[str, Any]:
    """Run the environment probe in a throwaway container of `image` (no network); with the process
    runtime, `python` is the interpreter to ask (the host's own, for `orchestrator fingerprint`)."""
    result = runtime.run_oneshot(image, ["-c", probes.source("environment")], labels, entrypoint=[python],
                                 timeout_s=timeout_s, gpus=gpus)
    return probe_result(result, image)


def fingerprint_target(runtime: Runtime, image: str | None, run_id: str) -> dict[str, Any]:
    """`orchestrator fingerprint`: this host (`runtime` a process runtime, no env), or a throwaway
    container of `image`."""
    labels = run_labels(run_id, purpose="fingerprint")
    fingerprint: dict[str, Any]
    if image is None:
        probe = probe_image(runtime, "host", labels, python=sys.executable, gpus="all")
        probe.pop("env", None)  # the host's environment is not part of its fingerprint
        fingerprint = {"probe": probe}
        image_id = None
    else:
        try:
            info = runtime.resolve_image(image, BuildSpec())
        except ImageError as exc:  # a name it does not have is bad input here: no arm, nothing to build
            if exc.absent is None:
                raise
            raise ConfigError(f"{exc.absent}: name an image it has (`docker images` lists them), or build or load "
                              "that one first") from None
        image_id = info.id
        fingerprint = {"probe": probe_image(runtime, info.id, labels), "image_id": info.id,
                       "image_ref": image, "repo_digests": list(info.repo_digests)}
    return {"target": image or "host", "fingerprint": fingerprint,
            "matrix_fields": matrix_material(image_id, fingerprint), "matrix_key": matrix_key(image_id, fingerprint)}


def render(result: dict[str, Any]) -> str:
    """The fingerprint for people: one field a line, the matrix key last."""
    fp = result["fingerprint"]
    probe = fp.get("probe") or {}
    gpu = probe.get("gpu") or {}
    rows = [("target", result["target"])]
    if fp.get("image_id"):
        rows.append(("image id", fp["image_id"]))
    if probe.get("error"):
        rows.append(("probe error", probe["error"]))
    rows += [
        ("os", probe.get("os")), ("cpu", f"{probe.get('cpu')} x{probe.get('cpu_count')}"),
        ("python", probe.get("python")),
        ("gpu", f"{gpu.get('count')} x {gpu.get('name')} (sm {gpu.get('capability')})" if gpu.get("name")
         else f"none ({(probe.get('errors') or {}).get('gpu', 'not read')})"),
        ("driver", gpu.get("driver") or "-"), ("cuda (torch)", probe.get("cuda") or "-"),
        ("packages", ", ".join(f"{k} {v}" for k, v in sorted((probe.get("packages") or {}).items())) or "-"),
        ("matrix key", result["matrix_key"]),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)
