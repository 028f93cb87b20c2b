"""report: rendering. report.md, the self-contained report.html with plots, report.json, and the
sections for the guard and the kernel probes. Renders what the other stages return; computes nothing
of its own beyond layout.

May import: guard, analysis, record, config, engines, console, errors. (guard: its results; config: the
typed config a report names.) Third-party: rich, OmegaConf.
"""
