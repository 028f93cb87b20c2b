"""imports: other tools' output made into this project's record (`orchestrator import`, docs/import.md). A reader
per tool turns its files into `Evidence` (evidence.py: the answers, the arms, what the source lacks): detLLM's traces
and repro packs (detllm.py), a folder of raw OpenAI answers (openai_json.py), a position-parity evidence file as
ZC502's vllm-position-parity collector writes it (parity.py); sniff.py picks the kind; write.py writes the run dir
(the tables under their schemas, the source kept verbatim under RUN/imported/, the provenance in run.json).

May import: analysis, record, engines, errors.
"""
