"""Entry point: ``python3 -m hookedengine --model PATH ...``."""

import logging
import os
import sys

from hookedengine.cli import main

if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)  # skip the interpreter's teardown of torch, as the reference engine does
