"""refengine: a tiny vLLM-shaped completion server whose nondeterminism is switchable and known."""

__version__ = "0.1.0"
