"""What a load phase's traffic is made of, before anything runs (docs/load.md): its distinct prompts (the probes'
and the background's), the synthetic set's lengths and prefix share, for `plan`; and the warning of `check` and
`run` where a load point holds more requests in flight than it has distinct prompts (a prefix cache then serves
the traffic from prompts it has seen: a workload nobody runs)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.background import Background, phase_backgrounds, uses_study
from orchestrator.config.compose import resolve_prompts
from orchestrator.config.schema import Config, PhaseKind, SyntheticConfig
from orchestrator.config.synthetic import SYNTHETIC
from orchestrator.errors import FEW_PROMPTS


@dataclass(frozen=True)
class Workload:
    phase: str
    distinct_prompts: int  # the probes' and the background's texts, each once
    probes: int  # the study's prompts
    background: str  # "synthetic", "study", or the prompt set's name
    in_flight: int | None  # the most requests in flight by the settings: the concurrency (None: a rate alone)
    synthetic: SyntheticConfig | None  # the default background's settings

    def sentence(self) -> str:
        """`plan`'s line for the phase."""
        more = self.distinct_prompts - self.probes
        what = f"the study's {self.probes}, its background too" if self.background == "study" else \
            f"{self.probes} of the probes, {more} more of " + \
            ("the synthetic background" if self.synthetic else f"prompt set {self.background}")
        line = f"# load phase {self.phase}: {self.distinct_prompts} distinct prompts ({what})"
        if (s := self.synthetic) is not None:
            line += (f"; input {s.input_words_mean:g} words (sd {s.input_words_stddev:g}), max_tokens "
                     f"{s.output_tokens_mean:g} (sd {s.output_tokens_stddev:g}), {s.prefix_share:.0%} of the background"
                     " reusing a prefix sent before in its window")
        return line

    def thin(self) -> str | None:
        """The warning where fewer distinct prompts than requests in flight; None where enough."""
        if self.in_flight is None or self.distinct_prompts >= self.in_flight:
            return None
        return (f"load phase {self.phase}: {self.distinct_prompts} distinct prompts for {self.in_flight} requests in "
                f"flight: {FEW_PROMPTS}; set "
                f"protocol.phases.{self.phase}.load.background={SYNTHETIC} (the default, a varied set)")


def workloads(config: Config, backgrounds: dict[str, Background] | None = None) -> list[Workload]:
    """Each load phase's workload (`backgrounds`: phase_backgrounds(config), made here where not given)."""
    backgrounds = phase_backgrounds(config) if backgrounds is None else backgrounds
    texts = set(resolve_prompts(config.prompts, config.config_dirs).values())
    found = []
    for name, phase in config.protocol.phases.items():
        if phase.kind is not PhaseKind.load:
            continue
        load, own = phase.load, backgrounds.get(name)
        distinct = len(texts | set(own.texts.values())) if own and not uses_study(load) else len(texts)
        found.append(Workload(name, distinct, len(texts), "study" if uses_study(load) else str(load.background),
                              load.concurrency, load.synthetic if load.background == SYNTHETIC else None))
    return found


def warnings(config: Config) -> list[str]:
    """`check`'s and `run`'s warnings of the load phases with fewer distinct prompts than requests in flight."""
    return [line for w in workloads(config) if (line := w.thin()) is not None]
