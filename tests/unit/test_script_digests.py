"""The digest lines of a user's script (analysis/script_digests.py) and the report's verdict across repeats."""

from __future__ import annotations

from orchestrator.analysis.script_digests import agreements, read_digests
from orchestrator.report.script_probe import verdict

H = "3fa1" * 16


def test_the_lines_a_hash_loop_prints_are_digests_and_others_are_not() -> None:
    said = read_digests(f"DIGEST logits {H}\nlogits: {H[:32]}\nlayer.3.out sha256={H.upper()}\n{H[:40]}\n"
                        f"step 3: loss 0.25\nshort: {H[:15]}\nhash {H[:16]}x\n")
    assert said == [("logits", H), ("logits#2", H[:32]), ("layer.3.out", H), ("digest", H[:40])]


def rows(*runs: dict[str, str]) -> list[dict[str, object]]:
    return [{"repeat": i, "digest_names": list(r), "digest_values": list(r.values())} for i, r in enumerate(runs, 1)]


def test_a_name_missing_or_changed_in_a_repeat_is_not_identical() -> None:
    found = {a.name: a for a in agreements(rows({"a": "1" * 16, "b": "2" * 16}, {"a": "1" * 16},
                                                {"a": "1" * 16, "b": "3" * 16}))}
    assert found["a"].identical and (found["a"].distinct, found["a"].divergent) == (1, 0)
    assert not found["b"].identical and (found["b"].printed_in, found["b"].distinct, found["b"].divergent) == (2, 2, 2)
    assert found["b"].lower_95 > 0 and found["a"].lower_95 == 0 < found["a"].upper_95 < 1
    assert verdict(list(found.values()), 3) == "Digests across 3 repeats: not identical (1 of 2 digests differ: b)"
    assert verdict([found["a"]], 3) == "Digests across 3 repeats: identical (1 digest)"
    assert verdict([], 3).startswith("Digests across 3 repeats: none printed")
