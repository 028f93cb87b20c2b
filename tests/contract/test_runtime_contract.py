"""One contract over every runtime: whatever the study does with a Runtime works the same on Docker (the local
engine, and the second one reached over ssh://), on local processes (here, and held by a SLURM job), on the
unit tests' fake and on a runtime added outside runtime/. Docker cases need an engine, ssh:// and SLURM cases
the hosts of scripts/ci-hosts.sh (tests/hosts.py): they fail under CI=true without them, skip otherwise;
process cases always run (the reference engine from the source tree, torch from the venv)."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.config.arms import build_spec, container_spec
from orchestrator.config.schema import ArmConfig, BuildConfig, RuntimeConfig
from orchestrator.errors import ArmStartError, ConfigError, ImageError, RuntimeFailure
from orchestrator.record.identity import identity_kind
from orchestrator.run.wire.client import wait_ready
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.runtime.process import ProcessRuntime
from orchestrator.runtime.spec import LABEL_NS, BuildSpec, ContainerSpec, Handle, Mount, Runtime
from tests.hosts import Hosts, hosts_fixture  # noqa: F401 (a fixture)
from tests.slurm_held_runtime import HeldRuntime
from tests.wrapped_runtime import KIND as WRAPPED_KIND
from tests.wrapped_runtime import WrappedRuntime

REFERENCE_IMAGE = "orchestrator/reference-engine:0.1.0"
PYTHON_IMAGE = "orchestrator/debian-python:bookworm"
ENGINE_ARGS = {"served-model-name": "reference", "seed": 0, "max-num-seqs": 4}
PROCESS_ENV = {"PYTHONPATH": "arms/reference-engine", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
INHERIT_ENV = RuntimeConfig().inherit_env


@dataclass
class Kind:
    """One runtime under test, with what differs between them (how the engine is named and found)."""

    name: str
    runtime: Runtime
    engine_image: str
    engine_command: list[str]
    engine_env: dict[str, str]
    engine_build: BuildConfig
    crash_image: str
    knobs_entrypoint: list[str] | None
    fresh: Callable[[], Runtime]  # a new runtime object, as `orchestrator clean` has after the run's process died
    idle_image: str = ""  # a server that starts and idles (default: crash_image with an idle command)
    orchestrator_pid: int = field(default_factory=os.getpid)  # the process that runs the runtime

    def env_argv(self, names: tuple[str, ...]) -> list[str]:
        """A command printing these env names as one JSON object."""
        if self.name == "fake":
            return ["fake-printenv", *names]
        return ["python3", "-c", f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"]

    def exists_argv(self, path: Path) -> list[str]:
        """A command printing whether `path` exists where the server runs (True/False)."""
        if self.name == "fake":
            return ["fake-exists", str(path)]
        return ["python3", "-c", f"import os; print(os.path.exists({str(path)!r}))"]

    def fail_argv(self, code: int, text: str) -> list[str]:
        if self.name == "fake":
            return ["fake-exit", str(code), text]
        return ["python3", "-c", f"import sys; print({text!r}); sys.exit({code})"]

    def http(self) -> httpx.Client:
        return httpx.Client(transport=self.runtime.http_transport, timeout=60)

    def arm(self, command: list[str] | None = None, env: dict[str, str] | None = None,
            engine_args: dict[str, Any] | None = None, image: str | None = None) -> ArmConfig:
        return ArmConfig(image=image or self.engine_image, build=self.engine_build,
                         command=self.engine_command if command is None else command,
                         env={**self.engine_env, **(env or {})},
                         engine_args=ENGINE_ARGS if engine_args is None else engine_args)

    def spec(self, arm: ArmConfig, run_id: str, arm_name: str = "contract",
             host_env: dict[str, str] | None = None) -> ContainerSpec:
        image = self.runtime.resolve_image(arm.image, build_spec(arm)).id
        labels = {f"{LABEL_NS}.run": run_id, f"{LABEL_NS}.study": "contract"}
        return container_spec(arm_name, arm, image, labels, host_env or {})

    def gone(self, handle: Handle, pid: int | None) -> bool:
        if self.name == "fake":
            return self.runtime._containers[handle.id].removed  # type: ignore[attr-defined]
        if isinstance(self.runtime, DockerRuntime):
            import docker.errors

            try:
                self.runtime.client.containers.get(handle.id)
            except docker.errors.NotFound:
                return True
            return False
        assert pid is not None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return stat[0] == "Z"  # a zombie is dead; only its parent's wait is missing


def test_every_runtime_a_config_can_name_runs_this_contract() -> None:
    """A new runtime is a class in runtime/ (docs/ARCHITECTURE.md, "Where to change what"): its kind in
    `make_runtime`, the config's name for it and its conf/runtime/ file agree, and this suite runs over it."""
    from orchestrator.runtime import KINDS

    conf = {path.stem for path in (Path(__file__).resolve().parents[2] / "conf" / "runtime").glob("*.yaml")}
    assert set(KINDS) == conf
    assert set(KINDS) <= set(UNDER_TEST)


