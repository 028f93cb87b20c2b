"""Each triage step run as a study of its own: the step's config (the arm materialised as YAML, its runtime,
protocol and prompts) written into STEP_DIR/config, then run as `orchestrator run --config-dir STEP_DIR/config
study=triage_step hydra.run.dir=STEP_DIR/run` runs it (sweep/app.py, in this process), so every step's run dir
is an ordinary run dir, with the command that re-runs it from anywhere into STEP_DIR/rerun/ (STEP_DIR/COMMAND.txt)."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.config.compose import compose
from orchestrator.config.locations import CONF_DIR
from orchestrator.config.search import CommandLine
from orchestrator.config.security import secrets_in_arm
from orchestrator.errors import ConfigError, RecordError, did_you_mean
from orchestrator.record.paths import atomic_write_text, read_json

STUDY = "triage_step"  # the name of every step's files in its config dir


@dataclass(frozen=True)
class Source:
    """The arm a triage is about, as plain config: the arm, the runtime it runs on, the prompts its study sent."""

    arm_name: str
    arm: dict[str, Any]
    runtime: dict[str, Any]
    prompts: dict[str, Any]
    request: dict[str, Any]  # the study's request block and endpoint: what each step sends
    endpoint: str

    @property
    def engine(self) -> str:
        return str(self.arm.get("engine") or "")


@dataclass(frozen=True)
class StepSpec:
    """One step's study: its arms (the first is the baseline), what differs, its protocol, prompts and starts."""

    name: str
    arms: dict[str, dict[str, Any]]
    protocol: dict[str, Any]
    prompts: dict[str, Any]
    runtime: dict[str, Any]
    variables: dict[str, list[str]] = field(default_factory=dict)
    starts: int = 1
    onset: dict[str, Any] | None = None  # the onset sweeper's settings (hydra.sweeper.*): the step is its search


def _plain(node: Any) -> dict[str, Any]:
    made = OmegaConf.to_container(node, resolve=True)
    assert isinstance(made, dict)
    return {str(k): v for k, v in made.items()}


def _pick(composed: DictConfig, arm: str | None, where: str) -> Source:
    arms = list(composed.arms.keys())
    name = arm or str(composed.study.baseline or arms[0])
    if name not in arms:
        raise ConfigError(f"{where} has no arm '{name}' to triage (name one with --arm).{did_you_mean(name, arms)}")
    arm_config = _plain(composed.arms[name])
    if credentials := secrets_in_arm(name, arm_config.get("env") or {}, arm_config.get("engine_args") or {}):
        raise ConfigError(credentials)  # before any step's config is written: it would hold the value
    dirs = [Path(d) for d in composed.get("config_dirs") or []]
    prompts = _plain(composed.prompts)
    folders = [*(d / "prompts" for d in dirs), CONF_DIR / "prompts"]
    for prompt in (prompts.get("prompts") or {}).values():  # a relative file found now: the step's dir is elsewhere
        if prompt.get("file") and not Path(prompt["file"]).is_absolute():
            found = next((f / prompt["file"] for f in folders if (f / prompt["file"]).is_file()), None)
            prompt["file"] = str(found.resolve() if found else prompt["file"])
    return Source(name, arm_config, _plain(composed.runtime), prompts,
                  _plain(composed.protocol.request), str(composed.protocol.endpoint))


def source_from_overrides(overrides: list[str], dirs: list[Path], arm: str | None) -> Source:
    """The arm of a study composed as `run` composes it (a preset, a config dir's study)."""
    return _pick(compose(overrides, dirs), arm, "the study")


