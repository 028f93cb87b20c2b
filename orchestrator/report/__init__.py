"""report: the reports of a run. report.md, the self-contained report.html with plots, report.json, the
sections for the guard and the kernel probes, the headline sentences (headline.py), the outcome and exit
status (verdict.py), and `ls`/`show` (listing.py). Its figures come from analysis/; what it adds is words,
layout and the exit status.

May import: guard, analysis, record, config, engines, console, errors. (guard: its results; config: the
typed config a report names.) Third-party: rich, OmegaConf.
"""
