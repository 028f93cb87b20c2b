"""Declarative experiment orchestrator for LLM-serving reproducibility studies."""

__version__ = "0.1.0"
