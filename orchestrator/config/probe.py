"""Kernel probe presets (conf/probe/NAME.yaml): which probe (`probe: gemm | ops`), where it runs, its spec.

The spec's defaults live once, in the shipped probe (orchestrator/probes/gemm.py and ops.py `DEFAULTS`): a
field left None here is not sent, and the probe uses its own default. Presets load with PyYAML, or, where it
is missing (the GPU machine), as JSON with full-line # comments (the shipped presets are written so).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.catalog import written
from orchestrator.config.locations import CONF_DIR
from orchestrator.errors import ConfigError, did_you_mean

if TYPE_CHECKING:  # config/arms.py needs Hydra's schema, absent on a GPU machine: imported by `with_arm` alone
    from orchestrator.config.arms import ResolvedArm

PRESETS_DIR = CONF_DIR / "probe"
COMMON_KEYS = ("m", "repeats", "hash_repeats", "seed", "device", "perturb_allocator", "mode", "contend")
SPEC_KEYS = {"gemm": (*COMMON_KEYS, "shapes", "arms", "backend", "layout_tolerance_ulps"),
             "ops": (*COMMON_KEYS, "ops")}
MODES = ("all", "repeats", "m_invariance")
BACKENDS = ("auto", "scaled_mm", "emulate")
CONTEND = ("process", "stream")  # orchestrator/probes/contend.py


@dataclass(frozen=True)
class RecordedArm:
    """A study's arm as its record (the arms table) has it: its resolved config and the identity it ran with."""

    name: str
    config_json: str
    image_id: str
    identity_kind: str  # record.identity.identity_kind of image_id


@dataclass
class ProbeConfig:
    """A probe preset. Spec fields (None: the probe's own default) go to gemm.py as they are."""

    name: str = "probe"
    probe: str = "gemm"  # gemm (orchestrator/probes/gemm.py) | ops (orchestrator/probes/ops.py)
    # where it runs: a container of `image` (Docker), or a local process with `--local`
    image: str | None = None
    gpus: str | None = None  # null: none; "all"; or device ids "0,1"
    env: dict[str, str] = field(default_factory=dict)
    processes: int = 2  # separate processes with the same seed, compared cell by cell
    timeout_s: float = 900.0  # per process
    # the spec (orchestrator/probes/gemm.py documents each key)
    shapes: dict[str, list[int]] | None = None  # name -> [K, N]
    m: list[int] | None = None
    repeats: int | None = None
    hash_repeats: int | None = None
    seed: int | None = None
    arms: list[str] | None = None
    device: str | None = None
    backend: str | None = None
    perturb_allocator: bool | None = None
    mode: str | None = None
    contend: str | None = None  # null: alone; process | stream: busy on the same device while it repeats
    layout_tolerance_ulps: float | None = None
    # probe: ops: entry name -> {op, arms, m, expect_invariant, params} (orchestrator/probes/ops.py)
    ops: dict[str, dict[str, Any]] | None = None
    # set by --arm, not a preset key: the arm resolved as its study ran it, `identity` what its record says ran
    of_arm: ResolvedArm | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.processes < 1:
            problems.append(f"processes {self.processes}: must be >= 1")
        if self.timeout_s <= 0:
            problems.append(f"timeout_s {self.timeout_s}: must be > 0")
        if self.repeats is not None and self.repeats < 1:
            problems.append(f"repeats {self.repeats}: must be >= 1")
        if self.shapes is not None and (not self.shapes or any(len(v) != 2 or min(v) < 1
                                                               for v in self.shapes.values())):
            problems.append("shapes: give name: [K, N] with positive K and N")
        if self.m is not None and (not self.m or min(self.m) < 1):
            problems.append("m: a non-empty list of positive batch sizes")
        if self.mode is not None and self.mode not in MODES:
            problems.append(f"mode '{self.mode}': expected one of {', '.join(MODES)}")
        if self.contend is not None and self.contend not in CONTEND:
            problems.append(f"contend '{self.contend}': expected one of {', '.join(CONTEND)} (or null)")
        if self.backend is not None and self.backend not in BACKENDS:
            problems.append(f"backend '{self.backend}': expected one of {', '.join(BACKENDS)}")
        if self.probe not in SPEC_KEYS:
            problems.append(f"probe '{self.probe}': expected one of {', '.join(SPEC_KEYS)}")
        else:
            foreign = [k for kind, keys in SPEC_KEYS.items() if kind != self.probe for k in keys
                       if k not in SPEC_KEYS[self.probe] and getattr(self, k) is not None]
            problems += [f"{k}: not a key of the {self.probe} probe (keys: {', '.join(SPEC_KEYS[self.probe])})"
                         for k in foreign]
        if self.probe == "ops" and not self.ops:
            problems.append("ops: give name: {op: KIND, ...} (docs/probes.md lists the kinds)")
        problems += [p for name, entry in (self.ops or {}).items() for p in _entry_shape(name, entry)]
        if problems:
            raise ConfigError([f"probe {self.name}: {p}" for p in problems])

    def spec(self) -> dict[str, Any]:
        """The JSON spec for the probe: the fields this preset sets."""
        return {k: getattr(self, k) for k in SPEC_KEYS[self.probe] if getattr(self, k) is not None}


