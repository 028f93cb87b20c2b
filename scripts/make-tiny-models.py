#!/usr/bin/env python3
"""Make tiny random models for real-vLLM studies without a model hub, offline, in seconds.

DIR/tiny-llama (LlamaForCausalLM) and DIR/tiny-moe (Qwen3MoeForCausalLM, 8 experts, top-2) share one
byte-level BPE tokenizer trained on a synthetic corpus, with a ChatML chat template. DIR/small-llama (made only
when --models names it: 0.4 B parameters, hidden 2048, 8 layers, saved in bf16, 0.8 GB) is big enough to run
real GPU kernels (GQA attention with head_dim 128, 2048-wide GEMMs) and small enough to make on the GPU machine
itself. Everything follows
from --seed: the same seed gives byte-identical files. A model already made with the same seed is
skipped unless --force. Run it with the vLLM venv's python (transformers, tokenizers and torch are
there): scripts/build-vllm-cpu.sh does.

Usage: make-tiny-models.py [--out DIR] [--seed N] [--force] [--models NAME ...]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path

# Before transformers is imported: nothing here may reach the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VOCAB_SIZE = 1000
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Shapes shared by both models; head_dim 64 = 256 / 4 heads, 2 KV heads (GQA, as most served models).
COMMON = dict(
    hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    max_position_embeddings=2048, tie_word_embeddings=False,
)
# A few real words so that prompts such as "hello" tokenize into whole tokens.
SEED_WORDS = [
    "hello", "world", "the", "a", "an", "is", "are", "was", "of", "to", "in", "on", "and", "or", "not", "it",
    "this", "that", "what", "why", "how", "who", "you", "I", "we", "they", "model", "token", "answer",
    "question", "number", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "yes",
    "no", "please", "thank", "user", "assistant", "system", "test", "run", "study", "engine", "batch", "same",
    "different",
]


def log(msg: str) -> None:
    print(f"[tiny-models] {msg}", flush=True)


def default_out() -> Path:
    cache = os.environ.get("ORCHESTRATOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "orchestrator")
    return Path(cache) / "models"


def synthetic_corpus(seed: int, lines: int = 6000) -> list[str]:
    """Sentences of pseudo-words (Zipf-like frequencies), numbers and punctuation, all from the seed."""
    rng = random.Random(seed)
    onsets = ["", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "ch", "sh"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st"]
    words = list(SEED_WORDS)
    while len(words) < 800:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3)))
        if w not in words:
            words.append(w)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    out = []
    for _ in range(lines):
        ws = rng.choices(words, weights, k=rng.randint(4, 16))
        if rng.random() < 0.2:
            ws.insert(rng.randrange(len(ws)), str(rng.randint(0, 9999)))
        s = " ".join(ws)
        s = s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!", ","])
        if rng.random() < 0.15:
            s = f"{rng.choice(['user', 'assistant', 'system'])}: {s}"
        out.append(s)
    return out


def train_tokenizer(seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=[ENDOFTEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(synthetic_corpus(seed), trainer=trainer)
    return tok


def write_tokenizer(tok, path: Path) -> dict[str, int]:
    """tokenizer.json + tokenizer_config.json (with the chat template) + special_tokens_map.json."""
    tok.save(str(path / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in (ENDOFTEXT, IM_START, IM_END)}
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for t, i in ids.items()}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None, "eos_token": IM_END, "pad_token": ENDOFTEXT, "unk_token": None,
        "model_max_length": COMMON["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    dump_json(config, path / "tokenizer_config.json")
    dump_json({"eos_token": IM_END, "pad_token": ENDOFTEXT}, path / "special_tokens_map.json")
    return ids


def dump_json(obj: dict, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# The small model: a real GPU workload (16 query heads over 8 KV heads of 128, 5632-wide MLP), in bf16.
SMALL = dict(
    hidden_size=2048, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
    intermediate_size=5632, max_position_embeddings=8192, tie_word_embeddings=False,
)
MODELS = ("tiny-llama", "tiny-moe", "small-llama")
DEFAULT_MODELS = ("tiny-llama", "tiny-moe")


def build_model(name: str, vocab: int, ids: dict[str, int]):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    tokens = dict(vocab_size=vocab, bos_token_id=None, eos_token_id=ids[IM_END], pad_token_id=ids[ENDOFTEXT])
    if name == "tiny-llama":
        return LlamaForCausalLM(LlamaConfig(**COMMON, **tokens, intermediate_size=512))
    if name == "small-llama":
        return LlamaForCausalLM(LlamaConfig(**SMALL, **tokens))
    return Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **COMMON, **tokens, intermediate_size=512, moe_intermediate_size=128, num_experts=8,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]))


def make(name: str, out: Path, seed: int, tok) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    final, tmp = out / name, out / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ids = write_tokenizer(tok, tmp)
    # Each model's weights depend on the seed alone, not on what was built before it.
    torch.manual_seed(seed)
    dtype = torch.bfloat16 if name == "small-llama" else torch.float32
    model = build_model(name, tok.get_vocab_size(), ids).to(dtype).eval()
    model.save_pretrained(tmp, safe_serialization=True)
    # vLLM's default sampling params come from here: stop at <|im_end|> and <|endoftext|>, nothing else.
    dump_json({"eos_token_id": [ids[IM_END], ids[ENDOFTEXT]], "pad_token_id": ids[ENDOFTEXT]},
              tmp / "generation_config.json")
    params = sum(p.numel() for p in model.parameters())
    for f in tmp.iterdir():  # safetensors writes 0600; containers may read the mount as another user
        f.chmod(0o644)
    dump_json({"seed": seed, "generator": "scripts/make-tiny-models.py", "params": params},
              tmp / "tiny-model.json")  # written last: marks a complete model
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    digest = hashlib.sha256((final / "model.safetensors").read_bytes()).hexdigest()[:16]
    log(f"wrote {final}: {model.config.architectures[0]}, {params / 1e6:.2f} M params, "
        f"vocab {tok.get_vocab_size()}, seed {seed}, model.safetensors sha256 {digest}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=default_out(), help="models dir (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rebuild models already present")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(DEFAULT_MODELS),
                    help="which models (default: %(default)s)")
    args = ap.parse_args(argv)

    todo = []
    for name in args.models:
        try:
            stamp = json.loads((args.out / name / "tiny-model.json").read_text())
        except (OSError, ValueError):
            stamp = None
        if stamp and stamp.get("seed") == args.seed and not args.force:
            log(f"{args.out / name} present (seed {args.seed}), skipped")
        else:
            todo.append(name)
    if todo:
        tok = train_tokenizer(args.seed)
        for name in todo:
            make(name, args.out, args.seed, tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
