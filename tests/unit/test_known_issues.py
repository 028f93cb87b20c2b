"""Known issues by version (engines/known_issues.py, engines/vllm_issues.py, guard/versions.py): each arm's
versions, as the knob listing gives them (`check`) or the record keeps them (the report), against the vLLM
profile's table; PEP 440 ranges, pre-releases included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator import config
from orchestrator.engines import profile_for
from orchestrator.engines.known_issues import KnownIssue
from orchestrator.guard import versions
from orchestrator.guard.results import GuardResult, KnobCheck
from orchestrator.report import guard as guard_report

ROOT = Path(__file__).resolve().parents[2]
ISSUES = {issue.name: issue for issue in profile_for("vllm").known_issues}
COLLISION = ISSUES["FlashInfer autotune-key collision"]
QSA = ISSUES["env VLLM_QSA_EXACT_TOPK has no effect"]


def fused_finalize(*overrides: str) -> Any:
    """The seed's fused-finalize A/B on vLLM: arms fused (baseline) and nonfused."""
    return config.to_typed(config.compose(["study=vllm_fused_finalize", *overrides]))


def fingerprint(packages: dict[str, str], server: str | None = None, error: str | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    probe: dict[str, Any] = {"packages": packages, "env": env or {}}
    if error:
        probe = {"error": error}
    return {"probe": probe, **({"version": {"version": server}} if server else {}), "log_facts": {}}


@pytest.mark.parametrize(("version", "affected"), [
    ("0.6.17", True), ("0.6.18rc1", True), ("0.6.18.dev3", True), ("0.6.18rc2", False), ("0.6.18", False),
    ("0.6.18.post1", False), ("0.7.0", False),
    ("0.6.14", False),  # before use_fused_finalize, the finalize mode cannot change: no such collision
    ("0.6.15", True)])
def test_the_autotune_key_collision_is_judged_by_pep_440_prereleases_included(version: str, affected: bool) -> None:
    assert versions.affects(COLLISION, version) is affected


def test_a_pre_release_inside_a_range_with_no_pre_release_bound_is_affected() -> None:
    attention = ISSUES["env VLLM_ATTENTION_BACKEND has no effect"]  # >=0.15.0
    assert versions.affects(attention, "0.20.0rc1") and versions.affects(attention, "0.28.1.dev12+g6d4562c59")
    assert not versions.affects(attention, "0.14.0")


def test_an_arm_on_an_affected_flashinfer_gets_one_line_naming_the_defect_version_and_fix() -> None:
    cfg = fused_finalize()
    found = versions.run_notes(cfg, {"fused": fingerprint({"vllm": "0.28.0", "flashinfer": "0.6.17"}),
                                     "nonfused": fingerprint({"vllm": "0.28.0", "flashinfer": "0.6.18rc2"})})
    [note] = found
    assert (note.arm, note.issue, note.version, note.affected) == ("fused", COLLISION.name, "0.6.17", True)
    assert note.line.startswith("arm 'fused': FlashInfer autotune-key collision at flashinfer 0.6.17: the autotune "
                                "cache key omits the finalize mode")
    assert "(fixed in flashinfer 0.6.18rc2; source: the seed's field notes: " in note.line


def test_an_env_var_absent_at_the_arms_version_has_no_effect_there() -> None:
    cfg = fused_finalize("+arms.nonfused.env.VLLM_QSA_EXACT_TOPK=1")
    prints = {"fused": fingerprint({"vllm": "0.28.0"}), "nonfused": fingerprint({"vllm": "0.28.0"})}
    [note] = versions.run_notes(cfg, prints)
    assert note.line.startswith("arm 'nonfused': env VLLM_QSA_EXACT_TOPK has no effect at vllm 0.28.0: the engine "
                                "reads no such variable at these versions")
    assert "v0.29.0rc4" in note.line  # the reference the seed checked
    # a version after the references the seed names is not claimed
    assert versions.run_notes(cfg, {**prints, "nonfused": fingerprint({"vllm": "0.30.0"})}) == []
    # the image's own ENV (seen by the environment probe) sets it as much as the arm's config does
    cfg = fused_finalize()
    [seen] = versions.run_notes(cfg, {**prints, "fused": fingerprint({"vllm": "0.29.0rc4"},
                                                                     env={"VLLM_QSA_EXACT_TOPK": "1"})})
    assert seen.arm == "fused" and seen.issue == QSA.name


def test_an_arm_without_a_recorded_version_is_not_checked_and_says_so() -> None:
    cfg = fused_finalize()
    found = versions.run_notes(cfg, {"fused": None, "nonfused": fingerprint({}, error="python3: exit 127")})
    assert [(n.arm, n.affected, n.version) for n in found] == [("fused", None, None), ("nonfused", None, None)]
    assert found[0].line == ("arm 'fused': FlashInfer autotune-key collision: flashinfer version not recorded: "
                             "not checked")
    # the probe ran and found no FlashInfer (the CPU build): not installed, so not affected
    assert versions.run_notes(cfg, {arm: fingerprint({"vllm": "0.32.0"}) for arm in cfg.arms}) == []


def test_only_the_servers_own_version_recorded_checks_the_engine_and_not_the_rest() -> None:
    cfg = fused_finalize("+arms.fused.env.VLLM_QSA_EXACT_TOPK=1")
    found = versions.run_notes(cfg, {"fused": fingerprint({}, server="0.28.0", error="no python3"),
                                     "nonfused": fingerprint({"vllm": "0.32.0"})})
    assert [(n.issue, n.version, n.affected) for n in found] == [
        (COLLISION.name, None, None), (QSA.name, "0.28.0", True)]


def test_a_version_pep_440_cannot_read_is_not_checked() -> None:
    [note] = versions.notes("a", [COLLISION], versions.Versions({"flashinfer": "nightly"}, complete=True), [])
    assert note.affected is None and note.line.endswith("version 'nightly' is no PEP 440 version: not checked")


def test_check_warns_from_the_knob_listings_versions() -> None:
    cfg = fused_finalize("+arms.nonfused.env.VLLM_QSA_EXACT_TOPK=1")
    knobs = {"fused": KnobCheck(True, versions={"vllm": "0.28.0", "flashinfer": "0.6.17"}),
             "nonfused": KnobCheck(True, versions={"vllm": "0.28.0", "flashinfer": None})}
    found = versions.check_notes(cfg, knobs)
    assert [(n.arm, n.issue) for n in found] == [("fused", COLLISION.name), ("nonfused", QSA.name)]
    # a listing that names no packages (a user's own listing command): FlashInfer not recorded
    [unlisted] = versions.check_notes(cfg, {"fused": KnobCheck(False, reason="no listing"),
                                            "nonfused": KnobCheck(True, versions={"vllm": "0.30.0"})})[1:]
    assert unlisted.line == ("arm 'nonfused': FlashInfer autotune-key collision: flashinfer version not recorded: "
                             "not checked")


def test_the_other_engines_have_no_table_of_vllms() -> None:
    assert profile_for("reference").known_issues == () and profile_for("transformers_hooked").known_issues == ()
    cfg = config.to_typed(config.compose(["study=guard_finalize_only"]))  # reference engine arms
    assert versions.run_notes(cfg, {arm: None for arm in cfg.arms}) == []


def test_the_notes_are_in_guard_json_and_the_reports_guard_section() -> None:
    cfg = fused_finalize()
    guard = GuardResult(known_issues=versions.run_notes(cfg, {"fused": fingerprint({"flashinfer": "0.6.18rc1"}),
                                                              "nonfused": None}))
    again = GuardResult.from_json(guard.to_json())
    assert again.known_issues == guard.known_issues
    lines = guard_report.markdown_section(again)
    assert [line for line in lines if line.startswith("- Known issue")] == [
        f"- Known issue: {guard.known_issues[0].line}", f"- Known issue (not checked): {guard.known_issues[1].line}"]
    assert "at flashinfer 0.6.18rc1" in lines[-2]


def test_the_docs_table_lists_each_issue_of_the_profile_with_its_range_and_source() -> None:
    text = (ROOT / "docs" / "vllm.md").read_text()
    section = text.split("### Known issues by version", 1)[1].split("\n#", 1)[0]
    rows = [[cell.strip() for cell in row.strip("|").split("|")] for row in section.splitlines()
            if row.startswith("| ") and not row.startswith("| issue") and not row.startswith("| ---")]
    table = {re.sub(r"`", "", row[0]): (row[1].strip("`"), row[2].strip("`")) for row in rows}
    assert table == {issue.name: (issue.package, issue.affected) for issue in ISSUES.values()}


def test_every_range_in_every_profile_is_a_pep_440_specifier_set() -> None:
    from packaging.specifiers import SpecifierSet

    from orchestrator.engines import ENGINES

    issues: list[KnownIssue] = [issue for profile in ENGINES.values() for issue in profile.known_issues]
    for issue in issues:
        SpecifierSet(issue.affected)  # raises on a range PEP 440 cannot read
        assert issue.source and issue.fix
