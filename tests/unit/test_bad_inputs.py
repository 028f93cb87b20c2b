"""A corpus of bad inputs (command lines, config files, prompt files, run dirs), each with the exit status and
the one line it must get: no traceback, nothing started (docs/conventions.md, docs/errors.md).

`{cfg}` is a user config dir made for the case, `{run}` a recorded run dir (fake runtime), `{tmp}` a tmp dir."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator import cli, config
from orchestrator.record.paths import RunPaths, atomic_write_text
from orchestrator.run.execute import write_prompts
from orchestrator.run.study import StudyRunner
from tests.fake_engine import fake_runtime

ARM = "defaults:\n  - reference\n  - _self_\nengine_args:\n  max-num-seqs: 8\n"
STUDY = ("# @package _global_\ndefaults:\n  - /arm@arms.a: mine\n  - /arm@arms.b: mine\n  - _self_\n"
         "study:\n  name: mine\n  variables:\n    b: [engine_args.max-num-seqs]\narms:\n  b:\n    engine_args:\n"
         "      max-num-seqs: 4\n")
GOOD = {"arm/mine.yaml": ARM, "study/mine.yaml": STUDY}

# (id, files of the user config dir, argv, status, a fragment of the one line)
CASES: list[tuple[str, dict[str, str | bytes], list[str], int, str]] = [
    # the command line
    ("unknown verb", {}, ["rnu"], 2, "unknown command 'rnu'. Did you mean 'run'?"),
    ("unknown compare flag", {}, ["compare", "{run}", "--baselin", "a"], 2, "unrecognized arguments"),
    ("compare without a run dir", {}, ["compare"], 2, "the following arguments are required"),
    ("bad rate type", {}, ["compare", "{run}", "--max-divergence-rate", "x"], 2, "invalid float value"),
    ("rate above 1", {}, ["compare", "{run}", "--max-divergence-rate", "2"], 2, "--max-divergence-rate=2.0: must be"),
    ("rate below 0", {}, ["compare", "{run}", "--max-divergence-rate", "-1"], 2, "in [0, 1]"),
    ("baseline naming no arm", {}, ["compare", "{run}", "--baseline", "nope"], 2,
     "--baseline='nope' names nothing that exists. Available: baseline, wide_batch"),
    ("bad pair verdict", {}, ["compare", "{run}", "--expect-pair", "wide_batch=same"], 2, "ARM=identical"),
    ("unknown allow kind", {}, ["reproduce", "{run}", "--allow", "root"], 2, "invalid choice: 'root'"),
    ("clean with a bad runtime", {}, ["clean", "--runtime", "podman"], 2, "invalid choice: 'podman'"),
    ("hydra grammar", {}, ["plan", "study=default)"], 2, "extraneous input ')'"),
    ("override without value", {}, ["plan", "protocol"], 2, "protocol"),
    # overrides of the project's config
    ("unknown key", {}, ["plan", "arms.baseline.imgae=x"], 2, "unknown key 'imgae' in arms.baseline"),
    ("new key without +", {}, ["plan", "study.variables.nope=[image]"], 2, "'+study.variables.nope=VALUE'"),
    ("unknown study", {}, ["plan", "study=defualt"], 2, "unknown study 'defualt'"),
    ("unknown arm template", {}, ["plan", "arm@arms.baseline=refrence"], 2, "unknown arm 'refrence'"),
    ("unknown protocol", {}, ["plan", "protocol=smok"], 2, "Did you mean 'smoke'?"),
    ("wrong type", {}, ["plan", "protocol.phases.sequential.repeats=abc"], 2, "repeats: Value 'abc'"),
    ("bad enum", {}, ["plan", "protocol.phases.sequential.kind=paralel"], 2, "sequential, concurrent"),
    ("max_tokens 0 without echo", {}, ["plan", "protocol.request.max_tokens=0"], 2, "at least 1 without echo"),
    ("max_tokens negative", {}, ["plan", "protocol.request.max_tokens=-5"], 2, "max_tokens=-5: must be >= 0"),
    ("logprobs -1 not allowed", {}, ["plan", "protocol.request.logprobs=-1"], 2, "engine_args.max-logprobs: -1"),
    ("logprobs below -1", {}, ["plan", "protocol.request.logprobs=-2"], 2, "logprobs=-2: must be null, -1"),
    ("logprobs above the engine's", {}, ["plan", "protocol.request.logprobs=21"], 2, "above its --max-logprobs 20"),
    ("prompt_logprobs -1", {}, ["plan", "protocol.request.prompt_logprobs=-1"], 2, "prompt_logprobs=-1 asks"),
    ("digests of an engine without them", {}, ["plan", "protocol.request.digests=true"], 2,
     "arm 'baseline' runs engine reference, which records no activation digests: make it an arm of "
     "`engine: transformers_hooked`"),
    ("temperature", {}, ["plan", "protocol.request.temperature=3"], 2, "temperature=3.0: must be in [0, 2]"),
    ("negative start timeout", {}, ["plan", "arms.baseline.startup_timeout_s=-1"], 2, "startup_timeout_s=-1.0"),
    ("zero request timeout", {}, ["plan", "protocol.request_timeout_s=0"], 2, "request_timeout_s=0.0: must be > 0"),
    ("port out of range", {}, ["plan", "arms.baseline.port=70000"], 2, "port=70000: must be in 1..65535"),
    ("zero repeats", {}, ["plan", "protocol.phases.sequential.repeats=0"], 2, "repeats=0: must be >= 1"),
    ("unknown held fact", {}, ["plan", "study=vllm_fused_finalize", "study.held_facts=[moe_backnd]"], 2,
     "study.held_facts='moe_backnd' names nothing that exists. Did you mean 'moe_backend'? Available: "),
    ("zero batches", {}, ["plan", "protocol.phases.concurrent.batches=0"], 2, "batches=0: must be >= 1"),
    ("target_bound 0", {}, ["plan", "protocol.target_bound=0"], 2, "target_bound=0.0: must be in (0, 1)"),
    ("target_bound 1", {}, ["plan", "protocol.target_bound=1"], 2, "target_bound=1.0: must be in (0, 1)"),
    ("stop after 0 divergences", {}, ["plan", "protocol.stop_after_divergences=0"], 2,
     "stop_after_divergences=0: must be >= 1"),
    ("plan --like without a dir", {}, ["plan", "--like"], 2, "--like needs a run dir"),
    ("plan --like not a run dir", {}, ["plan", "--like", "{tmp}"], 2, "not a run directory (no run.json)"),
    ("plan --like another study's run", {}, ["plan", "study=fused_finalize", "--like", "{run}"], 2,
     "not 'fused_finalize'; name an earlier run of this study"),
    ("batches on a sequential phase", {}, ["plan", "protocol.phases.sequential.batches=3"], 2,
     "1 for a sequential phase"),
    ("gate rate -1", {}, ["plan", "gate.max_divergence_rate=-1"], 2, "max_divergence_rate=-1.0: must be in [0, 1]"),
    ("gate names no arm", {}, ["plan", "+gate.expect_pairs.nope=identical"], 2, "gate.expect_pairs.nope='nope'"),
    ("gate verdict", {}, ["plan", "+gate.expect_pairs.wide_batch=same"], 2, "Available: agree, differ, identical"),
    ("significant digits", {}, ["plan", "protocol.significant_digits=0"], 2, "significant_digits=0: must be"),
    ("min_share", {}, ["plan", "prompts.prompts.capital.expect.min_share=2"], 2, "min_share=2.0"),
    ("baseline naming no arm", {}, ["plan", "study.baseline=nope"], 2, "study.baseline='nope' names nothing"),
    ("variables naming no arm", {}, ["plan", "+study.variables.nope=[image]"], 2, "study.variables.nope='nope'"),
    ("declared but not different", {}, ["plan", "study.variables.wide_batch=[engine_args.max-num-seqs,image]"],
     2, "declared but not different"),
    ("undeclared second variable", {}, ["plan", "arms.wide_batch.engine_args.seed=1"], 2,
     "1 beyond its declared variable"),
    ("a leaf that does not exist", {}, ["plan", "study.variables.wide_batch=[engine_args.max-num-sqs]"], 2,
     "is not a leaf of arm 'wide_batch'"),
    ("gpus", {}, ["plan", "arms.baseline.gpus=al"], 2, "gpus='al': must be null, 'all'"),
    ("autotune dir shared through env and a mount", {}, [
        "plan", "+arms.baseline.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR=/c",
        "+arms.wide_batch.env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR=/c",
        "arms.baseline.volumes=[{host: /tmp/c, container: /c, read_only: false}]",
        "arms.wide_batch.volumes=[{host: /tmp/c, container: /c, read_only: false}]"], 2,
     "share a cache (autotune, mount) at /tmp/c"),
    ("triton cache of two process arms", {}, [
        "plan", "runtime=process", "arm@arms.baseline=reference_process", "arm@arms.wide_batch=reference_process",
        "+arms.baseline.env.TRITON_CACHE_DIR=/tmp/t", "+arms.wide_batch.env.TRITON_CACHE_DIR=/tmp/t/x"], 2,
     "share a cache (triton) at /tmp/t"),
    ("dangerous option", {}, ["plan", "arms.baseline.privileged=true"], 2, "dangerous container option"),
    ("a credential typed into an arm's env", {}, ["plan", "+arms.baseline.env.HF_TOKEN=hf_abc123"], 2,
     "arms.baseline.env.HF_TOKEN looks like a credential"),
    ("a credential in engine args", {}, ["plan", "+arms.baseline.engine_args.api-key=sk-1"], 2,
     "through an env var it reads instead, e.g. vLLM's --api-key through VLLM_API_KEY"),
    ("docker socket", {}, ["plan", "arms.baseline.volumes=[{host: /var/run/docker.sock, container: /s}]"], 2,
     "docker_socket_mount"),
    ("prompt file missing", {}, ["plan", "prompts.prompts.capital.text=null", "+prompts.prompts.capital.file=no.txt"],
     2, "file no.txt not found"),
    ("prompt with text and file", {"prompts/p.txt": "x"},
     ["plan", "--config-dir", "{cfg}", "+prompts.prompts.capital.file=p.txt"], 2, "exactly one of text or file"),
    ("unwritable run dir", {}, ["check", "hydra.run.dir=/proc/nope/run"], 2, "hydra.run.dir='/proc/nope/run'"),
    # a user's config dir
    ("yaml syntax error", {"study/mine.yaml": "study: [unclosed\n"}, ["plan", "--config-dir", "{cfg}", "study=mine"],
     2, "mine"),
    ("unknown key in a user file", {**GOOD, "arm/mine.yaml": ARM + "imgae: x\n"},
     ["plan", "--config-dir", "{cfg}", "study=mine"], 2, "unknown key 'imgae'"),
    ("wrong type in a user file", {**GOOD, "arm/mine.yaml": ARM + "port: eighty\n"},
     ["plan", "--config-dir", "{cfg}", "study=mine"], 2, "port"),
    ("prompt file not UTF-8", {**GOOD, "prompts/bad.txt": b"caf\xe9\n"},
     ["plan", "--config-dir", "{cfg}", "study=mine", "prompts.prompts.capital.text=null",
      "+prompts.prompts.capital.file=bad.txt"], 2, "is not utf-8 text"),
    ("unknown encoding", {**GOOD, "prompts/p.txt": "x"},
     ["plan", "--config-dir", "{cfg}", "study=mine", "prompts.prompts.capital.text=null",
      "+prompts.prompts.capital.file=p.txt", "prompts.prompts.capital.encoding=klingon"], 2, "an encoding Python"),
    ("config dir missing", {}, ["plan", "--config-dir", "{tmp}/nowhere", "study=mine"], 2, "nowhere"),
    ("user study unknown", GOOD, ["plan", "--config-dir", "{cfg}", "study=mien"], 2, "Did you mean 'mine'?"),
    ("user arm built on a misspelt template", {**GOOD, "arm/mine.yaml": ARM.replace("reference", "referenc")},
     ["plan", "--config-dir", "{cfg}", "study=mine"], 2,
     "unknown arm 'referenc' (in {cfg}/arm/mine.yaml). Did you mean 'reference'?"),
    ("user study overriding a misspelt group option",
     {**GOOD, "study/mine.yaml": STUDY.replace("  - _self_\n", "  - override /protocol: smok\n  - _self_\n", 1)},
     ["plan", "--config-dir", "{cfg}", "study=mine"], 2,
     "unknown protocol 'smok' (in {cfg}/study/mine.yaml). Did you mean 'smoke'?"),
    ("user file shadowing a project file", {"study/default.yaml": STUDY},
     ["plan", "--config-dir", "{cfg}"], 2, "default"),
    ("run: the same checks", {}, ["run", "protocol.request.max_tokens=-5"], 2, "must be >= 0"),
    ("sweep: every job checked", {}, ["run", "-m", "protocol.request.max_tokens=4,-5"], 2, "must be >= 0"),
    # run dirs
    ("not a run dir", {}, ["compare", "{tmp}"], 2, "is not a run directory (no run.json)"),
    ("damaged run.json", {}, ["compare", "{run}", "+damage=run.json"], 2, "run.json cannot be read"),
    ("damaged parquet", {}, ["compare", "{run}", "+damage=parquet"], 2, "the run dir is damaged"),
    ("run dir from a newer orchestrator", {}, ["compare", "{run}", "+damage=newer"], 2,
     "was written with record schema 99, this orchestrator reads schemas 1 to"),
    ("reproduce without .hydra", {}, ["reproduce", "{tmp}"], 2, "has no .hydra/config.yaml"),
    ("reproduce with damaged config", {}, ["reproduce", "{run}", "+damage=config"], 2, "config.yaml cannot be read"),
    ("run --from nowhere", {}, ["run", "--from", "{tmp}/none"], 2,
     "none does not exist: pass a run dir that `orchestrator run` wrote"),
    ("recorded run with overrides", {}, ["run", "--config-dir", "{run}/.hydra", "--config-name", "config",
                                        "protocol=smoke", "hydra.run.dir={tmp}/new"], 2, "is a recorded run"),
    ("run --from with an override", {}, ["run", "--from", "{run}", "protocol=smoke"], 2, "is a recorded run"),
    ("run --from into two dirs", {}, ["run", "--from", "{run}", "hydra.run.dir={tmp}/a", "--out", "{tmp}/b"], 2,
     "both name the new run dir"),
    ("run --from into a swept dir", {}, ["run", "--from", "{run}", "hydra.run.dir=a,b"], 2, "give one value"),
    ("run --from into an unwritable dir", {}, ["run", "--from", "{run}", "hydra.run.dir=/proc/nope/run"], 2,
     "hydra.run.dir='/proc/nope/run': must be a folder this user can create"),
    ("run into a dir that holds a run", {}, ["run", "hydra.run.dir={run}"], 2,
     "must be a dir that holds no run yet (it has run.json"),
    ("check of a dir that holds a run", {}, ["check", "hydra.run.dir={run}"], 2, "orchestrator run --resume"),
    ("run --from into the run it re-runs", {}, ["run", "--from", "{run}", "--out", "{run}"], 2,
     "--out A_NEW_DIR"),
    ("sweep into a dir that holds a sweep", {"multirun.yaml": "x"}, [
        "run", "-m", "hydra.sweep.dir={cfg}", "protocol.request.max_tokens=4,5"], 2, "(it has multirun.yaml"),
    ("run --resume elsewhere", {}, ["run", "--resume", "{run}", "hydra.run.dir={tmp}/a"], 2, "finishes"),
    ("reproduce of a config that no longer validates", {}, ["reproduce", "{run}", "+damage=command"], 2,
     "config.yaml: arms.baseline.command=[]: must be a full argv with runtime=process"),
    ("reproduce of a config with an unknown key", {}, ["reproduce", "{run}", "+damage=key"], 2,
     "config.yaml: unknown key 'imgae' in arms.baseline"),
    # process arms
    ("process arm without a command", {}, ["check", "runtime=process", "arm@arms.baseline=reference_process",
                                           "~arms.wide_batch", "arms.baseline.command=[]"], 2,
     "arms.baseline.command=[]: must be a full argv with runtime=process"),
    ("process arm whose command is a flag", {}, ["run", "runtime=process", "arm@arms.baseline=reference_process",
                                                 "~arms.wide_batch", "arms.baseline.command=[--seed]"], 2,
     "arms.baseline.command=['--seed']"),
    ("process arm with a scratch dir it never sees", {}, [
        "run", "runtime=process", "arm@arms.baseline=reference_process", "~arms.wide_batch",
        "+arms.baseline.scratch={cache: {container: /cache}}"], 2,
     "arms.baseline.scratch.cache.container='/cache': must be a path the arm's command, engine_args or env names"),
]


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir as `orchestrator run` leaves it, made on the fake runtime."""
    root = tmp_path_factory.mktemp("recorded") / "run"
    composed = config.compose(["protocol=smoke"])
    typed = config.to_typed(composed)
    for arm in typed.arms.values():
        arm.image, arm.build.context = "fake-engine", None
    paths = RunPaths(root)
    runner = StudyRunner(typed, paths, "run-bad-inputs", fake_runtime(), say=lambda _: None)
    runner.run()
    runner.cleanup()
    atomic_write_text(paths.meta, '{"study": "default", "run_id": "r", "baseline": "baseline", "gate": {}}\n')
    write_prompts(paths, config.resolve_prompts(typed.prompts))
    paths.hydra.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.masked_copy(composed, [k for k in composed if k != "hydra"]), paths.hydra / "config.yaml")
    (paths.hydra / "overrides.yaml").write_text("[]\n")
    return root


