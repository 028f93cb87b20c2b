"""One contract, every engine profile: the same assertions for each (as test_runtime_contract.py runs over each
runtime). A profile's surface is checked against what its engine really does: completion bodies, /tokenize and
/version answers recorded from the real servers (tests/contract/responses/, recorded from the images the arm
templates name; `openai` is the tests' own server, tests/own_server.py), and the knob listings recorded from
them (tests/contract/listings/). And outside orchestrator/engines/, no module names an engine."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.engines import ENGINES, SETTINGS, EngineProfile
from orchestrator.run.send import protocol
from orchestrator.run.wire.client import CompletionClient
from tests import own_server

HERE = Path(__file__).parent
ORCHESTRATOR = HERE.parent.parent / "orchestrator"
PROFILES = [pytest.param(profile, id=name) for name, profile in ENGINES.items()]


def recorded(profile: EngineProfile, what: str) -> Any:
    """A body the profile's engine answered (`what`: completion, tokenize, version, digests); None: none recorded."""
    if profile.name == "openai" and what == "completion":  # the user's own server: its answer, made here
        return own_server.complete({"prompt": "Hello there", "max_tokens": 4, "logprobs": 2}, "m")
    path = HERE / "responses" / f"{profile.name}.{what}.json"
    return json.loads(path.read_text()) if path.exists() else None


def listing(profile: EngineProfile) -> set[str] | None:
    """The flags the engine's own listing printed; None: it ships none (nothing is assumed of it)."""
    path = HERE / "listings" / f"{profile.name}.json"
    return set(json.loads(path.read_text())["flags"]) if path.exists() else None


@pytest.mark.parametrize("profile", PROFILES)
def test_every_endpoint_is_a_path_or_absent(profile: EngineProfile) -> None:
    paths = vars(profile.endpoints)
    assert paths.keys() == {"health", "completions", "chat", "models", "tokenize", "version", "metrics", "digests",
                           "reset_prefix_cache"}
    assert all(path is None or (path.startswith("/") and " " not in path) for path in paths.values()), paths
    assert profile.endpoints.health and profile.endpoints.completions  # readiness, and the requests of a study


@pytest.mark.parametrize("profile", PROFILES)
def test_capabilities_agree_with_the_endpoints(profile: EngineProfile) -> None:
    can, paths = profile.capabilities, profile.endpoints
    assert can.tokenize == (paths.tokenize is not None)
    assert can.digests == (paths.digests is not None) == (recorded(profile, "digests") is not None)
    assert can.metrics == (paths.metrics is not None) == (profile.running_metric is not None)
    assert not (profile.max_logprobs_flag and not can.logprobs)  # a logprobs limit of an engine that returns none
    # the report's "not observable" lines say what the engine lacks, or that what it has gave nothing
    lacks = ["no running-requests count from its metrics" if can.metrics else "no /metrics",
             "no trace in its answers" if can.trace else "no trace"]
    assert profile.unobserved().split(", ") == lacks


@pytest.mark.parametrize("profile", PROFILES)
def test_the_dialect_reads_a_recorded_answer_of_its_engine(profile: EngineProfile) -> None:
    body = recorded(profile, "completion")
    assert body is not None, f"record one completion body of engine {profile.name} in {HERE / 'responses'}"
    parsed = profile.parse(json.dumps(body).encode())
    assert parsed.error is None and parsed.completion_text and parsed.finish_reason
    assert parsed.prompt_tokens and parsed.completion_tokens  # usage
    n = parsed.completion_tokens
    if profile.capabilities.logprobs:
        assert parsed.token_logprobs is not None and len(parsed.token_logprobs) == n
        assert parsed.top_logprobs is not None and all(len(top or []) >= 1 for top in parsed.top_logprobs)
    else:
        assert parsed.token_logprobs is None and parsed.top_logprobs is None
    if profile.capabilities.token_ids and profile.request_extra.get("return_token_ids"):
        assert parsed.token_ids is not None and len(parsed.token_ids) == n
    if not profile.capabilities.token_ids:
        assert parsed.token_ids is None
    assert (parsed.server_steps is not None) == profile.capabilities.trace