def _entry_shape(name: str, entry: Any) -> list[str]:
    """The types of an ops entry, checked here; its op, arms and parameters are checked by ops.py, which
    knows them (it runs where torch is)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("op"), str):
        return [f"ops.{name}: give {{op: KIND, ...}} (docs/probes.md lists the kinds)"]
    problems = []
    if not isinstance(entry.get("expect_invariant", False), bool):
        problems.append(f"ops.{name}.expect_invariant {written(entry['expect_invariant'])}: must be true or false")
    arms = entry.get("arms", [])
    if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
        problems.append(f"ops.{name}.arms {written(arms)}: must be a list of arm names")
    m = entry.get("m", [1])
    if not isinstance(m, list) or not m or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                                     for v in m):
        problems.append(f"ops.{name}.m {written(m)}: must be a non-empty list of positive batch sizes")
    return problems


def presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_probe_config(preset: str | None = None, overrides: list[str] | None = None,
                      arm: str | RecordedArm | None = None, image: str | None = None,
                      dirs: list[Path] | None = None) -> ProbeConfig:
    """A preset name (conf/probe/NAME.yaml) or a YAML path, then KEY=VALUE overrides (values in YAML), then
    the image, GPUs and interpreter of `arm` (see `with_arm`; `dirs`: the user's config dirs), then `image`."""
    data: dict[str, Any] = {}
    if preset:
        path = Path(preset) if preset.endswith((".yaml", ".yml")) else PRESETS_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise ConfigError(f"unknown probe preset '{preset}'.{did_you_mean(preset, presets())}")
        data = _load(path.read_text(encoding="utf-8"), str(path)) or {}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"'{item}': expected KEY=VALUE")
        data[key.strip()] = _load(value, item)
    known = {f.name for f in dataclasses.fields(ProbeConfig)} - {"of_arm"}
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError([f"unknown probe key '{k}'.{did_you_mean(k, known)}" for k in unknown])
    config = ProbeConfig(**data)
    if arm:
        config = with_arm(config, arm, dirs or [])
    return dataclasses.replace(config, image=image) if image else config


def _load(text: str, where: str) -> Any:
    """YAML through PyYAML; without it, JSON once full-line # comments are dropped."""
    try:
        import yaml
    except ImportError:
        try:
            return json.loads("\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
        except ValueError as exc:
            raise ConfigError(f"{where}: PyYAML is not installed and this is not JSON ({exc}); install PyYAML "
                              "or write it as JSON") from exc
    return yaml.safe_load(text)


def with_arm(config: ProbeConfig, arm: str | RecordedArm, dirs: list[Path]) -> ProbeConfig:
    """The probe as an arm runs: its image, GPUs, interpreter and code identity's inputs; `arm`: an arm file
    (`_arm_file`), or a study's arm as its record has it."""
    from omegaconf import OmegaConf

    from orchestrator.config.arms import resolve_arms
    from orchestrator.config.compose import explain, resolve_arm_paths
    from orchestrator.config.schema import ArmConfig, Config, RuntimeConfig
    from orchestrator.runtime.traits import IdentityKind, kind_running

    name, ran, ran_as = (arm, None, None) if isinstance(arm, str) else (arm.name, arm.image_id, arm.identity_kind)
    node = _arm_file(arm, dirs) if isinstance(arm, str) else json.loads(arm.config_json)
    try:
        typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ArmConfig), node))
    except Exception as exc:
        raise explain(exc, dirs) from exc
    assert isinstance(typed, ArmConfig)
    # a local process where the study ran one (its identity is a code identity), else (an arm file too) in its image
    kind = kind_running(IdentityKind(ran_as or IdentityKind.image))
    study = Config(arms={name: typed}, config_dirs=[str(d) for d in dirs], runtime=RuntimeConfig(kind=kind))
    resolve_arm_paths(study)  # the record's are absolute already
    resolved = dataclasses.replace(resolve_arms(study)[name], identity=ran)
    return dataclasses.replace(config, image=typed.image, gpus=typed.gpus, of_arm=resolved)


def _arm_file(arm: str, dirs: list[Path]) -> Any:
    """The arm file (the project's conf/arm/, or DIR/arm/ of the user's config dirs) composed on its own, its
    defaults list included, so an arm that takes its image from a template (`defaults: [reference]`) gets that
    image."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    choices = sorted({p.stem for root in (CONF_DIR, *dirs) for p in (root / "arm").glob("*.yaml")})
    if arm not in choices:
        raise ConfigError(f"unknown arm '{arm}'.{did_you_mean(arm, choices)}")
    GlobalHydra.instance().clear()
    # Hydra finds a primary config only in the dir it starts from: the one that has the arm; the rest are searched
    root = next(d for d in (CONF_DIR, *dirs) if (d / "arm" / f"{arm}.yaml").is_file())
    rest = [d for d in (CONF_DIR, *dirs) if d != root]
    with initialize_config_dir(config_dir=str(root), version_base="1.3"):
        composed = hydra_compose(config_name=f"arm/{arm}",
                                 overrides=[f"hydra.searchpath=[{','.join(f'file://{d}' for d in rest)}]"])
    GlobalHydra.instance().clear()
    return composed.get("arm", composed)