def test_a_runtime_outside_runtime_is_its_module_plus_its_conf_entry() -> None:
    """tests/wrapped_runtime.py and tests/wrapped_conf/runtime/wrapped.yaml, given as a user config dir: the
    config names its class, the run makes it, and every question of the run is answered by its traits."""
    from orchestrator.config.arms import resolve_arms, runtime_for
    from orchestrator.config.validate import load
    from orchestrator.runtime.traits import traits_of

    root = Path(__file__).resolve().parents[2]
    typed = load(["runtime=wrapped", "arm@arms.baseline=reference_process", "arm@arms.wide_batch=reference_process"],
                 [root / "tests" / "wrapped_conf"])
    assert typed.runtime.kind == WRAPPED_KIND and typed.runtime.inherit_env == INHERIT_ENV  # process's settings
    assert type(runtime_for(typed.runtime)) is WrappedRuntime
    assert traits_of(typed.runtime.kind) is WrappedRuntime.traits is not traits_of("process")
    assert all(arm.traits is WrappedRuntime.traits for arm in resolve_arms(typed).values())


def _pid(kind: Kind, handle: Handle) -> int | None:
    return kind.runtime.pid(handle) if isinstance(kind.runtime, ProcessRuntime | HeldRuntime) else None


# every runtime kind: Docker here and over ssh:// (scripts/ci-hosts.sh's second engine), processes here and in
# a SLURM job (tests/slurm_held_runtime.py), the unit tests' in-process one, and one added outside runtime/
UNDER_TEST = ("docker", "ssh", "process", "slurm", "fake", "wrapped")
MARKS = {"docker": [pytest.mark.docker], "ssh": [pytest.mark.docker, pytest.mark.hosts], "slurm": [pytest.mark.hosts]}


