"""`orchestrator fingerprint [--image IMG]`: this host's (or an image's) fingerprint and matrix key
(guard/fingerprint.py); 4 when the environment probe failed."""

from __future__ import annotations

import json

from orchestrator.console import Outcome, answer
from orchestrator.errors import ExitStatus
from orchestrator.verbs.arguments import parser, runtime_named


def main(argv: list[str]) -> Outcome:
    from orchestrator.guard.fingerprint import fingerprint_target, render

    made = parser("fingerprint", "Fingerprint this host, or an image, and its matrix key. No network.", True)
    made.add_argument("--image", help="fingerprint inside a throwaway container of this image (no network)")
    made.add_argument("--json", action="store_true", help="one JSON object for machines")
    a = made.parse_args(argv)
    result = fingerprint_target(runtime_named("process" if a.image is None else "docker", a.docker_host), a.image,
                                "fingerprint")
    failed = result["fingerprint"].get("probe", {}).get("error")
    return answer(json.dumps(result, indent=2, sort_keys=True) if a.json else render(result),
                  status=ExitStatus.MEASUREMENT_FAILED if failed else ExitStatus.OK)
