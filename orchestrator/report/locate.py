"""`orchestrator locate`'s answer as plain text: the first line says where the two requests first split inside the
model (or that their digests are identical), the lines after it the details. `inside_lines` is the explorer's
"Where inside the model" section (the terminal, report.md and report.html render the same lines); `section` the
report's and `show RUN`'s: each cell that ran beside others, its answer line and the command for the rest."""

from __future__ import annotations

from orchestrator.analysis.locate_results import BETWEEN, CellInside, Difference, Located, Margin, Side, TopTwo
from orchestrator.errors import counted, noun

SECTION = "Where inside the model"


def _step(step: int) -> str:
    return f"step {step} (prefill)" if step == 0 else f"step {step} (decode, token {step + 1})"


def _short(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def headline(located: Located) -> str:
    """The answer in one line."""
    diff = located.difference
    if diff is None:
        return (f"identical digests: {located.calls_compared} module calls in {located.steps_compared} steps "
                "compared, no difference")
    sizes = f"{_batches(diff)}, M {diff.a.rows_total} vs {diff.b.rows_total}"
    if diff.kind == BETWEEN:
        where = f"inside {diff.parent}" if diff.parent else "in the model's own forward"
        before = f"between {_short(diff.before)} and {_short(diff.module)}" if diff.before else \
            f"before {diff.module}, the step's first call"
        return (f"first split: {_step(diff.step)}, {where}, {before} (computation that is no module): "
                f"{_short(diff.module)}'s input differs, every earlier output identical; {sizes}")
    said = "input identical, output differs" if diff.input_recorded else "output differs (no input recorded)"
    return f"first split: {_step(diff.step)}, {diff.module} ({diff.module_type}): {said}; {sizes}"


def _batches(diff: Difference) -> str:
    """'batch 4 vs 1'; 'window of 4 vs 1' where the rows are the same (each request computed alone in its
    window); a packed row (continuous batching) said."""
    a, b = diff.a, diff.b
    if a.rows_total == b.rows_total and a.batch_size != b.batch_size:
        return f"window of {a.batch_size} vs {b.batch_size}"
    packed = " (packed in one row)" if a.packed or b.packed else ""
    return f"batch {a.batch_size} vs {b.batch_size}{packed}"


def _side(name: str, side: Side) -> str:
    engine = f", engine id {side.engine_request_id}" if side.engine_request_id else ""
    branch = f", its branch {counted(side.requests, 'request')}" if side.requests else ""
    return (f"  {name}: {side.request_id} (phase {side.phase}, {side.phase_kind or 'kind unknown'}{branch}{engine}; "
            f"digests of {side.steps} steps, {side.calls} calls)")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _difference(diff: Difference) -> list[str]:
    out = [f"at the split: {diff.module} ({diff.module_type}), call {diff.a.call} vs {diff.b.call} of "
           f"{_step(diff.step)}"]
    if diff.kind == BETWEEN:
        out.append(f"  the split is in {diff.parent or 'the model'}'s own code between "
                   f"{diff.before or 'the step start'} (output identical) and {diff.module} (input differs)")
    out += [f"  input shape {diff.a.in_shape} vs {diff.b.in_shape}, output shape {diff.a.out_shape} vs "
            f"{diff.b.out_shape}",
            f"  max-abs difference over the first output values: {_number(diff.max_abs_diff)}; relative difference"
            f" of sum {_number(diff.rel_sum)}, norm {_number(diff.rel_norm)}, abs-max {_number(diff.rel_absmax)}",
            f"  requests in the step's {_batches(diff)}; rows (M) {diff.a.rows_total} vs {diff.b.rows_total}, "
            f"the request's own {diff.a.own_rows} vs {diff.b.own_rows}; context {diff.a.context_tokens} vs "
            f"{diff.b.context_tokens} tokens"]
    return out


def _top(side: TopTwo) -> str:
    tops = ", ".join(f"{token!r} {logprob:.6g}" for token, logprob in side.top) or "no top-k"
    return f"token id {side.token_id} (top-2: {tops}; top1-top2 margin {_number(side.gap)})"


def _margin(margin: Margin | None) -> str:
    if margin is None:
        return "first flipped token: none (the two answers' token ids never differ)"
    return f"first flipped token: position {margin.position}: a took {_top(margin.a)}; b took {_top(margin.b)}"


def _walk(located: Located) -> str:
    steps = located.steps_compared
    said = f"walked {counted(located.calls_compared, 'module call')} in {counted(steps, 'step')}"
    if located.realigned_steps:
        named = ", ".join(map(str, located.realigned_steps[:8])) + (" ..." if len(located.realigned_steps) > 8 else "")
        said += (f"; {noun(len(located.realigned_steps), 'step')} {named} called other modules on each "
                 "side (another kernel or split): aligned by module name and occurrence")
        if located.one_sided_calls:
            said += f", {counted(located.one_sided_calls, 'call')} on one side only"
    else:
        said += ", call by call (the same modules in the same order)"
    if located.one_sided_steps:
        said += f"; {counted(located.one_sided_steps, 'step')} recorded on one side only (one answer is longer)"
    if located.mixed_calls:
        said += (f"; {counted(located.mixed_calls, 'call')} skipped: their rows mix "
                 "the batch's requests (MoE experts' "
                 "inputs, grouped by expert), so they hold no rows of the request's own")
    return said


def _probe(located: Located) -> list[str]:
    if located.difference is None:
        return []
    ask = located.probe
    if located.no_probe is not None:
        return [f"op probe: {located.no_probe}"]
    if ask is None:
        return ["op probe: none matches this module (the probes run GEMMs, RMSNorm and attention)"]
    shape = ", ".join(f"{k} {v}" for k, v in ask.shape.items())
    out = [f"op probe: {ask.op} at {shape}, over {'rows' if ask.op in ('gemm', 'rmsnorm') else 'sequences'} "
           f"{', '.join(map(str, ask.m))}:", f"  {ask.command}"]
    out += [f"  ({ask.note})"] if ask.note else []
    if located.verdict is not None:
        out.append(f"  on this machine: {located.verdict.said}" + (
            " (padded sequences: this can neither confirm nor refute the split on a packed row)" if ask.packed else ""))
    return out


def inside_lines(located: Located) -> list[str]:
    """The section's content, the answer first: what the terminal, report.md and report.html show."""
    out = [headline(located), f"pair: {located.pair}", _side("a", located.a), _side("b", located.b), _walk(located)]
    if located.difference is not None:
        out += _difference(located.difference)
    if located.look_inside is not None and located.difference is not None:
        out.append(f"look inside: the arm digested modules down to {located.difference.module}'s depth only: to "
                   f"name the module inside it, run the study again with {located.look_inside}")
    return [*out, _margin(located.margin), *_probe(located)]


def render(located: Located) -> str:
    """`orchestrator locate`'s stdout."""
    return "\n".join([*inside_lines(located)[:1], "", f"cell {located.label}", *inside_lines(located)[1:]])


def answer_line(cell: CellInside) -> str:
    """`locate`'s first line for the cell against its default pair, or why it has no pair."""
    return headline(cell.located) if cell.located is not None else f"no pair: {cell.refused}"


def section(cells: list[CellInside]) -> list[str]:
    """report.md's (and so report.html's) section; none for a run without digests."""
    if not cells:
        return []
    return [f"## {SECTION}", "", "Each cell that ran beside other requests, from the digests the engine recorded: "
            "the first module call where its request's rows differ from the same request's in its default pair "
            "(its two branches; one signature: a sequential request), as `orchestrator locate` says it first. The "
            "command gives the details: the shapes, the margin at the first flipped token, the op probe.", "",
            *(f"- `{cell.label}`: {answer_line(cell)}; details: `{cell.command}`" for cell in cells), ""]
