"""A load phase's default background (docs/load.md, `load.synthetic`): a seeded set of distinct prompts of random
words, each with its input length and its max_tokens drawn from a normal distribution of the set's mean and
spread (clipped at 1), as AIPerf's synthetic prompts (--synthetic-input-tokens-mean/-stddev,
--output-tokens-mean/-stddev). Input lengths are in words, a proxy for tokens of no stated ratio: the orchestrator
has no tokenizer of an arm's model (each answer's usage.prompt_tokens, recorded as `prompt_tokens`, is the count).
The output length is exact as a ceiling: max_tokens, which an answer may stop short of."""

from __future__ import annotations

import random
from dataclasses import dataclass

from orchestrator.config.schema import Config, PhaseKind, SyntheticConfig

SYNTHETIC = "synthetic"  # load.background: this set
STUDY = "study"  # load.background: the study's own prompts (as null)
DEFAULT_PROMPTS = 100  # AIPerf's --num-dataset-entries

# Common English words, drawn at random
WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "he", "for", "it", "with", "as", "his", "on", "be", "at", "by",
    "had", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were", "her", "all", "she",
    "there", "would", "their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if", "out", "so",
    "said", "what", "up", "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could",
    "time", "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our", "over", "man",
    "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years",
    "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how",
    "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get",
    "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last",
    "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take",
    "three", "small", "large", "house", "water", "place", "found", "study", "light", "city", "river", "tree",
    "road", "story", "song", "garden", "window", "morning", "evening", "market", "table", "letter", "paper",
    "music", "picture", "question", "answer", "number", "school",
)


@dataclass(frozen=True)
class SyntheticPrompt:
    text: str
    words: int
    max_tokens: int


def prompt_count(config: Config, synthetic: SyntheticConfig) -> int:
    """The set's distinct prompts: its own count, else 100 or the study's highest concurrency where higher."""
    return synthetic.prompts or max(DEFAULT_PROMPTS, highest_concurrency(config))


def highest_concurrency(config: Config) -> int:
    """The most requests any load phase of the study holds in flight at once, by its settings (0: none says)."""
    loads = [p.load for p in config.protocol.phases.values() if p.kind is PhaseKind.load]
    return max([c for load in loads for c in (load.concurrency, load.warmup.concurrency) if c], default=0)


def synthetic_prompts(synthetic: SyntheticConfig, count: int, seed: int) -> dict[str, SyntheticPrompt]:
    """Prompt id (s000, s001, ...) -> its prompt: the same for the same settings, count and seed, every run."""
    rng = random.Random(f"synthetic/{seed}")  # a str seed hashes the same in every process
    width, texts = len(str(count - 1)), set()
    prompts = {}
    for index in range(count):
        words = max(1, round(rng.gauss(synthetic.input_words_mean, synthetic.input_words_stddev)))
        max_tokens = max(1, round(rng.gauss(synthetic.output_tokens_mean, synthetic.output_tokens_stddev)))
        chosen = [rng.choice(WORDS) for _ in range(words)]
        while " ".join(chosen) in texts:  # distinct, even where few words allow few prompts
            chosen.append(rng.choice(WORDS))
        text = " ".join(chosen)
        texts.add(text)
        prompts[f"s{index:0{width}d}"] = SyntheticPrompt(text, len(chosen), max_tokens)
    return prompts


def led_text(lead: str, own: str) -> str:
    """A background request that reuses a prefix: the earlier prompt, then its own first words, so that its length
    is its own (or one word more than the prefix, where that is longer)."""
    lead_words, own_words = lead.split(" "), own.split(" ")
    return " ".join(lead_words + own_words[:max(1, len(own_words) - len(lead_words))])
