"""guard: is an A/B really one variable? The declared check of the resolved configs, shared caches,
the knob listing (which flags and env names the engine in an image knows), the observed check of the
arms' fingerprints, the fingerprint itself (log facts, environment probe, matrix key), and the side-effect audit
(what else an A/B changed).

May import: record, config, runtime, engines, probes, errors. (The runtime through the `Runtime` protocol
it is handed; probes: the knob listings and the environment probe it ships.)
"""
