"""A served Hugging Face Transformers model whose flagged requests leave a digest of every leaf module's rows."""

__version__ = "0.1.0"
