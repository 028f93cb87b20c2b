"""A planted cost whose truth is known exactly, in small (bench/cost_calibration.py --planted recording, one trial):
two process arms of bench/recording_server.py, `slow` with twice `base`'s service time, run with `orchestrator
run` as a user runs it. Every ratio gets an interval that finds the cost (excludes 1), most hold the truth (an
interval may miss 5 % of the time: at most 2 of 7 here), and the client adds a little to the time to first token,
never takes away. The coverage over 40 trials is docs/benchmarks.md's ("A planted ratio known exactly")."""

from __future__ import annotations

from pathlib import Path

from tests import benches


def test_a_planted_ratio_of_two_is_found(tmp_path: Path) -> None:
    bench = benches.load("cost_calibration")
    trial = bench.run_planted(0, tmp_path)
    truths = {(phase, metric): truth for phase in bench.planted_recording.PHASES
              for metric, truth in bench._truths(phase).items()}
    assert set(trial.found) == set(truths) and None not in trial.found.values(), trial.found
    for key, truth in truths.items():
        found = trial.found[key]
        assert (found.lower > 1) if truth > 1 else (found.upper < 1), (key, found)
    missed = [key for key, truth in truths.items() if not trial.found[key].holds(truth)]
    assert len(missed) <= 2, [(key, trial.found[key]) for key in missed]
    assert all(0 < s < 0.02 for s in trial.served.overhead_s.values()), trial.served
