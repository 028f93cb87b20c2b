"""Entry point: ``python3 -m refengine ...`` (flags mirror ``vllm serve``)."""

import sys

from refengine.cli import main

if __name__ == "__main__":
    sys.exit(main())