def source_from_run(run_dir: Path, arm: str | None) -> Source:
    """The arm a run dir recorded (its .hydra/config.yaml)."""
    recorded = run_dir / ".hydra" / "config.yaml"
    if not recorded.is_file():
        raise RecordError(f"{run_dir} is not a run dir ({recorded} missing): give a run dir `run` made")
    loaded = OmegaConf.load(recorded)
    assert isinstance(loaded, DictConfig)
    texts = run_dir / "prompts.json"  # its prompts by content, as `run --from` takes them: their files may be gone
    sent = read_json(texts) if texts.is_file() else {}
    for prompt_id, prompt in (loaded.get("prompts", {}).get("prompts") or {}).items():
        if prompt_id in sent:
            prompt.update(text=sent[prompt_id]["text"], file=None, repeat_to_chars=None)
    return _pick(loaded, arm, str(run_dir))


def _args(step_dir: Path, onset: bool, into: str) -> list[str]:
    """`run`'s arguments for the step (an onset search: a sweep, -m), its run (or sweep) dir `into`."""
    return [*(["-m"] if onset else []), "--config-dir", str(step_dir / "config"), f"study={STUDY}",
            f"hydra.{'sweep' if onset else 'run'}.dir={into}"]


def command(step_dir: Path, onset: bool = False) -> list[str]:
    """The `run` that re-runs the step from any folder: its config dir by absolute path, into a new dir under
    STEP/rerun/ each time (STEP/run, its first run, stays as it is)."""
    step = step_dir.resolve()
    return ["orchestrator", "run", *_args(step, onset, f"{step / 'rerun'}/${{now:%Y-%m-%d_%H-%M-%S}}")]


def write_step(step_dir: Path, spec: StepSpec) -> None:
    """The step's config dir: its arms, runtime, protocol and prompts as group files, and the study naming them."""
    config = step_dir / "config"
    for group, body in (("runtime", spec.runtime), ("protocol", spec.protocol), ("prompts", spec.prompts)):
        _yaml(config / group / f"{STUDY}.yaml", body)
    for arm, body in spec.arms.items():
        _yaml(config / "arm" / f"{STUDY}_{arm}.yaml", body)
    baseline = next(iter(spec.arms))
    study: dict[str, Any] = {
        "defaults": [*({f"/arm@arms.{arm}": f"{STUDY}_{arm}"} for arm in spec.arms),
                     *({f"override /{group}": STUDY} for group in ("runtime", "protocol", "prompts"))],
        "study": {"name": f"triage_{spec.name}", "description": f"triage step {spec.name}", "baseline": baseline,
                  "variables": spec.variables, "starts": spec.starts}}
    if spec.onset is not None:  # an onset search, run with -m (docs/onset.md)
        study["defaults"].append({"override /hydra/sweeper": "onset"})
        study["hydra"] = {"sweeper": spec.onset}
    _yaml(config / "study" / f"{STUDY}.yaml", study, "# @package _global_\n")
    atomic_write_text(step_dir / "COMMAND.txt", shlex.join(command(step_dir, spec.onset is not None)) + "\n")


def _yaml(path: Path, body: dict[str, Any], head: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, head + OmegaConf.to_yaml(OmegaConf.create(body)))


def run_step(step_dir: Path, onset: bool = False) -> tuple[int, tuple[str, ...]]:
    """Run the step's study; a run dir left by an interrupted try is kept aside (run.interrupted-N) and the step
    run again whole. Returns the study's exit status (4: its measurement failed) and its answer's lines (an
    onset search's answer)."""
    from orchestrator.sweep.app import run_with_hydra

    run_dir = step_dir / "run"
    if run_dir.exists():
        tries = len(list(step_dir.glob("run.interrupted-*")))
        shutil.move(str(run_dir), str(step_dir / f"run.interrupted-{tries + 1}"))
    with contextlib.redirect_stdout(sys.stderr):  # a sweep's jobs print their tables: progress, not the answer
        outcome = run_with_hydra(CommandLine.parse(_args(step_dir, onset, str(run_dir))))
    for text in outcome.notes:  # the study's own warnings, where the triage's progress goes
        print(f"  {text}", file=sys.stderr)
    return outcome.status, tuple(line for line in outcome.out if onset and not line.startswith("Report:"))
