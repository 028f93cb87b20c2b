"""`python -m orchestrator` and the `orchestrator` console script: the verbs (cli.main), then the way out."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from orchestrator.cli import main


def entry() -> int:
    """The console script and `python -m orchestrator`. After a single study run as one (`run` that ran no
    sweep: sweep/app.py `ALONE`), out without the interpreter's teardown: freeing pandas', pyarrow's and
    Hydra's modules one by one took 0.15-0.2 s a run. Everything the run wrote is closed by then (atomic
    writes), its executors are shut down, and logging and the standard streams are flushed here. Anything
    else ends as usual: a sweep's launcher (joblib's worker processes) is shut down by the interpreter's exit
    hooks, which os._exit would skip, whether -m or the study's own `hydra.mode: MULTIRUN` made it a sweep."""
    argv, code = sys.argv[1:], None
    if argv[:1] == ["run"]:
        from orchestrator.run.prefetch import no_pandas_objects

        no_pandas_objects()  # this process hands pyarrow no pandas object: its record is written from Python rows
    try:
        code = main(argv)
        sys.stdout.flush()  # here, not at exit: a reader that left (`| head`) is seen while it can be handled
    except BrokenPipeError:  # `orchestrator show RUN | head -3`: the reader took what it wanted; not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0 if code is None else code
    if argv[:1] != ["run"]:
        return code
    from orchestrator.sweep.app import ALONE  # imported by `run` already

    if not ALONE["ran"]:
        return code
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a closed pipe (`| head`): nothing more to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(entry())
