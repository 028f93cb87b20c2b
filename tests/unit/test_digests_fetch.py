"""Digests (run/send/digests.py): which requests are flagged, the fetch from the engine (httpx.MockTransport, and a
whole study on the fake runtime), the rows of the `digests` table made from a body the hooked engine really answered
(tests/contract/responses/transformers_hooked.digests.json), and a fetch that fails: a note, never a failed arm."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import config
from orchestrator.config.background import Background
from orchestrator.config.schema import (
    LoadConfig,
    LoadWarmupConfig,
    PhaseConfig,
    PhaseKind,
    ProtocolConfig,
    RequestConfig,
)
from orchestrator.engines import ENGINES, profile_for
from orchestrator.record.paths import RunPaths
from orchestrator.record.recorded import read
from orchestrator.record.schemas import DIGESTS
from orchestrator.record.tables import TableWriter, read_table
from orchestrator.run.send import digests, protocol
from orchestrator.run.send.sender import RunContext
from orchestrator.run.study import StudyRunner
from orchestrator.run.wire.client import CompletionClient
from orchestrator.runtime.fake import FakeRuntime, FakeServer
from orchestrator.runtime.spec import ContainerSpec
from tests import fake_engine

HOOKED = ENGINES["transformers_hooked"]
RECORDED = json.loads((Path(__file__).parent.parent / "contract" / "responses" /
                       "transformers_hooked.digests.json").read_text())
CTX = RunContext("s", "r1", "a", 12)


def _row(request_id: str, body: dict[str, Any], answer: bytes, status: int = 200) -> dict[str, Any]:
    """A `responses` row as far as the fetch reads it."""
    return {"request_id": request_id, "attempt": 0, "phase": request_id.split("/")[2], "http_status": status,
            "request_json": json.dumps(body, ensure_ascii=False, sort_keys=True), "response_body": answer}


def test_the_recorded_answer_becomes_one_row_per_call_with_its_step_s_batch() -> None:
    base = {"study": "s", "run_id": "r1", "arm": "a", "request_id": "a/p/sequential/0/0", "attempt": 0,
            "engine_request_id": RECORDED["request_id"]}
    rows = list(digests.digest_rows(RECORDED, base))
    assert len(rows) == len(RECORDED["calls"]) and set(rows[0]) == set(DIGESTS.names)
    first = rows[0]
    assert (first["step"], first["call"], first["module"], first["module_type"]) == (0, 0, "model.embed_tokens",
                                                                                     "Embedding")
    assert first["batch_size"] == 1 and first["batch_request_ids"] == [RECORDED["request_id"]]
    assert first["context_tokens"] == RECORDED["steps"][0]["context_tokens"]
    assert len(first["out_head"]) == RECORDED["head_values"] and isinstance(first["out_sum"], float)
    assert {r["step"] for r in rows} == {s["step"] for s in RECORDED["steps"]}
    calls = [r["call"] for r in rows if r["step"] == 0]
    assert calls == sorted(set(calls)) and calls[0] == 0  # in forward order (a call without a tensor output: none)


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("calls"),
    lambda d: d["calls"][3].pop(),  # a call of 16 fields
    lambda d: d["calls"][3].__setitem__(4, "zero"),  # rows_start not an integer
    lambda d: d["calls"][3].__setitem__(13, [1.0]),  # out_sum not a number
    lambda d: d["steps"][0].pop("step"),
])
def test_a_malformed_answer_is_refused_whole(damage: Any) -> None:
    doc = copy.deepcopy(RECORDED)
    damage(doc)
    with pytest.raises((ValueError, TypeError, KeyError)):
        list(digests.digest_rows(doc, {}))


def test_a_request_is_flagged_by_its_body_and_named_by_its_answer_streamed_or_not() -> None:
    assert digests.flagged(json.dumps({"digest": True, "prompt": "x"}, sort_keys=True))
    assert not digests.flagged(json.dumps({"prompt": '"digest": true'}, sort_keys=True))  # in the text, not a flag
    assert not digests.flagged(json.dumps({"digest": False}, sort_keys=True)) and not digests.flagged(None)
    assert digests.engine_request_id(b'{"id": "cmpl-1", "choices": []}') == "cmpl-1"
    stream = (Path(__file__).parent.parent / "contract" / "responses" / "transformers_hooked.stream.sse").read_bytes()
    assert (digests.engine_request_id(stream) or "").startswith("cmpl-")
    assert digests.engine_request_id(b"garbage") is None and digests.engine_request_id(b'{"id": 3}') is None


def test_the_cells_requests_carry_the_flag_and_nothing_else_does() -> None:
    proto = ProtocolConfig(name="p", request=RequestConfig(digests=True), warmup_requests=1, phases={
        "sequential": PhaseConfig(PhaseKind.sequential, 2), "concurrent": PhaseConfig(PhaseKind.concurrent, 3, 1),
        "load": PhaseConfig(PhaseKind.load, load=LoadConfig(concurrency=2, requests=8, windows=1, probe_every=4,
                                                            warmup=LoadWarmupConfig(requests=2, extend_windows=0)))})
    requests = [r for group in protocol.plan(proto, "m", {"p": "hello"}, engine=HOOKED,
                                             background={"load": Background({"b": "other"})}) for r in group]
    by_role = {role: [r.body.get("digest") for r in requests if r.role == role]
               for role in (protocol.COLD, protocol.WARMUP, protocol.MEASURED, protocol.BACKGROUND)}
    assert by_role[protocol.MEASURED] and set(by_role[protocol.MEASURED]) == {True}
    assert len(by_role[protocol.MEASURED]) == 2 + 3 + 2  # 2 probes of 8 load requests, 1 in 4
    assert by_role[protocol.BACKGROUND] and set(by_role[protocol.COLD] + by_role[protocol.WARMUP]
                                                + by_role[protocol.BACKGROUND]) == {None}
    off = dataclasses.replace(proto, request=RequestConfig(digests=False))
    assert not any("digest" in r.body for group in protocol.plan(off, "m", {"p": "hello"}, engine=HOOKED)
                   for r in group)


def _engine(asked: list[str]) -> httpx.MockTransport:
    """Digests for cmpl-1 and cmpl-2; cmpl-3 is unknown (the engine's 404), cmpl-4's are malformed."""
    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        rid = request.url.path.rsplit("/", 1)[1]
        if rid in ("cmpl-1", "cmpl-2"):
            return httpx.Response(200, json={**RECORDED, "request_id": rid})
        if rid == "cmpl-4":
            return httpx.Response(200, json={"calls": [[0, 0]]})
        return httpx.Response(404, json={"error": {"message": f"No digests for request '{rid}'", "code": 404}})
    return httpx.MockTransport(answer)


def test_the_fetch_writes_each_flagged_answered_request_and_notes_the_rest(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run").make()
    fetch = digests.DigestFetch(CTX, HOOKED, paths)
    told: list[str] = []
    on_row = fetch.noting(lambda row: told.append(row["request_id"]))
    flag = {"digest": True, "prompt": "x"}
    on_row(_row("a/p/s/0/0", flag, b'{"id": "cmpl-1"}'))
    on_row(_row("a/p/s/0/1", flag, b'data: {"id": "cmpl-2", "choices": []}\n\ndata: [DONE]\n\n'))  # streamed
    on_row(_row("a/p/s/0/2", {"prompt": "x"}, b'{"id": "cmpl-9"}'))  # not flagged: not fetched
    on_row(_row("a/p/s/0/3", flag, b'{"error": "x"}', status=500))  # no answer: nothing to fetch
    on_row(_row("a/p/s/0/4", flag, b'{"id": "cmpl-3"}'))
    on_row(_row("a/p/s/0/5", flag, b'{"id": "cmpl-4"}'))
    assert len(told) == 6  # progress still told of every row
    asked: list[str] = []
    said: list[str] = []
    client = CompletionClient("http://engine", 5.0, transport=_engine(asked))
    note = asyncio.run(fetch.fetch(client, said.append))
    assert asked == ["/v1/digests/cmpl-1", "/v1/digests/cmpl-2", "/v1/digests/cmpl-3", "/v1/digests/cmpl-4"]
    assert note is not None and note.startswith("digests of 2 of 4 flagged requests not recorded (first: a/p/s/0/4:")
    assert "HTTP 404: No digests for request 'cmpl-3'" in note and "b'" not in note  # the engine's words
    assert said == [f"warning: {note.replace('requests not', 'requests of phase s not')}"]
    table = read_table(paths, "digests")
    assert table.num_rows == 2 * len(RECORDED["calls"])  # cmpl-4's malformed answer left no partial rows
    assert set(table.column("request_id").to_pylist()) == {"a/p/s/0/0", "a/p/s/0/1"}
    assert set(table.column("engine_request_id").to_pylist()) == {"cmpl-1", "cmpl-2"}


def test_an_arm_with_nothing_flagged_asks_nothing(tmp_path: Path) -> None:
    fetch = digests.DigestFetch(CTX, HOOKED, RunPaths(tmp_path).make())
    fetch.note(_row("a/p/s/0/0", {"prompt": "x"}, b'{"id": "cmpl-1"}'))
    asked: list[str] = []
    assert asyncio.run(fetch.fetch(CompletionClient("http://e", 5.0, transport=_engine(asked)), print)) is None
    assert asked == [] and read_table(RunPaths(tmp_path), "digests").num_rows == 0


def test_a_run_from_before_digests_reads_an_empty_table(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "old")
    with TableWriter(paths, "arms", "a") as arms:
        arms.append({"arm": "a"})
    assert not paths.table("digests").exists()
    empty = read_table(paths, "digests")
    assert empty.num_rows == 0 and empty.schema.names == DIGESTS.names


def _hooked(keeps: int = 512, failing: int | None = 2, seen: list[str] | None = None
            ) -> Callable[[ContainerSpec], FakeServer]:
    """The fake engine with the hooked engine's surface: an id in every answer, the digests of flagged requests
    (the recorded body), of the last `keeps` only (the oldest go first, as the engine's store), and a 500 for
    the `failing`-th flagged request's digests (counted from 0). `seen`: "digests" or "completion" per request."""
    def server(spec: ContainerSpec) -> FakeServer:
        ids = itertools.count(1)
        flagged: list[str] = []

        def handler(request: httpx.Request) -> httpx.Response:
            path = request.url.path
            if path.startswith("/v1/digests/"):
                (seen if seen is not None else []).append("digests")
                rid = path.rsplit("/", 1)[1]
                if rid not in flagged[-keeps:]:
                    return httpx.Response(404, json={"error": {"message": f"No digests for request '{rid}'"}})
                return httpx.Response(500) if flagged.index(rid) == failing else httpx.Response(200, json={
                    **RECORDED, "request_id": rid})
            answer = fake_engine._answer(request, False, 0)
            if path != "/v1/completions":
                return answer
            (seen if seen is not None else []).append("completion")
            rid = f"cmpl-{next(ids)}"
            if json.loads(request.content).get("digest") is True:
                flagged.append(rid)
            return httpx.Response(200, json={**json.loads(answer.content), "id": rid})

        return FakeServer(handler=handler, commands=fake_engine._commands, log=[
            "INFO hookedengine version 0.0.fake, torch 2, transformers 5, device cpu, dtype float32",
            "INFO Starting server"])
    return server


def _study(tmp_path: Path, server: Callable[[ContainerSpec], FakeServer], *overrides: str,
           phases: dict[str, PhaseConfig] | None = None) -> tuple[RunPaths, StudyRunner, list[str]]:
    """The smoke protocol with digests (or these `phases`), one arm of the hooked engine (a fake), run on the
    fake runtime."""
    typed = config.to_typed(config.compose([
        "protocol=smoke", "~arms.wide_batch", "~study.variables.wide_batch", "protocol.request.digests=true",
        "protocol.phases.sequential.repeats=2", "protocol.phases.concurrent.batches=1", *overrides]))
    typed.protocol.phases = phases or typed.protocol.phases
    for arm in typed.arms.values():
        arm.engine, arm.image, arm.build.context = "transformers_hooked", "fake-hooked", None
    assert profile_for(typed.arms["baseline"].engine).capabilities.digests
    paths = RunPaths(tmp_path / "run")
    said: list[str] = []
    runner = StudyRunner(typed, paths, "run-digests", FakeRuntime({"fake-hooked": server},
                                                                  commands=fake_engine._commands), say=said.append)
    runner.run()
    runner.cleanup()
    return paths, runner, said


def test_a_study_with_digests_records_them_before_the_arm_stops(tmp_path: Path) -> None:
    paths, runner, said = _study(tmp_path, _hooked())
    assert runner.failed == []
    responses = read_table(paths, "responses").to_pylist()
    measured = {r["request_id"] for r in responses if r["role"] == "measured"}
    assert len(measured) == 2 * (2 + 4)  # 2 prompts x (2 sequential + a batch of 4)
    table = read_table(paths, "digests")
    fetched = set(table.column("request_id").to_pylist())
    assert len(fetched) == len(measured) - 1 and fetched < measured  # the cold one was not flagged; one failed
    assert table.num_rows == len(fetched) * len(RECORDED["calls"])
    [arm] = read_table(paths, "arms").to_pylist()
    assert arm["status"] == "completed" and arm["digests_note"].startswith("digests of 1 of 12 flagged requests")
    assert digests.missing_note(paths, "baseline") == arm["digests_note"]
    # said once, where it happened: the third flagged request is the sequential phase's
    assert [line for line in said if "warning" in line] == [
        "[baseline] warning: digests of 1 of 4 flagged requests of phase sequential not recorded (first: "
        "baseline/count/sequential/0/0: HTTP 500: an empty answer); locate has none for them"]


def test_each_phase_s_digests_are_fetched_before_the_next_phase_starts(tmp_path: Path) -> None:
    """An engine that keeps 4 requests' digests, a protocol of 2 phases of 4 flagged requests each: fetched
    only at the arm's end, the first phase's would be gone."""
    seen: list[str] = []
    paths, runner, said = _study(tmp_path, _hooked(keeps=4, failing=None, seen=seen),
                                 "protocol.phases.concurrent.repeats=2")
    assert runner.failed == [] and not [line for line in said if "warning" in line]
    assert seen == ["completion"] * 5 + ["digests"] * 4 + ["completion"] * 4 + ["digests"] * 4  # cold, then 2 x 2
    assert len(set(read_table(paths, "digests").column("request_id").to_pylist())) == 8
    [arm] = read_table(paths, "arms").to_pylist()
    assert arm["digests_note"] is None and digests.missing_note(paths, "baseline") is None


def test_a_load_phase_s_probes_are_fetched_once_its_windows_are_over(tmp_path: Path) -> None:
    """A load phase's probes are fetched once its windows are over (each window's rows written as it ends),
    before the next phase starts."""
    seen: list[str] = []
    load = LoadConfig(concurrency=2, requests=8, windows=1, probe_every=4, stream=False)
    paths, runner, said = _study(tmp_path, _hooked(keeps=4, failing=None, seen=seen), phases={
        "sequential": PhaseConfig(PhaseKind.sequential, 2), "load": PhaseConfig(PhaseKind.load, load=load),
        "concurrent": PhaseConfig(PhaseKind.concurrent, 2, 1)})
    assert runner.failed == [], said
    probes = [r for r in read_table(paths, "responses").to_pylist() if r["phase"] == "load" and r["role"] == "measured"]
    assert len(probes) == 2
    assert seen == ["completion"] * 5 + ["digests"] * 4 + ["completion"] * 8 + ["digests"] * 2 \
        + ["completion"] * 4 + ["digests"] * 4
    assert len(set(read_table(paths, "digests").column("request_id").to_pylist())) == 4 + 2 + 4


def test_the_arm_s_note_is_a_line_of_the_report_and_of_show(tmp_path: Path) -> None:
    from orchestrator.report import environment, listing

    paths, _, _ = _study(tmp_path, _hooked())
    env = environment.environment(read(paths))
    [line] = [text for text in environment.markdown_section(env) if text.startswith("Digests not recorded")]
    assert line.startswith("Digests not recorded (protocol.request.digests; run/send/digests.py): baseline: digests of "
                           "1 of 12 flagged requests not recorded (first: baseline/count/sequential/0/0: HTTP 500")
    paths.report_json.write_text(json.dumps({"study": "s", "run_id": "r", "environment": dataclasses.asdict(env)}))
    assert "    digests not recorded: digests of 1 of 12 flagged requests" in listing.show(paths.root)
