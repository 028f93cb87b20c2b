"""report: rendering. report.md, the self-contained report.html with plots, report.json, and the
sections for the guard and the kernel probes. Renders what the other stages return; computes nothing
of its own beyond layout.

May import: analysis, record, guard (its results), errors. Never: runtime, run.
"""
