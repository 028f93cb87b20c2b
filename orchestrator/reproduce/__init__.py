"""reproduce: re-running someone's run dir. Its config loaded as untrusted, images pinned by id,
and the per-cell verdict against the original.

May import: run, analysis, record, config, runtime, console, errors. Third-party: Hydra, OmegaConf, numpy.
"""
