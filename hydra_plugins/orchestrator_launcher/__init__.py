"""Hydra finds launcher plugins only in the `hydra_plugins` namespace: the project's own are here, thin;
their logic is orchestrator/sweep/slurm.py."""
