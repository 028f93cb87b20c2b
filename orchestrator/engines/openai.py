"""Any OpenAI-compatible server the orchestrator knows nothing about: a user's own script, a patched fork run
by a launcher of its own, a mock, a recording server (docs/runtimes.md, "A server of your own").

Nothing is assumed: no knob listing, no fields added to a request, no log facts, no running-requests metric,
no flag that bounds capacity or logprobs, no module its interpreter must import. What such a server offers is
stated in its arm: `endpoint`, `served_model_name`, `request_extra`, `health_path`, `metrics_path`.
`engine_args` still become `--flag value` arguments after its command.
"""

from __future__ import annotations

from orchestrator.engines.profile import EngineProfile

PROFILE = EngineProfile(
    name="openai",
    description="an OpenAI-compatible server of your own (nothing assumed; its capabilities stated in the arm)",
)