@pytest.mark.parametrize("profile", PROFILES)
def test_tokenize_and_version_answer_where_the_profile_says_they_do(profile: EngineProfile) -> None:
    for what, path in (("tokenize", profile.endpoints.tokenize), ("version", profile.endpoints.version)):
        assert (recorded(profile, what) is not None) == (path is not None), f"{profile.name}: {what}"
    tokenize = recorded(profile, "tokenize")
    if tokenize is None:
        return
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=tokenize) if request.url.path ==
                                    profile.endpoints.tokenize else httpx.Response(404))
    client = CompletionClient("http://engine", 5.0, transport=transport)
    ids = asyncio.run(protocol.token_ids(client, "m", {"p": "Hello there"}, profile))
    assert ids["p"] and all(isinstance(i, int) for i in ids["p"])


@pytest.mark.parametrize("profile", PROFILES)
def test_neutral_settings_the_port_and_host_flags_and_the_defaults_are_flags_the_engines_listing_knows(
        profile: EngineProfile) -> None:
    assert set(profile.settings) <= set(SETTINGS)
    assert all(set(moved) <= set(SETTINGS) and len(moved) > 1 for moved in profile.coupled.values())
    flags = listing(profile)
    named = [*(flag.partition(".")[0] for flag in profile.settings.values()), *profile.coupled,  # FLAG.KEY: FLAG
             profile.port_flag, profile.host_flag, profile.max_logprobs_flag]
    if flags is None:  # nothing assumed of its flags
        assert not profile.settings and not profile.coupled and profile.port_flag is None and profile.host_flag is None
        return
    unknown = [flag for flag in [*named, *profile.defaults] if flag is not None and f"--{flag}" not in flags]
    assert not unknown, f"{profile.name}: {unknown} are not in its listing"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_request_names_the_model_only_where_the_engine_takes_one(profile: EngineProfile) -> None:
    assert profile.model_field("m") == ("m" if profile.names_model else None)
    assert profile.model_field(None) is None


# Outside engines/ (and probes/, the listings shipped into an engine), no module names an engine: every string
# constant that is not a docstring, and every identifier. Allowed, each an example for people or a name that
# is not an engine's: (module, the word) -> why.
ALLOWED = {
    ("config/catalog.py", "vllm"): "the kinds of shared cache, listed for people",
    ("config/schema.py", "reference"): "the served model name of the stock arms, not an engine",
    ("config/validate.py", "refengine"): "an example command in a fix hint",
    ("config/validate.py", "vllm"): "an example env name in a fix hint",
    ("report/onset.py", "reference"): "the onset outcome `reference` (each request against the arm's own answer)",
    ("sweep/onset.py", "reference"): "the onset outcome `reference` (each request against the arm's own answer)",
    ("sweep/onset_config.py", "reference"): "the onset outcome `reference` (each request against the arm's own answer)",
    ("guard/caches.py", "transformers"): "Hugging Face's TRANSFORMERS_CACHE, the library's cache env",
    ("runtime/host.py", "refengine"): "an example source folder in a fix hint",
    ("runtime/process.py", "refengine"): "an example command in a fix hint",
    ("config/security.py", "vllm"): "an example engine flag and its env var in a fix hint",
    ("imports/openai_json.py", "openai"): "the default arm of imported OpenAI-style answers (the API, not an engine)",
    ("imports/parity.py", "vllm"): "the name of the tool whose files it reads (ZC502's vllm-position-parity)",
}


def engine_words() -> tuple[re.Pattern[str], set[str]]:
    """The words that name an engine inside a string or an identifier (its distributions, modules and programs,
    case-insensitive), and the profile names, which name one only as a whole string."""
    words = {w for p in ENGINES.values() for w in (*p.packages, *p.modules, *p.programs)}
    return re.compile("|".join(sorted(words)), re.IGNORECASE), set(ENGINES)


