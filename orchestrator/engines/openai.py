"""Any OpenAI-compatible server the orchestrator knows nothing about: a user's own script, a patched fork run
by a launcher of its own, a mock, a recording server (docs/runtimes.md, "A server of your own").

Nothing is assumed beyond the OpenAI API: its paths (/health, /v1/completions, /v1/chat/completions,
/v1/models), logprobs and streamed answers (`"stream": true`, server-sent events) as that API answers them
(a server that ignores `stream` answers one JSON body: it parses as such, with no time to first token; a
load phase's `stream: false` asks for none); no tokenize, version or metrics endpoint, no token ids,
no knob listing, no fields added to a request, no log facts, no neutral settings, no flag that bounds
logprobs, no module its interpreter must import. What such a server offers beyond that is stated in its arm:
`endpoint`, `served_model_name`, `request_extra`, `health_path`, `metrics_path`. `engine_args` still become
`--flag value` arguments after its command.
"""

from __future__ import annotations

from orchestrator.engines.profile import Capabilities, EngineProfile

PROFILE = EngineProfile(
    name="openai",
    description="an OpenAI-compatible server of your own (nothing assumed; its capabilities stated in the arm)",
    capabilities=Capabilities(logprobs=True, streaming=True),  # the OpenAI API's own
    port_flag=None, host_flag=None,  # its command line is its own
)
