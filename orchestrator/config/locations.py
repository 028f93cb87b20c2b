"""Where the checkout and its conf/ are (stdlib only: the probe verb imports it on machines without Hydra)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: conf/, arms/, runs/
CONF_DIR = Path(os.environ.get("ORCHESTRATOR_CONF_DIR", PROJECT_ROOT / "conf")).resolve()
CONFIG_NAME = "config"  # the primary config, CONF_DIR/config.yaml
# host env names a process inherits by default (config.schema.RuntimeConfig.inherit_env; docs/runtimes.md)
INHERIT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
               "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
