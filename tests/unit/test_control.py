"""A control arm (study.control, analysis/control.py): each other arm's drift from it, per prompt and phase."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from orchestrator.analysis.control import drift


@dataclass
class Ref:
    ok: bool = True
    tokens: np.ndarray | None = None
    logprobs: np.ndarray | None = None
    texts: dict[str | None, int] = field(default_factory=dict)


def test_an_arm_that_parts_from_the_control_says_where_and_by_how_much_before() -> None:
    control = Ref(tokens=np.array([5, 6, 7, 8]), logprobs=np.array([-0.1, -0.2, -0.3, -0.4]), texts={"A": 10})
    parts = Ref(tokens=np.array([5, 6, 9, 8]), logprobs=np.array([-0.15, -0.2, -2.0, -0.4]), texts={"B": 9, "A": 1})
    same = Ref(tokens=np.array([5, 6, 7, 8]), logprobs=np.array([-0.1, -0.2, -0.3, -0.4]), texts={"A": 10})
    found = {d.arm: d for d in drift({("fp32", "p", "s"): control, ("bf16", "p", "s"): parts,
                                      ("copy", "p", "s"): same}, "fp32")}
    assert set(found) == {"bf16", "copy"}  # the control is not compared with itself
    bf16 = found["bf16"]
    assert (bf16.as_control, bf16.n, bf16.first_token_split) == (1, 10, 2)
    assert bf16.max_logprob_drift is not None and abs(bf16.max_logprob_drift - 0.05) < 1e-12  # before position 2
    copy = found["copy"]
    assert (copy.as_control, copy.first_token_split, copy.max_logprob_drift) == (10, None, 0.0)


def test_a_cell_the_control_did_not_answer_says_so() -> None:
    arm = Ref(tokens=np.array([1]), logprobs=np.array([-0.1]), texts={"A": 3})
    found = drift({("fp32", "p", "s"): Ref(ok=False), ("bf16", "p", "s"): arm, ("bf16", "q", "s"): arm}, "fp32")
    assert [d.note for d in found] == ["no answer from fp32", "no answer from fp32"]
    assert drift({("bf16", "p", "s"): arm}, "fp32")[0].note == "no answer from fp32"