def named_engines(path: Path) -> set[str]:
    pattern, names = engine_words()
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found |= {node.value} & names
            found |= {m.lower() for m in pattern.findall(node.value)}
        text = {ast.Name: "id", ast.Attribute: "attr", ast.FunctionDef: "name", ast.AsyncFunctionDef: "name",
                ast.ClassDef: "name", ast.alias: "name", ast.arg: "arg"}.get(type(node))
        if text is not None:
            found |= {m.lower() for m in pattern.findall(getattr(node, text))}
    return found


def test_no_module_outside_engines_names_an_engine() -> None:
    found = {(str(path.relative_to(ORCHESTRATOR)), word) for path in ORCHESTRATOR.rglob("*.py")
             if path.relative_to(ORCHESTRATOR).parts[0] not in ("engines", "probes") for word in named_engines(path)}
    assert not found - ALLOWED.keys(), (f"{sorted(found - ALLOWED.keys())} name an engine: ask its profile "
                                        "(orchestrator/engines/) instead")
    assert not ALLOWED.keys() - found, f"{sorted(ALLOWED.keys() - found)} no longer needed: remove from ALLOWED"


def test_the_name_check_sees_an_engine_named_in_code(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""vllm in a docstring is documentation."""\n'
                      'def serve(vllm_args):\n    return ENGINE == "reference" or "python -m refengine"\n')
    assert named_engines(module) == {"vllm", "reference", "refengine"}
    module.write_text('"""Nothing here."""\nENGINE = "a reference run"  # vllm in a comment\n')
    assert named_engines(module) == set()


@pytest.mark.parametrize("profile", PROFILES)
def test_a_recorded_stream_parses_as_the_same_request_unstreamed(profile: EngineProfile) -> None:
    """Streams recorded from the real servers (`"stream": true`, stream_options.include_usage; vLLM and
    transformers serve on both endpoints), beside the same greedy request unstreamed (`*-unstreamed.json`; the
    reference engine's is its recorded completion): they parse alike, but for the server's arrival time."""
    if profile.name == "openai":  # the user's own server: the OpenAI layout, tests/unit/test_stream.py
        return
    responses = HERE / "responses"
    kinds = [kind for kind in ("stream", "chat-stream") if (responses / f"{profile.name}.{kind}.sse").exists()]
    assert bool(kinds) == profile.capabilities.streaming, f"{profile.name}: record its stream in {responses}"
    for kind in kinds:
        plain_path = responses / f"{profile.name}.{kind}-unstreamed.json"
        plain = plain_path.read_bytes() if plain_path.exists() else json.dumps(recorded(profile, "completion")).encode()
        streamed = dataclasses.asdict(profile.parse((responses / f"{profile.name}.{kind}.sse").read_bytes()))
        unstreamed = dataclasses.asdict(profile.parse(plain))
        assert not streamed["problems"] and streamed["completion_text"] and streamed["finish_reason"]
        assert streamed.pop("server_arrival_ns") == unstreamed.pop("server_arrival_ns") or profile.capabilities.trace
        assert streamed == unstreamed, kind


@pytest.mark.parametrize("profile", PROFILES)
def test_every_determinism_switch_is_a_flag_the_engine_lists_or_an_env_var_of_its_own(profile: EngineProfile) -> None:
    """`triage` sets a switch to its repeatable value in an A/B (engines/switches.py): a flag the engine does not
    know would fail the arm, an env var outside its prefixes would do nothing."""
    flags = listing(profile)
    for switch in profile.switches:
        section, _, name = switch.key.partition(".")
        assert section in ("engine_args", "env"), switch.key
        if section == "env":
            assert name.startswith(profile.env_prefixes), switch.key
        elif flags is not None:
            assert f"--{name}" in flags, switch.key
            if isinstance(switch.repeatable, bool) and switch.repeatable is False:
                assert f"--{profile.negated_prefix}{name}" in flags, switch.key  # how false is passed
