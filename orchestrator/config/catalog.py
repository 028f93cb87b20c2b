"""The catalog of bad-input errors: each kind's cause and fix, the one definition the messages and
docs/errors.md (scripts/gen-errors-doc.py; a test keeps it current) are both made from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator import errors
from orchestrator.errors import did_you_mean


@dataclass(frozen=True)
class Entry:
    cause: str
    fix: str
    said: bool = True  # a line without a fix of its own ends with this one (a range's line ends with the range)


CATALOG: dict[str, Entry] = {
    "syntax": Entry("a config file is not valid YAML, or a command-line override does not parse",
                    "correct the file or override at the place the message names"),
    "unknown-key": Entry("a key that no schema field names (often a typo)", "use one of the keys listed"),
    "unknown-option": Entry("a config group option (study, arm, protocol, prompts, ...) that no config dir has",
                            "use one of the options listed, or add the config dir that has it (--config-dir)"),
    "shadowed": Entry("a user config file has the name of a project file it would silently replace",
                      "rename the user file"),
    "type": Entry("a value of the wrong type (text for a number, a list for a map); a name YAML reads as a "
                  "boolean or null (an arm or prompt named off, on, yes, no, true, false, null)",
                  "give a value of the type the message names; quote such a name ('off')"),
    "range": Entry("a number outside its valid range (counts >= 1, rates in [0, 1], timeouts > 0)",
                   "a value in the range the line ends with", said=False),
    "unknown-name": Entry("a name that must exist does not: an arm, a baseline, a verdict",
                          "use one of the names listed"),
    "empty": Entry("a study without arms, prompts or phases", "add what the message names"),
    "cross-field": Entry("fields that are valid alone but not together (an arm that sets a switch both ways, "
                         "engine_args.X and engine_args.no-X)", "follow the fix in the message (keep one spelling)"),
    "engine-rule": Entry("a request the engine would refuse (e.g. logprobs above --max-logprobs, max_tokens 0 "
                         "without echo)", "change the request, or the engine argument the message names"),
    "file": Entry("a file the config names is missing, unreadable, or not UTF-8 text",
                  "fix the path (relative paths resolve beside the config file that names them) or re-encode "
                  "the file as UTF-8"),
    "dangerous-option": Entry("a container option that weakens isolation (privileged, host network, Docker "
                              "socket mount, ...)", "remove it, or allow it explicitly (runtime.allow / --allow)"),
    "confounded": Entry("arms meant as an A/B differ in more than their declared variables",
                        "declare the extra leaves, make the arms agree, or set study.allow_confounded"),
    "declared-equal": Entry("a declared variable has the same value in the arm and the baseline",
                            "change the arm's value, or remove the leaf from study.variables"),
    "shared-cache": Entry("two arms share a cache (autotune, compile, Triton, vLLM, FlashInfer, Hugging Face), "
                          "so the first arm's results can leak into the second",
                          "give each arm its own cache dir (scratch), or set study.allow_shared_caches"),
    "unknown-knob": Entry("an engine flag or environment variable the arm's engine does not know (it would be "
                          "ignored silently)", "fix the name, or set study.allow_unknown_knobs"),
    "missing-image": Entry("an arm's image is neither present nor buildable here (no registry is assumed)",
                           "build or load it with the command the message names, or fix a typo: the message names "
                           "the closest image the Docker host has"),
    "missing-executable": Entry("a process arm's program or interpreter is not installed",
                                "install it with the command the message names"),
    "run-dir": Entry("the run dir cannot be created or written", "choose a writable place (hydra.run.dir=... or "
                     "--out)"),
    "run-dir-used": Entry("the run dir already holds a run (a second one would mix its record into it)",
                          "choose a new dir, or finish that run with `orchestrator run --resume DIR`"),
    "record": Entry("a run dir is missing, incomplete, or its Parquet record is unreadable",
                    "name a run dir that `orchestrator run` wrote (it holds run.json and data/)"),
    "bundle": Entry("a bundle fails a check: a member changed, missing or added against its manifest, a path "
                    "outside its folder, or no zip at all; or, making one, a member would hold a secret",
                    "copy it again from its source, or make it again with `orchestrator bundle RUN` (a secret: "
                    "pass it through the arm's secret_env, run again, bundle that run); docs/bundle.md"),
    "command-line": Entry("a verb or flag the command does not take", "see `orchestrator VERB --help`"),
    "port": Entry("a port the study needs is taken", "stop what holds it, or choose another port"),
    "disk": Entry("not enough free disk for the expected record", "free space, or write the run elsewhere"),
}


def written(value: Any) -> str:
    """A value as a config or the command line writes it: null, true, false (never Python's None, True,
    False); a string quoted."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


def line(code: str, field: str, value: Any, valid: str | Sequence[str], fix: str | None = None) -> str:
    """One error line: the field, the value, what is valid, the fix. `valid` as a list: the names that exist."""
    entry = CATALOG[code]
    if isinstance(valid, str):
        tail = fix or (entry.fix if entry.said else None)
        return f"{field}={written(value)}: must be {valid}" + (f"; {tail}" if tail else "")
    return (f"{field}={written(value)} names nothing that exists.{did_you_mean(str(value), valid)}"
            f"{f'; {fix}' if fix else ''}")


def errors_markdown() -> str:
    """docs/errors.md: the exit statuses, the exception tree and this catalog, from their definitions."""
    order = sorted(errors.ExitStatus, key=int)
    lines = ["# Errors and exit statuses", "",
             "Generated by `python scripts/gen-errors-doc.py` from `orchestrator/errors.py` and",
             "`orchestrator/config/catalog.py`; a test fails when this page and the code differ.", "",
             "Every problem is one line on stderr starting with `error: ` (a bug: `internal error`), naming the",
             "field or file, the value, what is valid and the fix. A command line's and a config's problems are",
             "listed all at once, one line each, by `check` and `run` alike (run/refusals.py `refusals`).",
             "`--debug` (or `ORCHESTRATOR_DEBUG=1`) shows a bug's traceback.", "",
             "## Exit statuses (every verb)", "", "| status | meaning | what to do |", "| --- | --- | --- |"]
    lines += [f"| {int(s)} | {errors.MEANINGS[s][0]} | {errors.MEANINGS[s][1]} |" for s in order]
    lines += ["", "Where several apply (a sweep, a study of many arms) the worst wins: "
              + " > ".join(str(int(s)) for s in errors.PRECEDENCE) + ".", "",
              "## The exception tree", "", "```", (errors.__doc__ or "").split("\n\n", 1)[1].strip("\n"), "```",
              "", "## Bad input (exit 2): the catalog", "", "| kind | cause | fix |", "| --- | --- | --- |"]
    lines += [f"| `{code}` | {entry.cause} | {entry.fix} |" for code, entry in CATALOG.items()]
    return "\n".join(lines) + "\n"
