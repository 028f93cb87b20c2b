"""A served Hugging Face Transformers model whose flagged requests leave a digest of their rows at every module
(containers as well as leaves; digests.py `Recorder`)."""

__version__ = "0.1.0"
