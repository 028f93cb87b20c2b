"""reproduce: re-running someone's run dir. Its config loaded as untrusted, images pinned by id,
and the per-cell verdict against the original; a run handed on as one file, a bundle (bundle.py).

May import: run, analysis, record, config, runtime, console, errors. Third-party: Hydra, OmegaConf, numpy.
"""
