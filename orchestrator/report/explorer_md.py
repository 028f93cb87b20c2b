"""report.md's "Where it split": per cell with more than one signature (and per A/B pair that differs) the
completions aligned on the first one, one row per position around the split (and around a later token flip),
then who took each branch and the top-k at the split and the flip; a cell signed on text, its completions'
characters from the first split. Also what the HTML and terminal views share: how a token or a text is shown,
the summary line, the sentences before each top-k table, the window's gaps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from orchestrator.analysis.locate_results import Located
from orchestrator.analysis.results import Comparison, Completion, Explored, Flip, TopEntry
from orchestrator.errors import counted
from orchestrator.report.locate import SECTION, inside_lines

VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}
TEXT_SIGNED = "signed on text: the server returned no tokens or logprobs, so no top-k at the split"
MARKS = {"split": "◀ split", "flip": "◀ other token"}  # after the token where a completion parts, or flips


def token_text(token: str) -> str:
    """A token with its whitespace made visible (a space is a different token from none)."""
    return "".join(VISIBLE.get(c, c) for c in token) or "∅"


def text_shown(text: str) -> str:
    """A completion's text on one line: line breaks, tabs and other control characters made visible, one
    character each (so continuations stay aligned); spaces kept."""
    return "".join(VISIBLE[c] if c in VISIBLE and c != " " else chr(0x2400 + ord(c)) if ord(c) < 0x20
                   else "␡" if c == "\x7f" else c for c in text)


def text_parts(explored: Explored, completion: Completion) -> tuple[str, str, str]:
    """A text-signed completion's window as (what it shares with the first completion, from its split on, "…"
    when its text goes on past the window); the shared part starts with "…" when its window starts past the
    explored one's."""
    at = len(completion.text) if completion.split is None else completion.split - completion.text_start
    more = "…" if completion.length > completion.text_start + len(completion.text) else ""
    return ("…" if completion.text_start > explored.window_start else "") + completion.text[:at], \
        completion.text[at:], more


def summary(explored: Explored) -> str:
    """One line: what diverged, where, and whether it was a near-tie."""
    first, others = explored.completions[0], explored.completions[1:]
    splits = [c for c in others if c.split is not None]
    if explored.kind == "pair":
        head = f"{explored.label}: modal completions"
    else:
        shown = len(explored.completions) + explored.more_branches
        head = f"{explored.label}: {shown} signatures in {explored.n} ({first.requests} took the modal one)"
    if not splits:
        return head + "; no token or logprob difference found in the stored lists"
    earliest = min(splits, key=lambda c: c.split or 0)
    if explored.basis == "text":
        return f"{head}; first split at character {earliest.split} (signed on text)"
    token = earliest.split_kind == "token"
    about = ["another token" if token else "same token, other logprobs",
             *_gap(earliest.gap_at_split, token and earliest.near_tie)]
    line = f"{head}; first split at token {earliest.split} ({', '.join(about)})"
    if token:
        return line
    flips = [f for c in splits if (f := flip_of(c)) is not None]
    if not flips:
        if explored.more_branches:  # a branch not shown may take another token: claim only what was read
            return (f"{line}; the same tokens throughout in the {len(others)} branch(es) shown "
                    f"({explored.more_branches} more not read: compare RUN --branches K)")
        return line + "; the same tokens throughout"
    flip = min(flips, key=lambda f: f.position)
    about = _gap(flip.gap, flip.near_tie)
    return f"{line}; first other token at {flip.position}" + (f" ({', '.join(about)})" if about else "")


def _gap(gap: float | None, near_tie: bool | None) -> list[str]:
    return [] if gap is None else [f"gap {gap:.3g}", *(["near-tie"] if near_tie else [])]


def flip_of(completion: Completion) -> Flip | None:
    """Where a completion first takes another token than the first one: its split when that is a token one,
    else its later flip (None: the same tokens throughout, or signed on text)."""
    if completion.split is not None and completion.split_kind == "token":
        return Flip(completion.split, completion.top_at_split, completion.first_top_at_split,
                    completion.gap_at_split, completion.near_tie)
    return completion.flip


def who(completion: Completion) -> str:
    """How many requests took it, which ones, in which batches, alongside how many others."""
    more = completion.requests - len(completion.request_ids)
    ids = ", ".join(completion.request_ids) + (f" and {more} more" if more > 0 else "")
    parts = [f"{counted(completion.requests, 'request')} ({ids})"]
    if completion.phase_kind == "concurrent" and completion.batches:
        parts.append("batches " + ", ".join(f"#{b} (size {size})" for b, size in completion.batches[:12])
                     + (" ..." if len(completion.batches) > 12 else ""))
    elif completion.phase_kind:
        parts.append(f"{completion.phase_kind}, one at a time")
    if completion.co_residents:
        parts.append("ran alongside " + "/".join(map(str, completion.co_residents)) + " others (server trace)")
    elif completion.together:
        parts.append("its batches had " + "/".join(map(str, completion.together)) + " running at once")
    if completion.seen_in:
        sizes = "/".join(map(str, completion.batch_sizes))
        parts.append("this signature seen in " + ", ".join(f"{p} ({n})" for p, n in completion.seen_in.items())
                     + (f", batch sizes {sizes}" if sizes else ""))
    return "; ".join(parts)