@pytest.fixture(scope="module", params=[pytest.param(k, marks=MARKS.get(k, [])) for k in UNDER_TEST])
def kind(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    if request.param == "fake":
        from tests.fake_engine import fake_runtime

        made = fake_runtime()
        yield Kind("fake", made, "fake-engine", [], {}, BuildConfig(), "fake-crash", None, lambda: made,
                   idle_image="fake-idle")
    elif request.param == "docker":
        request.getfixturevalue("docker_client")  # skip, or fail under CI=true, without an engine
        yield Kind("docker", DockerRuntime(), REFERENCE_IMAGE, [], {}, BuildConfig(), PYTHON_IMAGE, None,
                   DockerRuntime)
    elif request.param == "ssh":
        request.getfixturevalue("docker_client")  # its images come from the local engine
        yield from _over_ssh(request.getfixturevalue("hosts"))
    elif request.param == "slurm":
        yield from _held_by_slurm(request.getfixturevalue("hosts"), tmp_path_factory.mktemp("held-state"))
    else:
        state = tmp_path_factory.mktemp("process-state")
        made_class = ProcessRuntime if request.param == "process" else WrappedRuntime
        yield Kind(request.param, made_class(inherit_env=INHERIT_ENV, state_dir=state), *PROCESS_ENGINE,
                   lambda: made_class(inherit_env=INHERIT_ENV, state_dir=state))


# what a process runtime runs: the reference engine from the source tree, its knobs listed by the same module
PROCESS_ENGINE = ("process", ["python3", "-m", "refengine"], PROCESS_ENV,
                  BuildConfig(context="arms/reference-engine/refengine"), "process",
                  ["env", "PYTHONPATH=arms/reference-engine", "python3", "-m", "refengine"])


def _over_ssh(hosts: Hosts) -> Iterator[Kind]:
    """The second engine as a study's arm reaches it, `docker_host: ssh://...`: the client side's ~/.ssh by $HOME
    (docs/hosts.md). What it lacks of the suite's images is shipped from the local engine, as a study ships an
    arm's image (runtime.ship_image, run/arm/hosts.py)."""
    home = os.environ["HOME"]
    os.environ["HOME"] = hosts.ssh_home
    try:
        far, here = DockerRuntime(hosts.ssh_url), DockerRuntime()
        for ref in (REFERENCE_IMAGE, PYTHON_IMAGE):
            image = here.resolve_image(ref, BuildSpec())
            try:
                far.resolve_image(image.id, BuildSpec())
            except ImageError:
                assert here.ship_image(image, far) > 0
        assert far.host_name() and far.ssh is not None
        yield Kind("ssh", far, REFERENCE_IMAGE, [], {}, BuildConfig(), PYTHON_IMAGE, None,
                   lambda: DockerRuntime(hosts.ssh_url))
        for label in list(far.ssh.watchdogs):  # the far side removes what is left of each run
            far.ssh.unwatch(label)
    finally:
        os.environ["HOME"] = home


def _held_by_slurm(hosts: Hosts, state: Path) -> Iterator[Kind]:
    """The process runtime inside a SLURM job (`srun`), as a sweep on SLURM with runtime=process runs it. The
    job's orchestrator has CONTRACT_HOST_ONLY in its env, as the server fixture gives a runtime run here."""
    opened: list[HeldRuntime] = []

    def held() -> HeldRuntime:
        opened.append(HeldRuntime(state, hosts.env(HOME=os.environ["HOME"], CONTRACT_HOST_ONLY="must not leak")))
        return opened[-1]

    try:
        made = held()
        assert made.job and made.node  # SLURM_JOB_ID and SLURMD_NODENAME, as the job saw them
        yield Kind("slurm", made, *PROCESS_ENGINE, held, orchestrator_pid=made.driver_pid)
    finally:
        for runtime in opened:
            runtime.close()


@pytest.fixture(scope="module")
def server(kind: Kind) -> Iterator[tuple[Kind, Handle]]:
    """The reference engine, started once per runtime, with a plain and a secret env var."""
    os.environ["CONTRACT_HOST_ONLY"] = "must not leak"
    arm = kind.arm(env={"CONTRACT_VAR": "configured"})
    arm.secret_env = ["CONTRACT_SECRET"]
    spec = kind.spec(arm, f"contract-{secrets.token_hex(3)}", host_env={"CONTRACT_SECRET": "s3cret"})
    handle = kind.runtime.start(spec)
    try:
        wait_ready(handle.base_url, "/health", 120, exit_code=lambda: kind.runtime.exit_code(handle),
                   log_tail=lambda: [line.text for line in kind.runtime.logs(handle, tail=50)],
                   transport=kind.runtime.http_transport)
        yield kind, handle
    finally:
        os.environ.pop("CONTRACT_HOST_ONLY", None)
        kind.runtime.stop(handle, 10)
        kind.runtime.remove(handle)


def test_resolve_image_is_stable_and_content_addressed(kind: Kind) -> None:
    arm = kind.arm()
    first = kind.runtime.resolve_image(arm.image, build_spec(arm))
    assert first == kind.runtime.resolve_image(arm.image, build_spec(arm))
    assert first.ref == arm.image
    assert first.id.startswith({"docker": "sha256:", "ssh": "sha256:", "process": "process:sha256:",
                                "slurm": "process:sha256:", "fake": "fake:sha256:",
                                "wrapped": "process:sha256:"}[kind.name])


def test_ready_server_answers_a_completion(server: tuple[Kind, Handle]) -> None:
    kind, handle = server
    assert kind.runtime.exit_code(handle) is None
    if kind.name != "fake":
        assert handle.base_url.startswith("http://127.0.0.1:")
    body = {"model": "reference", "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0,
            "logprobs": 5}
    with kind.http() as client:
        response = client.post(f"{handle.base_url}/v1/completions", json=body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["text"] and len(choice["logprobs"]["top_logprobs"]) == 4


def test_logs_carry_the_startup_line_with_timestamps(server: tuple[Kind, Handle]) -> None:
    kind, handle = server
    lines = kind.runtime.logs(handle)
    assert any("Starting vLLM-compatible server" in line.text for line in lines)
    assert {line.stream for line in lines} <= {"stdout", "stderr"}
    assert all(line.timestamp[:2] == "20" and line.timestamp.endswith("Z") for line in lines)
    assert [line.timestamp for line in lines] == sorted(line.timestamp for line in lines)
    tail = kind.runtime.logs(handle, tail=2)
    assert len(tail) == 2 and tail == lines[-2:]


def test_exec_runs_next_to_the_server_with_the_configured_env(server: tuple[Kind, Handle]) -> None:
    kind, handle = server
    result = kind.runtime.exec(handle, kind.env_argv(("CONTRACT_VAR", "CONTRACT_SECRET", "CONTRACT_HOST_ONLY")))
    assert result.exit_code == 0, result.output
    env = json.loads(result.output.strip().splitlines()[-1])
    assert env == {"CONTRACT_VAR": "configured", "CONTRACT_SECRET": "s3cret", "CONTRACT_HOST_ONLY": None}
    failed = kind.runtime.exec(handle, kind.fail_argv(4, "nope"))
    assert failed.exit_code == 4 and "nope" in failed.output


def test_run_oneshot_lists_the_engine_knobs(kind: Kind) -> None:
    arm = kind.arm()
    image = kind.runtime.resolve_image(arm.image, build_spec(arm)).id
    run_id = f"contract-{secrets.token_hex(3)}"
    result = kind.runtime.run_oneshot(image, ["--list-knobs"], {f"{LABEL_NS}.run": run_id},
                                      kind.knobs_entrypoint, 120)
    assert result.exit_code == 0, result.output
    knobs = json.loads(result.output.strip().splitlines()[-1])
    assert "--max-num-seqs" in knobs["flags"] and "REFENGINE_FUSED_FINALIZE" in knobs["env"]
    assert kind.runtime.cleanup({f"{LABEL_NS}.run": run_id}) == []  # nothing of it is left


def test_stop_returns_the_exit_code_and_remove_leaves_nothing(kind: Kind) -> None:
    spec = kind.spec(kind.arm(), f"contract-{secrets.token_hex(3)}")
    handle = kind.runtime.start(spec)
    pid = _pid(kind, handle)
    try:
        wait_ready(handle.base_url, "/health", 120, exit_code=lambda: kind.runtime.exit_code(handle),
                   log_tail=lambda: [line.text for line in kind.runtime.logs(handle, tail=50)],
                   transport=kind.runtime.http_transport)
        code = kind.runtime.stop(handle, 10)
        assert code is not None
        assert kind.runtime.exit_code(handle) == code
        assert any("shutting down" in line.text for line in kind.runtime.logs(handle))  # logs outlive stop
    finally:
        kind.runtime.remove(handle)
    assert kind.gone(handle, pid)
    kind.runtime.remove(handle)  # twice is fine
    assert kind.runtime.stop(handle, 1) is None


def test_stop_with_no_grace_kills_at_once(kind: Kind) -> None:
    """stop(handle, 0), as a start cut short calls it: killed, its status said. Before, Docker's took the 0 as
    its transport's connect timeout and raised ValueError (a cancelled SLURM job reported it as a bug)."""
    spec = kind.spec(kind.arm(), f"contract-{secrets.token_hex(3)}")
    handle = kind.runtime.start(spec)
    try:
        code = kind.runtime.stop(handle, 0)
        assert code is not None and kind.runtime.exit_code(handle) == code
    finally:
        kind.runtime.remove(handle)


def test_server_that_exits_at_once_reports_status_and_log(kind: Kind) -> None:
    crash = "import sys, time; print('boom: no model', flush=True); time.sleep(1); sys.exit(3)"
    arm = kind.arm(command=["python3", "-c", crash], engine_args={}, image=kind.crash_image)
    arm.process_port_args = []
    spec = kind.spec(arm, f"contract-{secrets.token_hex(3)}")
    handle = kind.runtime.start(spec)
    try:
        with pytest.raises(ArmStartError, match="exited with status 3") as caught:
            wait_ready(handle.base_url or "http://127.0.0.1:9", "/health", 60,
                       exit_code=lambda: kind.runtime.exit_code(handle),
                       log_tail=lambda: [line.text for line in kind.runtime.logs(handle, tail=50)],
                       transport=kind.runtime.http_transport)
        assert "boom: no model" in caught.value.log_tail
        assert kind.runtime.stop(handle, 5) == 3
    finally:
        kind.runtime.remove(handle)


def test_cleanup_by_run_label_removes_a_leftover(kind: Kind, tmp_path: Path) -> None:
    run_id = f"contract-{secrets.token_hex(3)}"
    arm = kind.arm(command=["python3", "-c", "import time; print('idle', flush=True); time.sleep(600)"],
                   engine_args={}, image=kind.idle_image or kind.crash_image)
    arm.process_port_args = []
    handle = kind.runtime.start(kind.spec(arm, run_id))
    pid = _pid(kind, handle)
    other = kind.runtime.start(kind.spec(arm, f"contract-{secrets.token_hex(3)}", arm_name="other"))
    try:
        fresh = kind.fresh()
        assert fresh.cleanup({f"{LABEL_NS}.run": run_id}) == [handle.name]
        deadline = time.monotonic() + 10
        while not kind.gone(handle, pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert kind.gone(handle, pid)
        assert kind.runtime.exit_code(other) is None  # another run's server is untouched
        assert fresh.cleanup({f"{LABEL_NS}.run": run_id}) == []
    finally:
        kind.runtime.stop(other, 1)
        kind.runtime.remove(other)
        kind.runtime.remove(handle)


# process-only parts of the contract: what a local process cannot do is refused, not faked ----------

@pytest.fixture()
def process_runtime(tmp_path: Path) -> ProcessRuntime:
    return ProcessRuntime(INHERIT_ENV, state_dir=tmp_path / "state")


def test_process_maps_mounts_to_host_paths(process_runtime: ProcessRuntime, tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    (models / "tiny" / "config.json").write_text("{}")
    script = "import os, sys; print(sys.argv[1], os.environ['MODEL'], os.path.isfile(sys.argv[1] + '/config.json'))"
    spec = ContainerSpec(name="m", image="process", command=["python3", "-c", script, "/models/tiny"],
                         env={"MODEL": "/models/tiny/config.json"}, secret_env={}, labels={f"{LABEL_NS}.arm": "vllm"},
                         container_port=8000, mounts=[Mount(str(models), "/models")], process_port_args=[])
    handle = process_runtime.start(spec)
    try:
        deadline = time.monotonic() + 30
        while process_runtime.exit_code(handle) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        printed = " ".join(line.text for line in process_runtime.logs(handle))
        assert printed == f"{models}/tiny {models}/tiny/config.json True"  # as a bind mount shows it
    finally:
        process_runtime.remove(handle)
    spec.mounts = [Mount(str(tmp_path / "absent"), "/models")]
    with pytest.raises(ConfigError, match=re.escape(f"arm 'vllm': mount {tmp_path / 'absent'} -> /models")):
        process_runtime.start(spec)


def test_process_arms_get_caches_of_their_own_unless_their_env_names_one(process_runtime: ProcessRuntime) -> None:
    """Two processes share one filesystem: the libraries' default caches ($HOME/.cache, /tmp/torchinductor_*)
    would be shared. Each process gets its own, as a container has (guard/caches.py checks the rest)."""
    script = "import os; print(os.environ['XDG_CACHE_HOME'], os.environ['TRITON_CACHE_DIR'])"
    seen = []
    for env in ({}, {}, {"TRITON_CACHE_DIR": "/mine"}):
        spec = ContainerSpec(name="c", image="process", command=["python3", "-c", script], env=env, secret_env={},
                             labels={}, container_port=8000, process_port_args=[])
        handle = process_runtime.start(spec)
        try:
            deadline = time.monotonic() + 30
            while process_runtime.exit_code(handle) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.append(" ".join(line.text for line in process_runtime.logs(handle)).split())
        finally:
            process_runtime.remove(handle)
    assert seen[0][0] != seen[1][0] and all(str(process_runtime.state_dir) in s[0] for s in seen)
    assert seen[2][1] == "/mine"


def test_process_needs_a_full_command(process_runtime: ProcessRuntime) -> None:
    spec = ContainerSpec(name="e", image="process", command=[], env={}, secret_env={}, labels={},
                         container_port=8000)
    with pytest.raises(ConfigError, match="full argv"):
        process_runtime.start(spec)
    spec.command = ["--seed", "0"]  # a Docker arm's command: engine flags only, after the image entrypoint
    with pytest.raises(ConfigError, match="would start with the flag '--seed'"):
        process_runtime.start(spec)
    spec.command = ["/no/such/engine"]
    with pytest.raises(ArmStartError, match="/no/such/engine"):
        process_runtime.start(spec)
    assert list(process_runtime.state_dir.iterdir()) == []


def test_process_gpus_map_to_cuda_visible_devices(process_runtime: ProcessRuntime) -> None:
    def visible(gpus: str | None, host: dict[str, str]) -> str | None:
        runtime = ProcessRuntime(INHERIT_ENV, state_dir=process_runtime.state_dir,
                                 host_env={"PATH": "/usr/bin", **host})
        spec = ContainerSpec(name="g", image="process", command=["x"], env={}, secret_env={}, labels={},
                             container_port=8000, gpus=gpus)
        return runtime._env(spec.gpus, spec.env).get("CUDA_VISIBLE_DEVICES")

    assert visible(None, {"CUDA_VISIBLE_DEVICES": "0"}) == ""  # no gpus: none visible, as in a container
    assert visible("1,2", {}) == "1,2"
    assert visible("all", {"CUDA_VISIBLE_DEVICES": "4,5"}) == "4,5"  # e.g. a SLURM allocation
    assert visible("all", {}) is None


def test_process_handle_of_another_runtime_is_unknown(process_runtime: ProcessRuntime) -> None:
    handle = Handle("proc-unknown", "ghost", "")
    with pytest.raises(RuntimeFailure, match="no longer exists"):
        process_runtime.logs(handle)
    assert process_runtime.stop(handle, 1) is None


def test_a_server_pinned_to_one_core_runs_there_and_the_inventory_lists_the_cores(kind: Kind) -> None:
    inventory = kind.runtime.inventory()
    assert inventory.cpus and all(isinstance(cpu, int) for cpu in inventory.cpus)
    assert all(gpu.uuid for gpu in inventory.gpus)
    if kind.name == "fake":
        return  # no processes to pin
    spec = kind.spec(kind.arm(), f"contract-pin-{secrets.token_hex(3)}")
    spec.cpuset = str(inventory.cpus[-1])
    handle = kind.runtime.start(spec)
    try:
        wait_ready(handle.base_url, "/health", 120, exit_code=lambda: kind.runtime.exit_code(handle),
                   log_tail=lambda: [], transport=kind.runtime.http_transport)
        seen = kind.runtime.exec(handle, ["python3", "-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
        assert seen.output.strip() == f"[{inventory.cpus[-1]}]", seen.output
    finally:
        kind.runtime.stop(handle, 10)
        kind.runtime.remove(handle)


# the traits (runtime/traits.py) held against what each runtime does ----------------------------------

def test_a_runtime_that_isolates_the_filesystem_hides_a_host_file_and_one_that_does_not_shows_it(
        server: tuple[Kind, Handle]) -> None:
    kind, handle = server
    with tempfile.NamedTemporaryFile(prefix="contract-host-file-") as host_file:
        seen = kind.runtime.exec(handle, kind.exists_argv(Path(host_file.name)))
    assert seen.exit_code == 0, seen.output
    assert seen.output.strip().splitlines()[-1] == str(not kind.runtime.traits.isolates_filesystem)


def test_its_identities_read_as_the_kind_its_traits_say(kind: Kind) -> None:
    arm = kind.arm()
    found = kind.runtime.resolve_image(arm.image, build_spec(arm)).id
    assert identity_kind(found) == kind.runtime.traits.identity_kind.value


def test_a_runtime_with_image_ids_refuses_an_image_it_has_not_and_one_without_identifies_any_code(
        kind: Kind) -> None:
    absent = f"orchestrator/contract-absent:{secrets.token_hex(3)}"
    if kind.runtime.traits.image_ids:
        with pytest.raises(ImageError):
            kind.runtime.resolve_image(absent, BuildSpec())
    else:  # a code identity: of the interpreter and its distributions, whatever the ref says
        assert kind.runtime.resolve_image(absent, BuildSpec()).id == kind.runtime.resolve_image("x", BuildSpec()).id


def test_a_runtime_ships_an_image_to_another_of_its_kind_only_where_its_traits_say_so(kind: Kind) -> None:
    small = PYTHON_IMAGE if isinstance(kind.runtime, DockerRuntime) else kind.engine_image
    image = kind.runtime.resolve_image(small, build_spec(kind.arm(image=small)))
    if not kind.runtime.traits.ships_images:
        with pytest.raises(ImageError):
            kind.runtime.ship_image(image, kind.fresh())
        return
    other = kind.fresh()  # the same daemon: a load of what it has keeps the id
    assert kind.runtime.ship_image(image, other) > 0
    assert other.resolve_image(image.id, BuildSpec()).id == image.id


def test_a_memory_limit_is_enforced_where_its_traits_say_so_and_refused_elsewhere(kind: Kind) -> None:
    arm = kind.arm(command=["python3", "-c", "import time; print('idle', flush=True); time.sleep(600)"],
                   engine_args={}, image=kind.idle_image or kind.crash_image)
    arm.process_port_args = []
    spec = kind.spec(arm, f"contract-{secrets.token_hex(3)}")
    spec.memory = "64m"
    if not kind.runtime.traits.memory_limits:
        with pytest.raises(ConfigError, match="memory limit"):
            kind.runtime.start(spec)
        return
    handle = kind.runtime.start(spec)
    try:
        limit = kind.runtime.exec(handle, ["sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
                                                 "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"])  # v2, v1
        assert limit.output.strip() == str(64 << 20), limit.output
        above = kind.runtime.exec(handle, ["python3", "-c", "b = b'x' * (256 << 20)"])  # every page written
        assert above.exit_code == 137, above  # SIGKILL: the kernel held it to the limit
    finally:
        kind.runtime.stop(handle, 10)
        kind.runtime.remove(handle)


def test_a_server_runs_in_a_cgroup_of_its_own_where_its_traits_say_so(server: tuple[Kind, Handle]) -> None:
    """Where not, a SLURM job holds its servers: they are the job's processes, and its cgroup binds them."""
    kind, handle = server
    if kind.name == "fake":
        pid = os.getpid()  # its servers are this process's handlers
    elif isinstance(kind.runtime, DockerRuntime):
        pid = int(kind.runtime._container(handle).attrs["State"]["Pid"])
    else:
        pid = _pid(kind, handle)
    try:
        theirs = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:  # a daemon in another pid namespace: its server is not a process of this host's view
        theirs = None
    assert (theirs != Path(f"/proc/{kind.orchestrator_pid}/cgroup").read_text()) == kind.runtime.traits.own_cgroup
    if isinstance(kind.runtime, HeldRuntime):
        assert pid in kind.runtime.job_pids()


def test_its_host_name_is_where_its_servers_run(kind: Kind) -> None:
    named = kind.runtime.host_name()
    if kind.runtime.traits.isolates_filesystem:  # a Docker daemon's own name (the far host's over ssh://)
        assert named and named == kind.runtime.client.info()["Name"]  # type: ignore[attr-defined]
    else:
        assert named == socket.gethostname()
    if isinstance(kind.runtime, HeldRuntime):  # the node SLURM ran the job on
        assert named.split(".")[0] == kind.runtime.node
