"""The onset search's report (report/onset.py): each job's first divergence placed against the declared budget,
the run dirs linked in the HTML (not its Markdown), the chart's rate scale."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.report.onset import markdown, page, placed


def job(prompt: int | None, apart: int | None, flipped: int | None, **kw: Any) -> dict[str, Any]:
    return {"job": 0, "value": float(prompt or 1), "index": 0, "dir": "0", "status": 0, "k": 2, "n": 6,
            "requests": 7, "prompt_tokens": prompt, "first_logprob_position": apart,
            "first_divergent_position": flipped, "note": "", **kw}


def test_the_prompt_crossed_the_budget_or_generation_did_or_neither() -> None:
    assert placed(job(2060, 0, 3), 2048) == ("logprobs apart at 2060 (2060 + 0); token flipped at 2063 (2060 + 3): "
                                            "the prompt crossed the budget 2048")
    assert placed(job(2040, 9, None), 2048) == ("logprobs apart at 2049 (2040 + 9); no token flipped: "
                                               "generation crossed the budget 2048")
    assert placed(job(2048, 0, None), 2048).endswith(": within the budget 2048")  # 2048 tokens: not past it
    assert placed(job(2040, 8, None), 2048).endswith(": within the budget 2048")
    # the earliest difference decides: logprobs apart past the budget while the token flips later
    assert placed(job(2000, 49, 60), 2048).endswith("generation crossed the budget 2048")
    assert placed(job(2000, None, None), 2048) == "-"
    assert placed(job(None, 2, None), 2048) == "logprobs apart at generated 2; no token flipped"
    assert placed(job(100, 2, 5), None) == "logprobs apart at 102 (100 + 2); token flipped at 105 (100 + 5)"


def state(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    settings = {"axis": {"key": "prompts.prompts.p.length_tokens", "low": 64, "high": 512, "type": "int",
                         "scale": "linear", "points": None},
                "target": {"arm": "a", "prompt": "p", "phase": "sequential", "outcome": "reference"},
                "width": 16, "confidence": 0.95, "max_jobs": 10, "max_requests": None, "budget_tokens": 256}
    result = {"outcome": "onset", "line": "onset in [250, 260]", "stop": "width", "islands": None,
              "posterior": [0.0] * 200 + [0.9, 0.1] + [0.0] * 248}
    return {"settings": settings, "grid": [float(v) for v in range(64, 513)], "arguments": [],
            "configurations": [{"per": [], "jobs": jobs, "result": result, "done": True}]}


def test_the_html_links_each_run_dir_and_the_chart_has_a_rate_scale() -> None:
    s = state([job(250, None, None, k=0, dir="3"), job(260, 0, 2, dir="4")])
    md = markdown(s)
    assert "[4](4/report.md)" in md and "requests off the arm's reference answer" in md
    html = page(s)
    assert '<a href="4/report.html">4</a>' in html and "](" not in html  # no Markdown link left raw
    labels = re.findall(r'text-anchor="end">(\d\.\d\d)</text>', html)
    assert labels == ["0.00", "0.25", "0.50", "0.75", "1.00"] and "rate (k / n)" in html
    assert "logprobs apart at 260 (260 + 0); token flipped at 262 (260 + 2): the prompt crossed the budget 256" in html


def test_an_interrupted_search_is_provisional_and_names_its_abandoned_job_dirs() -> None:
    """Ctrl-C after two jobs: the report says so and how to resume, marks the answer provisional (no bold answer)
    and names the job dir the round left; a finished search's report says none of it."""
    s = state([job(64, None, None, k=0, n=3, dir="0"), job(288, 0, 0, k=3, n=3, job=1, dir="1")])
    s["configurations"][0]["result"] = {"outcome": "undecided", "line": "onset in [below 64, above 512] at 95 %",
                                        "stop": "", "islands": None, "posterior": []}
    s["configurations"][0]["done"] = False
    s.update(interrupted=True, abandoned=["2"])
    md = markdown(s)
    assert "**Interrupted** after 2 of 10 jobs: the answers below are provisional" in md
    assert "same hydra.sweep.dir (this directory) resumes the search" in md
    assert "Provisional, the search was interrupted: onset in [below 64" in md and "**onset in" not in md
    assert "Job dir 2: left by an interrupted round, not counted" in md
    s.update(interrupted=False, abandoned=[])
    assert "nterrupted" not in markdown(s) and "**onset in [below 64" in markdown(s)


def test_no_bayes_factor_over_a_segment_with_no_measured_point() -> None:
    s = state([job(64, None, None, k=0, dir="0"), job(288, 0, 0, k=6, dir="1")])
    s["configurations"][0]["result"]["islands"] = {"bayes_factor": 1.34, "rates": [0.0, 1.0, None],
                                                   "island": False, "segments": [[64, 64], [288, 288], [None, None]]}
    md = markdown(s)
    assert "Bayes factor" not in md and "-> -" not in md
    assert "not weighed, the most probable split of the measured points leaves a segment with none of them" in md
    s["configurations"][0]["result"]["islands"]["rates"] = [0.0, 1.0, 0.0]
    assert "Bayes factor 1.34; rates along the axis 0.00 -> 1.00 -> 0.00" in markdown(s)


def test_the_chart_caption_names_the_axis_once_and_a_configuration_when_there_is_one() -> None:
    s = state([job(250, None, None, k=0, dir="3")])
    caption = re.findall(r"<figcaption>(.*)</figcaption>", page(s))
    assert caption == ["rate against prompts.prompts.p.length_tokens with 95 % bounds, and the onset&#x27;s "
                       "posterior"]
    s["configurations"][0]["per"] = ["arms.a.seed=1"]
    assert re.findall(r"<figcaption>(.*)</figcaption>", page(s))[0].endswith("posterior: arms.a.seed=1")
