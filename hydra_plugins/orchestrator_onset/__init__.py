"""The onset sweeper (hydra/sweeper=onset): thin; its logic is orchestrator/sweep/onset*.py (docs/onset.md)."""