def gap_text(gap: float | None, near_tie: bool | None) -> str:
    """The first completion's top1 - top2 gap where a completion parts from it; `near_tie` only where the other
    took another token (a logprob split flips nothing)."""
    if gap is None:
        return "top1-top2 gap unknown"
    tie = " (**near-tie**: the argmax flipped between two almost equal tokens)" if near_tie else ""
    return f"top1-top2 gap {gap:.3g}{tie}"


def forks(explored: Explored, completion: Completion) -> Iterator[tuple[str, list[TopEntry], list[TopEntry]]]:
    """Where a completion parts from the first one: its split, then the later token flip of a logprob split (a
    second fact); each as the sentence before its top-k table, the first completion's top-k there, and its own."""
    first, split = explored.completions[0], completion.split
    if split is None:
        return
    token = completion.split_kind == "token"
    kind = "another token" if token else "the same token, other logprobs"
    yield (f"At token {split}, {completion.name} parts from {first.name} ({kind}); {first.name}'s "
           f"{gap_text(completion.gap_at_split, token and completion.near_tie)}.{_outside(explored, split)}",
           completion.first_top_at_split, completion.top_at_split)
    flip = completion.flip
    if flip is not None:
        yield (f"At token {flip.position}, {completion.name} takes another token than {first.name} (it parted on "
               f"logprobs at token {split}); {first.name}'s {gap_text(flip.gap, flip.near_tie)}."
               f"{_outside(explored, flip.position)}", flip.first_top, flip.top)


def _outside(explored: Explored, position: int) -> str:
    return "" if position in explored.window_positions else " (Past the window above: too far from the others.)"


def window(explored: Explored) -> list[tuple[int, int] | None]:
    """The window's (offset in `Completion.tokens`, position), None where it skips positions (shown "…")."""
    positions = explored.window_positions
    out: list[tuple[int, int] | None] = []
    for offset, position in enumerate(positions):
        if offset and position != positions[offset - 1] + 1:
            out.append(None)
        out.append((offset, position))
    return out


def mark(explored: Explored, completion: Completion, offset: int, position: int) -> str:
    """How a completion's token in the window is marked: "split" (where it parts from the first), "flip" (where
    a logprob split first takes another token), "differ" (another token than the first's), else ""."""
    first = explored.completions[0]
    if completion.split == position:
        return "split"
    if completion.flip is not None and completion.flip.position == position:
        return "flip"
    if completion is not first and offset < len(completion.tokens) and (
            offset >= len(first.tokens) or completion.tokens[offset] != first.tokens[offset]):
        return "differ"
    return ""


def _code(token: str) -> str:
    """A token as Markdown code inside a table cell."""
    return "`" + token_text(token).replace("|", "\\|").replace("`", "'") + "`"


def _cell(token: str | None, logprob: float | None) -> str:
    if token is None:
        return ""
    return f"{_code(token)} {logprob:.3g}" if logprob is not None else _code(token)


def _entry(entries: list[TopEntry], others: list[TopEntry], i: int) -> list[str]:
    """At the signature's precision (12 significant digits); bold where the other side differs."""
    if i >= len(entries):
        return ["", ""]
    text = [_code(entries[i].token), f"{entries[i].logprob:.12g}"]
    return text if i < len(others) and others[i] == entries[i] else [f"**{t}**" for t in text]


def _text_code(text: str) -> str:
    """Part of a completion's text as Markdown code in a table cell (an edge space made visible: Markdown would
    drop it)."""
    if not text:
        return ""
    shown = text_shown(text).replace("|", "\\|").replace("`", "ˋ")
    shown = ("␣" + shown[1:] if shown[0] == " " else shown)
    return "`" + (shown[:-1] + "␣" if shown[-1] == " " else shown) + "`"


def _text_section(explored: Explored) -> list[str]:
    """A cell signed on text: the shared prefix once, then each completion from the earliest split, the part
    from its own split on in bold."""
    start, out = explored.window_start, [f"### {summary(explored)}", "", f"{TEXT_SIGNED}.", ""]
    if explored.prefix:
        cut = "…" if start > len(explored.prefix) else ""
        out += [f"Shared by all up to character {start}: {cut}{_text_code(explored.prefix)}", ""]
    out += ["| completion | parts at character | from character | text |", "| --- | --- | --- | --- |"]
    for c in explored.completions:
        same, rest, more = text_parts(explored, c)
        text = _text_code(same) + (f"**▶{_text_code(rest)}**" if rest else "") + more
        out.append(f"| {c.name} ({c.requests}) | {'-' if c.split is None else c.split} | {c.text_start} | {text} |")
    return [*out, ""]


