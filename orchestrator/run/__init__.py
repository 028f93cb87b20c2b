"""run: executing a study. The arm lifecycle (arms.py: image, start, readiness, fingerprint, protocol,
stop), the protocol's phases (protocol.py), the httpx client (client.py), response parsing (parse.py),
the arms' runtime specs and the `plan` verb (plan.py), kernel probes in an arm's image
(kernel_probes.py). `execute.execute_study` is what the `run` and `reproduce` verbs call.

May import: report, guard, analysis, record, config, runtime, engines, probes, console, errors,
interrupts.
Third-party: httpx, pyarrow, rich, tenacity, OmegaConf.
"""
