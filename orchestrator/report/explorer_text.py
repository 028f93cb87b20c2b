"""`orchestrator show RUN --cell ARM/PROMPT/PHASE`: the explorer of one cell in the terminal, from report.json.
On a terminal: colours, and tables fitted to its width (rich); otherwise plain text, ASCII boxes, no escapes, and
what differs from the first completion marked `*` (the colours' stand-in). A cell signed on text: its completions'
characters from the split (the part from the split on marked `>>` without colours)."""

from __future__ import annotations

import io
import shutil
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.analysis.results import Explored
from orchestrator.report.explorer_md import (
    TEXT_SIGNED,
    forks,
    mark,
    more_branches,
    summary,
    text_parts,
    text_shown,
    token_text,
    who,
    window,
)
from orchestrator.report.locate import SECTION, inside_lines

if TYPE_CHECKING:
    from rich.console import Console

PLAIN_WIDTH = 120  # not a terminal: wide enough that a row of the token table stays on one line
MARKS = {"split": "<- split", "flip": "<- other token"}


def render(explored: Explored, terminal: bool | None = None) -> str:
    """The explorer as text for stdout: for a terminal (`terminal`; default: whether stdout is one) in colour at
    its width, else plain."""
    from rich.console import Console

    buffer = io.StringIO()
    if sys.stdout.isatty() if terminal is None else terminal:
        console = Console(file=buffer, highlight=False, soft_wrap=False, force_terminal=True,
                          width=shutil.get_terminal_size().columns)
    else:
        console = Console(file=buffer, highlight=False, width=PLAIN_WIDTH, no_color=True, color_system=None)
    _draw(explored, console)
    return buffer.getvalue().removesuffix("\n")


def _draw(explored: Explored, console: Console) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    frame = box.ROUNDED if console.is_terminal else box.ASCII
    console.print(Text(summary(explored), style="bold"))
    if explored.basis == "text":
        _text(explored, console, frame)
        return
    first, star = explored.completions[0], "" if console.is_terminal else "*"
    starred = False  # a `*` printed: say once what it means
    tokens = Table(box=frame, show_edge=True, pad_edge=False)
    tokens.add_column("pos", justify="right", style="dim")
    for c in explored.completions:
        tokens.add_column(f"{c.name} ({c.requests})", overflow="fold")
    for at in window(explored):
        if at is None:
            tokens.add_row("…", *("" for _ in explored.completions))
            continue
        offset, position = at
        row: list[Any] = [str(position)]
        for c in explored.completions:
            kind = mark(explored, c, offset, position)
            if offset >= len(c.tokens):
                row.append(Text(MARKS[kind], style="bold white on red") if kind in MARKS else "")
                continue
            token, logprob = c.tokens[offset], c.logprobs[offset] if offset < len(c.logprobs) else None
            text = f"{token_text(token)}  {logprob:.3g}" if logprob is not None else token_text(token)
            if kind in MARKS:
                row.append(Text(f"{text}  {MARKS[kind]}", style="bold white on red"))
            elif kind:
                row.append(Text(star + text, style="red"))
                starred = bool(star)
            else:
                row.append(Text(text, style="" if c is first else "dim"))
        tokens.add_row(*row)
    console.print(tokens)
    if starred:
        console.print(f"{star} another token than {first.name}'s")
    _who(explored, console)
    for c in explored.completions[1:]:
        for sentence, first_top, own in forks(explored, c):
            console.print(Text("\n" + sentence.replace("**", ""), style="yellow" if "near-tie" in sentence else ""))
            top = Table(box=frame, pad_edge=False)
            for name in ("#", first.name, "logprob", c.name, "logprob"):
                top.add_column(name, justify="right" if name in ("#", "logprob") else "left")
            differ = False
            for i in range(max(len(first_top), len(own))):
                cells: list[Any] = [str(i + 1)]
                same = i < len(own) and i < len(first_top) and own[i] == first_top[i]
                differ |= not same
                lead, style = ("", "") if same else (star, "red")
                for entries in (first_top, own):
                    cells += [Text(lead + token_text(entries[i].token), style=style),
                              Text(lead + f"{entries[i].logprob:.12g}", style=style)] if i < len(entries) \
                        else ["", ""]
                top.add_row(*cells)
            console.print(top)
            if star and differ:
                console.print(f"{star} differs from the other side at that rank")
    _more_and_notes(explored, console)


def _text(explored: Explored, console: Any, frame: Any) -> None:
    """Signed on text: the shared prefix once, then each completion from its window, from its split on in red
    (`>>` before it without colours)."""
    from rich.table import Table
    from rich.text import Text

    console.print(TEXT_SIGNED)
    if explored.prefix:
        cut = "…" if explored.window_start > len(explored.prefix) else ""
        console.print(f"shared by all up to character {explored.window_start}: {cut}{text_shown(explored.prefix)}",
                      markup=False)
    table = Table(box=frame, pad_edge=False)
    for name, justify in (("completion", "left"), ("parts at", "right"), ("from", "right"), ("text", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for c in explored.completions:
        same, rest, more = (text_shown(part) for part in text_parts(explored, c))
        mark = "" if console.is_terminal or not rest else ">>"
        text = Text.assemble((same, "" if c is explored.completions[0] else "dim"), mark,
                             (rest[:1], "bold white on red"), (rest[1:], "red"), more)
        table.add_row(f"{c.name} ({c.requests})", "-" if c.split is None else str(c.split), str(c.text_start), text)
    console.print(table)
    _who(explored, console)
    _more_and_notes(explored, console)


def _who(explored: Explored, console: Any) -> None:
    from rich.text import Text

    for c in explored.completions:
        console.print(Text.assemble((f"{c.name}: ", "bold"), who(c)))


def _more_and_notes(explored: Explored, console: Any) -> None:
    from rich.text import Text

    if explored.more_branches:
        console.print(f"{more_branches(explored)}, not shown (`compare --branches K` re-makes the report with more)")
    for note in explored.notes:
        console.print(Text(f"- {note}", style="bold"))
    if explored.inside is not None:
        lines = inside_lines(explored.inside)
        console.print(Text.assemble(("\n" + SECTION + ": ", "bold"), (lines[0], "bold")), soft_wrap=True)
        for line in lines[1:]:  # unwrapped: the probe's command line is copied as it is
            console.print(line, markup=False, highlight=False, soft_wrap=True)
