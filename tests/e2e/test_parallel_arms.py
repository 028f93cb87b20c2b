"""study.parallel_arms on real Docker hosts: arms pinned to a core each (`--cpuset-cpus`) run at the same time,
the record and the report say where and when, the engine inside sees only its own core, and the reference engine
gives the same signatures pinned side by side as pinned one after another. Over two engines (the second one is
scripts/ci-hosts.sh's, reached over ssh), a 4-arm study spreads its arms over both."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import orchestrator
from tests.hosts import Hosts, hosts_fixture, nothing_left_remote_fixture  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.docker]
SMALL = ["protocol=probe", "protocol.phases.sequential.repeats=3"]
ONE_CORE = ["arms.baseline.cpus=1", "arms.wide_batch.cpus=1"]
FOUR_ARMS = ["+arm@arms.third=reference", "+arm@arms.fourth=reference", "+study.variables.third=[]",
             "+study.variables.fourth=[]", *ONE_CORE, "arms.third.cpus=1", "arms.fourth.cpus=1"]


def arms_of(run: Path) -> dict[str, dict]:
    return {a["arm"]: a for a in pq.read_table(run / "data" / "arms").to_pylist()}


def signatures(run: Path) -> dict[tuple[str, str, int], str]:
    rows = pq.read_table(run / "data" / "responses").to_pylist()
    return {(r["arm"], r["prompt_id"], r["repeat"]): r["sig_top_logprobs"] for r in rows if r["role"] == "measured"}


@pytest.mark.usefixtures("docker_client", "no_leftover_containers")
def test_two_pinned_arms_side_by_side_match_the_same_arms_one_after_another(tmp_path: Path) -> None:
    together, apart = tmp_path / "together", tmp_path / "apart"
    result = orchestrator("run", f"hydra.run.dir={together}", "study.parallel_arms=auto", *ONE_CORE, *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wave 1/1: baseline, wide_batch at the same time" in result.stderr
    arms = arms_of(together)
    assert {a["wave"] for a in arms.values()} == {1} and sorted(a["cpuset"] for a in arms.values()) == ["0", "1"]
    assert all("--cpuset-cpus" in a["docker_run"] for a in arms.values())
    for arm in arms.values():  # what the engine sees: one core (the guard compares it)
        assert json.loads(arm["fingerprint_json"])["probe"]["cpus_usable"] == 1
    ran = sorted((a["start_ns"], a["stop_ns"]) for a in arms.values())
    assert ran[1][0] < ran[0][1]  # the second started before the first stopped
    report = (together / "report.md").read_text()
    assert "Placement (study.parallel_arms" in report and "wave 1: baseline (local, cores" in report
    # the time line: the stages add up over both arms, so the wave's wall time is given against that sum
    assert "(an arm's stages summed over arms that ran at once); arms side by side in 1 wave" in result.stderr
    [wave] = json.loads((together / "report.json").read_text())["waves"]
    assert wave["arms"] == ["baseline", "wide_batch"] and wave["wall_s"] < wave["arm_s"]

    result = orchestrator("run", f"hydra.run.dir={apart}", *ONE_CORE, *SMALL)  # one at a time, on core 0 each
    assert result.returncode == 0, result.stderr[-3000:]
    assert {a["wave"] for a in arms_of(apart).values()} == {1, 2}
    assert signatures(together) == signatures(apart)  # the measurement docs/runtimes.md states


@pytest.mark.hosts
@pytest.mark.usefixtures("no_leftover_containers", "nothing_left_remote")
def test_four_arms_over_two_engines_one_core_each_at_once(hosts: Hosts, tmp_path: Path) -> None:
    result = orchestrator("run", f"hydra.run.dir={tmp_path}", "study.parallel_arms=auto",
                          f"runtime.hosts=[local,{hosts.ssh_url}]", *FOUR_ARMS, *SMALL, env=hosts.env())
    assert result.returncode == 0, result.stderr[-3000:]
    arms = arms_of(tmp_path)
    assert {a["status"] for a in arms.values()} == {"completed"}
    assert {a["wave"] for a in arms.values()} == {1}
    assert sorted(a["placed_host"] for a in arms.values()) == sorted(["local", "local", hosts.ssh_url, hosts.ssh_url])
    for arm in arms.values():
        fingerprint = json.loads(arm["fingerprint_json"])
        assert fingerprint["probe"]["cpus_usable"] == 1
        assert fingerprint["ran_on"]["docker_host"] == arm["placed_host"]
    assert len({a["image_id"] for a in arms.values()}) == 1  # shipped to the far Docker host, pinned by id
    report = (tmp_path / "report.md").read_text()
    assert hosts.ssh_url in report and "wave 1:" in report
