"""Entry point: ``python3 -m refengine ...`` (flags mirror ``vllm serve``)."""

import logging
import os
import sys

from refengine.cli import main

if __name__ == "__main__":
    code = main()
    # Everything is shut down and logged by now: skip the interpreter's teardown of torch (about a second
    # per stop, which every arm of every study pays).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
