"""sweep: Hydra multirun. The callback that compares a sweep's jobs as arms and finds the
single-variable pairs, and the check that parallel launchers do not share GPUs.

May import: reproduce, run, report, record, config, runtime, console, errors, interrupts. Third-party: Hydra,
OmegaConf, submitit.
"""