def _damage(run: Path, what: str) -> None:
    if what == "run.json":
        (run / "run.json").write_text("{not json")
    elif what == "parquet":
        next((run / "data" / "responses").glob("*.parquet")).write_bytes(b"PAR1 garbage")
    elif what == "newer":  # a part as a later release would write it
        import pyarrow.parquet as pq

        part = next((run / "data" / "responses").glob("*.parquet"))
        table = pq.read_table(part)
        pq.write_table(table.replace_schema_metadata({"orchestrator.schema_version": "99"}), part)
    elif what == "config":
        (run / ".hydra" / "config.yaml").write_text("study: [unclosed\n")
    elif what in ("command", "key"):  # a process run whose recorded arm lost its command; a typo
        saved = OmegaConf.load(run / ".hydra" / "config.yaml")
        if what == "command":
            saved.runtime.kind = "process"
            saved.arms.baseline.command = []
        else:
            saved.arms.baseline.imgae = "x"
        OmegaConf.save(saved, run / ".hydra" / "config.yaml")


@pytest.mark.parametrize(("files", "argv", "status", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_its_status(files: dict[str, str | bytes], argv: list[str], status: int,
                                              fragment: str, tmp_path: Path, recorded_run: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg"
    for name, content in files.items():
        (cfg / name).parent.mkdir(parents=True, exist_ok=True)
        (cfg / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    run = tmp_path / "run"
    shutil.copytree(recorded_run, run)
    damage = [a.split("=", 1)[1] for a in argv if a.startswith("+damage=")]
    for what in damage:
        _damage(run, what)
    argv = [a.replace("{cfg}", str(cfg)).replace("{run}", str(run)).replace("{tmp}", str(tmp_path))
            for a in argv if not a.startswith("+damage=")]
    assert cli.main(argv) == status
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "no message"
    assert "Traceback" not in err
    assert all(line.startswith("error: ") for line in lines), err
    assert fragment.replace("{cfg}", str(cfg)) in err, err


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 50


def test_every_problem_of_a_config_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["plan", "protocol.request.max_tokens=-5", "protocol.request.temperature=9",
                       "arms.baseline.port=0", "gate.max_divergence_rate=2"])
    lines = capsys.readouterr().err.splitlines()
    assert status == 2
    assert len(lines) == 4 and all(line.startswith("error: ") for line in lines)


def test_a_bug_is_one_line_and_exit_1_and_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def broken(argv: list[str]) -> int:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(importlib.import_module("orchestrator.verbs.plan"), "main", broken)
    assert cli.main(["plan"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error (a bug in the orchestrator): ZeroDivisionError: boom") and err[-1] == "\n"
    with pytest.raises(ZeroDivisionError):
        cli.main(["--debug", "plan"])


def test_a_reader_that_leaves_early_is_no_bug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`orchestrator show RUN | head -1`: the verb's BrokenPipeError reaches entry(), which ends quietly."""
    import orchestrator.__main__ as entry_point

    def piped(argv: list[str]) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(importlib.import_module("orchestrator.verbs.show"), "main", piped)
    stdout = (tmp_path / "stdout").open("w")  # a real file descriptor for entry() to point at /dev/null
    monkeypatch.setattr(entry_point.sys, "stdout", stdout)
    monkeypatch.setattr(entry_point.sys, "argv", ["orchestrator", "show", "RUN"])
    assert entry_point.entry() == 0  # the reader took what it wanted: `show RUN | head -3 && ...` goes on
    stdout.close()
    assert "internal error" not in capsys.readouterr().err


def test_a_closed_pipe_is_exit_0(recorded_run: Path) -> None:
    """The real thing: `ls` writing into a pipe whose reader is already gone (EPIPE at the first write)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run([sys.executable, "-m", "orchestrator", "ls", str(recorded_run.parent)], stdout=writer,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (0, "")


def test_docs_errors_md_is_generated_from_the_code() -> None:
    from orchestrator.config.catalog import errors_markdown
    from tests.conftest import ROOT

    assert (ROOT / "docs" / "errors.md").read_text() == errors_markdown(), "run python scripts/gen-errors-doc.py"


@pytest.mark.parametrize(("argv", "status", "stated"), [
    (["compare", "{run}"], 0, "Gate: not set"),
    (["compare", "{run}", "--expect-pair", "wide_batch=identical"], 0, "Gate: passed (expect_pairs"),
    (["compare", "{run}", "--expect-pair", "wide_batch=differ"], 3, "Gate: FAILED (expect_pairs"),
    (["compare", "{run}", "--max-divergence-rate", "0"], 0, "Gate: passed (max_divergence_rate 0.0)"),
])
def test_compare_statuses(argv: list[str], status: int, stated: str, recorded_run: Path, tmp_path: Path) -> None:
    """The exit status, and the reports it rewrites state the gate it applied (not the run's 'not set')."""
    run = tmp_path / "run"
    shutil.copytree(recorded_run, run)
    assert cli.main([a.replace("{run}", str(run)) for a in argv]) == status
    assert stated in (run / "report.md").read_text()


def test_compare_of_a_run_whose_arm_got_no_answer_is_status_4(recorded_run: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(recorded_run, run)
    for part in (run / "data" / "responses").glob("wide_batch-*.parquet"):
        part.unlink()
    assert cli.main(["compare", str(run)]) == 4
    assert "error: arm(s) failed: wide_batch" in capsys.readouterr().err


def test_a_prompt_file_in_the_encoding_its_config_names_is_read(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "cafe.txt").write_bytes("café".encode("latin-1"))
    overrides = ["prompts.prompts.capital.text=null", "+prompts.prompts.capital.file=cafe.txt",
                 "prompts.prompts.capital.encoding=latin-1"]
    typed = config.to_typed(config.compose(overrides, [tmp_path]))
    assert config.resolve_prompts(typed.prompts, typed.config_dirs)["capital"] == "café"


def test_a_gate_on_an_arm_the_run_lacks_is_bad_input_and_changes_nothing(recorded_run: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(recorded_run, run)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert cli.main(["compare", str(run), "--expect-pair", "wide_btach=differ"]) == 2
    assert capsys.readouterr().err == ("error: --expect-pair='wide_btach' names nothing that exists. Did you mean "
                                       "'wide_batch'? Available: baseline, wide_batch\n")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # no report made with a gate it cannot apply


@pytest.mark.parametrize(("name", "credential"), [
    ("HF_TOKEN", True), ("OPENAI_API_KEY", True), ("DB_PASSWORD", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("api-key", True), ("TOKENIZERS_PARALLELISM", False), ("MAX_TOKENS", False), ("VLLM_ATTENTION_BACKEND", False),
    ("KEYPATH", False),
])
def test_a_name_is_taken_for_a_credential_only_where_it_says_so(name: str, credential: bool) -> None:
    from orchestrator.config.security import SECRET_NAME

    assert bool(SECRET_NAME.search(name.upper())) is credential
