"""run: executing a study. The arm lifecycle (arms.py: image, start, readiness, fingerprint, protocol,
stop), the protocol's phases (protocol.py) and their sending and rows (sending.py), the httpx client
(client.py), batches released on their own sockets (release.py), the load generator (load*.py), a failed
send's kind (transport.py), the arms' runtime specs and the `plan` verb (plan.py), kernel probes in an arm's
image (kernel_probes.py). Answers are parsed by the arm's engine profile (engines/). `execute.execute_study`
is what the `run` and `reproduce` verbs call.

May import: report, guard, analysis, record, config, runtime, engines, probes, console, errors,
interrupts.
Third-party: httpx, pyarrow, rich, tenacity, OmegaConf.
"""
