"""triage: `orchestrator triage`, the seed's checks on one arm run as a procedure (docs/triage.md). steps.py: the
steps in order, each a study sized from the bound it must show; runner.py: a step's config written into its own
dir and run as `run` runs a study; observe.py: what its run dir says; state.py: triage.json, the steps done (a
triage resumes); procedure.py: the order, the budget, what an earlier step makes moot, each determinism switch of
the engine's profile as an A/B; inside.py: `locate` where variation remains, on an engine that records digests;
findings.py: the findings ranked; page.py: findings.md, .html, .json.

May import: sweep, report, guard, analysis, record, config, engines, errors.
"""
