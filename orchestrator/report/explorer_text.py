"""`orchestrator show RUN --cell ARM/PROMPT/PHASE`: the explorer of one cell in the terminal, from report.json.
On a terminal: colours, and tables fitted to its width (rich); otherwise plain text, ASCII boxes, no escapes."""

from __future__ import annotations

from typing import IO, Any

from orchestrator.analysis.results import Explored
from orchestrator.report.explorer_md import gap_text, summary, token_text, who

PLAIN_WIDTH = 120  # not a terminal: wide enough that a row of the token table stays on one line


def render(explored: Explored, file: IO[str] | None = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=file, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(file=file, highlight=False, width=PLAIN_WIDTH, no_color=True, color_system=None)
    frame = box.ROUNDED if console.is_terminal else box.ASCII
    console.print(Text(summary(explored), style="bold"))
    first = explored.completions[0]
    tokens = Table(box=frame, show_edge=True, pad_edge=False)
    tokens.add_column("pos", justify="right", style="dim")
    for c in explored.completions:
        tokens.add_column(f"{c.name} ({c.requests})", overflow="fold")
    for offset in range(max(len(c.tokens) for c in explored.completions)):
        position = explored.window_start + offset
        row: list[Any] = [str(position)]
        for c in explored.completions:
            if offset >= len(c.tokens):
                row.append("")
                continue
            token, logprob = c.tokens[offset], c.logprobs[offset] if offset < len(c.logprobs) else None
            text = f"{token_text(token)}  {logprob:.3g}" if logprob is not None else token_text(token)
            if c.split == position:
                row.append(Text(f"{text}  <- split", style="bold white on red"))
            elif c is not first and (offset >= len(first.tokens) or token != first.tokens[offset]):
                row.append(Text(text, style="red"))
            else:
                row.append(Text(text, style="" if c is first else "dim"))
        tokens.add_row(*row)
    console.print(tokens)
    for c in explored.completions:
        console.print(Text.assemble((f"{c.name}: ", "bold"), who(c)))
    for c in explored.completions[1:]:
        if c.split is None:
            continue
        kind = "another token" if c.split_kind == "token" else "the same token, other top-k logprobs"
        console.print(Text(f"\nAt token {c.split}, {c.name} parts from {first.name} ({kind}); {first.name}'s "
                           + gap_text(c).replace("**", ""), style="yellow" if c.near_tie else ""))
        top = Table(box=frame, pad_edge=False)
        for name in ("#", first.name, "logprob", c.name, "logprob"):
            top.add_column(name, justify="right" if name in ("#", "logprob") else "left")
        for i in range(max(len(c.first_top_at_split), len(c.top_at_split))):
            cells: list[Any] = [str(i + 1)]
            for entries, others in ((c.first_top_at_split, c.top_at_split), (c.top_at_split, c.first_top_at_split)):
                same = i < len(others) and i < len(entries) and others[i] == entries[i]
                cells += [Text(token_text(entries[i].token), style="" if same else "red"),
                          Text(f"{entries[i].logprob:.12g}", style="" if same else "red")] if i < len(entries) \
                    else ["", ""]
            top.add_row(*cells)
        console.print(top)
    if explored.more_branches:
        console.print(f"{explored.more_branches} more branch(es), {explored.more_branch_requests} request(s), not "
                      "shown (`compare --branches K` re-makes the report with more)")
    for note in explored.notes:
        console.print(Text(f"- {note}", style="bold"))
