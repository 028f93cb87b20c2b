"""`orchestrator import SOURCE --out RUN_DIR [--kind KIND]`: another tool's output made into a run dir
(imports/), then its reports made as `compare` makes them (report/verdict.py); one line says where it came from
and what the source lacked (docs/import.md)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.console import Outcome, note
from orchestrator.verbs.arguments import parser


def main(argv: list[str]) -> Outcome:
    from orchestrator.imports.evidence import KINDS
    from orchestrator.imports.sniff import READERS, kind_of
    from orchestrator.imports.write import write
    from orchestrator.record.paths import read_json
    from orchestrator.record.recorded import RunMeta
    from orchestrator.report.verdict import recompare

    made = parser("import", "Make another tool's output a run dir: detLLM's traces, OpenAI answers, position parity.")
    made.add_argument("source", type=Path, metavar="SOURCE", help="the other tool's file or folder")
    made.add_argument("--out", type=Path, required=True, help="the new run dir")
    made.add_argument("--kind", choices=KINDS, help="what wrote SOURCE (default: told by its files)")
    made.add_argument("--prompts", type=Path, help="openai-json: a JSON map of answer file name to prompt id, for "
                      "answers saved with no request beside them")
    made.add_argument("--arm", help="openai-json: the arm's name (default: the answers' model)")
    a = made.parse_args(argv)
    kind = a.kind or kind_of(a.source)
    options = {"prompts": a.prompts, "arm": a.arm} if kind == "openai-json" else {}
    if kind != "openai-json" and (a.prompts or a.arm):
        made.error(f"--prompts and --arm are for --kind openai-json, not {kind}")
    evidence = READERS[kind](a.source, **options)
    paths = write(evidence, a.source, a.out)
    told = note(RunMeta.of(read_json(paths.meta)).provenance or "", *evidence.notes, f"Imported: {paths.root}")
    return told + recompare([paths.root], None, None, False, False, None, [], [])
