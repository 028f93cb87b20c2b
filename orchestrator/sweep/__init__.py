"""sweep: Hydra multirun. The callback that compares a sweep's jobs as arms and finds the
single-variable pairs, the check that parallel launchers do not share GPUs, and the onset sweeper's search
(analysis/onset.py decides its points); `claims`, a study run for what a claims file's claims lack.

May import: reproduce, run, report, analysis, record, config, runtime, console, errors, interrupts.
Third-party: Hydra, OmegaConf, submitit.
"""