def explored_section(explored: Explored) -> list[str]:
    first = explored.completions[0]
    if explored.basis == "text":
        return [*_text_section(explored), *_who_and_notes(explored)]
    out = [f"### {summary(explored)}", ""]
    header = ["position", *(f"{c.name} ({c.requests})" for c in explored.completions)]
    out += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for at in window(explored):
        if at is None:
            out.append("| … |" + " |" * len(explored.completions))
            continue
        offset, position = at
        cells = []
        for c in explored.completions:
            text = _cell(c.tokens[offset] if offset < len(c.tokens) else None,
                         c.logprobs[offset] if offset < len(c.logprobs) else None)
            kind = mark(explored, c, offset, position)
            cells.append(f"**{text} {MARKS[kind]}**" if kind in MARKS else f"**{text}**" if kind else text)
        out.append(f"| {position} | " + " | ".join(cells) + " |")
    out.append("")
    out += [f"- **{c.name}**: {who(c)}" for c in explored.completions]
    out.append("")
    for c in explored.completions[1:]:
        for sentence, first_top, top in forks(explored, c):
            header = ["rank", f"{first.name}", "logprob", c.name, "logprob"]
            out += [sentence, "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
            out += [f"| {i + 1} | " + " | ".join([*_entry(first_top, top, i), *_entry(top, first_top, i)]) + " |"
                    for i in range(max(len(first_top), len(top)))]
            out.append("")
    return [*out, *_more_and_notes(explored)]


def _who_and_notes(explored: Explored) -> list[str]:
    return [*(f"- **{c.name}**: {who(c)}" for c in explored.completions), "", *_more_and_notes(explored)]


def more_branches(explored: Explored) -> str:
    """'2 more branches, 5 requests': what the explorer leaves out, in report.md, report.html and the terminal."""
    return (f"{counted(explored.more_branches, 'more branch', 'more branches')}, "
            f"{counted(explored.more_branch_requests, 'request')}")


def _more_and_notes(explored: Explored) -> list[str]:
    out = []
    if explored.more_branches:
        out += [f"{more_branches(explored)}, not shown "
                "(`study.explorer_branches`, `compare --branches`).", ""]
    out += [f"- {note}" for note in explored.notes]
    out = [*out, ""] if explored.notes else out
    if explored.inside is not None:
        lines = inside_lines(explored.inside)
        out += [f"**{SECTION}**: {lines[0]}", "", "```text", *lines[1:], "```", ""]
    return out


def section(result: Comparison) -> list[str]:
    if not result.explorer and not result.pair_explorer:
        return []
    out: list[str] = []
    if result.explorer:
        out += ["## Where it split", "",
                "Each cell with more than one signature: its modal completion and the other branches, aligned on "
                "the modal one (each token with its logprob), each split (and a later token flip) in bold with the "
                "top-k of both there, and who took each branch. `orchestrator show RUN --cell ARM/PROMPT/PHASE` "
                "prints the same in a terminal.", ""]
    for explored in result.explorer:
        out += explored_section(explored)
    if result.pair_explorer:
        out += ["## Where the arms split", "", "Each A/B pair that differs: the two arms' modal completions.", ""]
        for explored in result.pair_explorer:
            out += explored_section(explored)
    if result.explorer_left_out:
        out += [f"{result.explorer_left_out} more divergent cells or pairs are not explored here (the report's "
                "limit); `orchestrator show RUN` lists every cell that diverged.", ""]
    return out


def from_json(data: dict[str, Any]) -> Explored:
    """An explored cell back from report.json (for `show`); one written before the window could skip positions
    has its contiguous window's."""
    completions = [Completion(**{**c, "top_at_split": _entries(c["top_at_split"]),
                                 "first_top_at_split": _entries(c["first_top_at_split"]),
                                 "flip": _flip(c.get("flip")), "batches": [tuple(b) for b in c["batches"]]})
                   for c in data["completions"]]
    positions = data.get("window_positions") or list(range(
        data["window_start"], data["window_start"] + max((len(c.tokens) for c in completions), default=0)))
    inside = Located.from_json(data["inside"]) if data.get("inside") else None
    return Explored(**{**data, "completions": completions, "window_positions": positions, "inside": inside})


def _entries(entries: list[dict[str, Any]]) -> list[TopEntry]:
    return [TopEntry(**e) for e in entries]


def _flip(data: dict[str, Any] | None) -> Flip | None:
    return None if data is None else Flip(**{**data, "top": _entries(data["top"]),
                                             "first_top": _entries(data["first_top"])})
