"""run: executing a study. The study's arms in order or in waves (study.py, placement.py), each arm's engine
from image to stop (arm/), the protocol's requests sent and recorded (send/) through the HTTP exchanges (wire/)
and the load generator (load/); every refusal before anything starts (refusals.py), what the `run` and
`reproduce` verbs call (execute.py), the `plan` verb's rendering (plan.py, estimate.py), kernel probes in an
arm's image (kernel_probes.py), and the run's timings, progress and early imports (timings.py, progress.py,
prefetch.py). Answers are parsed by the arm's engine profile (engines/).

May import: report, guard, analysis, record, config, runtime, engines, probes, console, errors,
interrupts.
Third-party: httpx, pyarrow, rich, tenacity, OmegaConf.
"""
