"""What each table of the record holds: its explicit Arrow schema, and the schema version every part is written
with (readers read older parts with nulls for newer columns and refuse newer ones: record/tables.py). docs/record.md
says what each column means."""

from __future__ import annotations

import pyarrow as pa

# 2: request_id, attempt, role (responses), attempt (arms); 3: probes' op columns, placement (arms);
# 4: probes' image_id; 5: load points (responses: scheduled_ns .. offered_rate_per_s, start; arms: start,
# model, memory peaks); 6: the digests table (per-module activation digests of flagged requests), arms'
# digests_note; 7: responses' error_kind, arms' engine (the one that answered); 8: responses' prefix_seen;
# 9: responses' cached_prompt_tokens.
# 10: probes' out_ptrs, contend, contend_matmuls and the tie probe's counts (tie_rows, set_ and order_differs_*);
#     the scripts table (`orchestrator probe --script`).
# Older parts read with nulls.
SCHEMA_VERSION = "10"

_TOP = pa.struct([("token", pa.string()), ("logprob", pa.float64())])
_PROMPT_TOP = pa.struct([("token_id", pa.int64()), ("token", pa.string()), ("logprob", pa.float64()),
                         ("rank", pa.int64())])

RESPONSES = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()),
    ("prompt_id", pa.string()), ("phase", pa.string()), ("phase_kind", pa.string()),
    ("batch_id", pa.int64()), ("repeat", pa.int64()), ("request_index", pa.int64()),
    ("cold", pa.bool_()),
    # arm/prompt/phase/batch/repeat: the same in a resumed run; `attempt` 0 first, +1 per re-send; `role`
    # cold (an arm's first request), measured, warmup. Cells use measured rows, latest attempt per request_id.
    ("request_id", pa.string()), ("attempt", pa.int64()), ("role", pa.string()),
    ("prompt_sha256", pa.string()), ("prompt_chars", pa.int64()), ("prompt_tokens", pa.int64()),
    ("request_json", pa.string()),
    ("response_body", pa.binary()),  # exactly the bytes received
    ("http_status", pa.int64()), ("error", pa.string()), ("error_kind", pa.string()),  # its kind: record/failures.py
    ("send_ns", pa.int64()), ("recv_ns", pa.int64()),
    ("batch_send_spread_ns", pa.int64()),  # concurrent: last send - first send of the batch
    ("batch_running_max", pa.int64()),  # concurrent: most running requests /metrics showed meanwhile
    # From servers that trace requests (the reference engine's `engine_trace`): when the request was complete
    # at the server (wall clock, ns) and the engine steps it ran in; per batch, the arrival spread there and
    # the most of the batch's requests that ran in one step. Null elsewhere (vLLM: /metrics above).
    ("server_arrival_ns", pa.int64()), ("server_first_step", pa.int64()), ("server_last_step", pa.int64()),
    ("batch_arrival_spread_ns", pa.int64()), ("batch_server_together", pa.int64()),
    ("completion_text", pa.string()), ("finish_reason", pa.string()), ("completion_tokens", pa.int64()),
    ("token_ids", pa.list_(pa.int64())), ("tokens", pa.list_(pa.string())),
    ("token_logprobs", pa.list_(pa.float64())),
    ("top_logprobs", pa.list_(pa.list_(_TOP))),
    ("top_gaps", pa.list_(pa.float64())),  # per generated position: top1 - top2 logprob
    # per generated position: how many top-logprob entries came back (fewer than asked: keys collapsed)
    ("top_logprobs_entries", pa.list_(pa.int64())),
    ("prompt_logprobs", pa.list_(pa.list_(_PROMPT_TOP))),  # null entry at position 0, as served
    ("sig_text", pa.string()), ("sig_token_ids", pa.string()),
    ("sig_top_logprobs", pa.string()), ("sig_logprob_vector", pa.string()),
    # Load phases (run/load/generator.py): when the schedule meant it to be sent (its send_ns is when it was: the pacing
    # error), the answer's first byte, and streamed: its first token chunk and the gaps between token chunks.
    ("scheduled_ns", pa.int64()), ("first_byte_ns", pa.int64()), ("streamed", pa.bool_()),
    ("first_token_ns", pa.int64()), ("inter_token_ns", pa.list_(pa.int64())),
    ("load_point", pa.string()),  # the load point's label ("poisson 8/s, at most 16 at once"); null elsewhere
    ("offered_rate_per_s", pa.float64()),  # its rate; null: a closed loop
    ("start", pa.int64()),  # study.starts: which start of the arm (0: the one that runs the protocol)
    ("prefix_seen", pa.bool_()),  # a load window's: its prompt's start was sent before in the window; null elsewhere
    # the engine's word: prompt tokens its prefix cache served (usage.prompt_tokens_details.cached_tokens); null:
    # it does not say
    ("cached_prompt_tokens", pa.int64()),
])

LOGS = pa.schema([
    ("run_id", pa.string()), ("arm", pa.string()), ("container_id", pa.string()),
    ("stream", pa.string()), ("seq", pa.int64()), ("timestamp", pa.string()), ("text", pa.string()),
])

ARMS = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()), ("config_json", pa.string()),
    ("image_ref", pa.string()), ("image_id", pa.string()), ("image_repo_digests", pa.list_(pa.string())),
    ("docker_run", pa.string()), ("env_json", pa.string()),  # secrets redacted
    ("container_id", pa.string()), ("fingerprint_json", pa.string()), ("matrix_key", pa.string()),
    ("start_ns", pa.int64()), ("ready_ns", pa.int64()), ("stop_ns", pa.int64()),
    ("exit_code", pa.int64()), ("status", pa.string()), ("error", pa.string()),
    ("attempt", pa.int64()),  # 0, then +1 each time `run --resume` starts the arm again; readers take the latest
    ("started_during", pa.string()),  # runtime.overlap_arm_starts: the arm whose sequential phases it started in
    # study.parallel_arms (run/placement.py): the engine it was placed on ("local" or its URL), its wave (arms of
    # one wave ran at the same time), its GPUs by index and UUID, its cores; null when arms ran one by one.
    ("placed_host", pa.string()), ("wave", pa.int64()), ("gpu_indices", pa.list_(pa.int64())),
    ("gpu_uuids", pa.list_(pa.string())), ("cpuset", pa.string()),
    ("start", pa.int64()),  # study.starts: 0 runs the protocol, 1.. only start, answer and stop
    ("model", pa.string()), ("model_revision", pa.string()),  # served; a hub revision or a folder's content hash
    # Peaks while the arm ran, sampled: its container's or process tree's memory, its GPUs' memory (bytes);
    # null where not observable, with why in memory_note
    ("peak_memory_bytes", pa.int64()), ("peak_gpu_memory_bytes", pa.int64()), ("memory_note", pa.string()),
    ("digests_note", pa.string()),  # flagged requests whose digests could not be fetched (null: none, or all were)
    ("engine", pa.string()),  # the engine that answered (a stand-in's: the reference engine); null before schema 7
])

# One row per kernel-probe cell (orchestrator/probes/gemm.py; docs/probes.md says what each column means).
PROBES = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("process", pa.int64()), ("image", pa.string()),
    ("image_id", pa.string()),  # what ran, as the arms table's image_id names an arm's: attribution matches on it
    ("torch", pa.string()), ("gpu", pa.string()), ("device", pa.string()),
    ("shape", pa.string()), ("op", pa.string()), ("arm", pa.string()), ("dtype", pa.string()),
    ("scale_layout", pa.string()), ("scale_values", pa.string()), ("scale_storage", pa.string()),
    ("kernel_layout", pa.string()), ("impl", pa.string()), ("negative_control", pa.bool_()),
    ("M", pa.int64()), ("N", pa.int64()), ("K", pa.int64()), ("seed", pa.int64()), ("mode", pa.string()),
    ("perturb_allocator", pa.bool_()), ("repeats", pa.int64()), ("distinct_digests", pa.int64()),
    ("divergent_repeats", pa.int64()), ("upper_bound_95", pa.float64()),
    ("first_digest", pa.string()), ("digests", pa.list_(pa.string())), ("out_ptrs_distinct", pa.int64()),
    ("hash_repeats", pa.int64()), ("hash_divergent", pa.int64()),
    ("processes_agree", pa.bool_()), ("process_digests", pa.list_(pa.string())),
    ("row0_ref_m", pa.int64()), ("row0_bits_equal_m1", pa.bool_()), ("row0_max_ulps_vs_m1", pa.float64()),
    ("row0_ulps_vs_float64", pa.float64()), ("max_ulps_vs_float64", pa.float64()),
    ("layout_ok", pa.bool_()), ("flagged", pa.bool_()), ("unsupported", pa.string()), ("note", pa.string()),
    ("device_loop_s", pa.float64()), ("device_compare_s", pa.float64()), ("hash_loop_s", pa.float64()),
    ("device_s_per_call", pa.float64()), ("hash_s_per_call", pa.float64()), ("speedup_per_call", pa.float64()),
    ("wall_s", pa.float64()),
    # ops probes (orchestrator/probes/ops.py): context tokens, the harness's controls, the preset's expectation
    ("context", pa.int64()), ("control", pa.string()), ("expect_invariant", pa.bool_()), ("params", pa.string()),
    ("out_ptrs", pa.list_(pa.int64())),  # each repeat's output address, the first call's first
    ("contend", pa.string()), ("contend_matmuls", pa.int64()),  # probes/contend.py: the kind, what the busy side ran
    # the top-k tie probe (orchestrator/probes/ops_ties.py): rows of the cell with a tie at the k-th value, rows
    # whose selected set / order differs across repeats, from the row selected alone, from the stable control
    ("tie_rows", pa.int64()), ("set_differs_repeats", pa.int64()), ("order_differs_repeats", pa.int64()),
    ("set_differs_alone", pa.int64()), ("order_differs_alone", pa.int64()), ("set_differs_stable", pa.int64()),
])

# One row per run of a user's script (`orchestrator probe --script`; run/script_probe.py), as it printed.
SCRIPTS = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("image", pa.string()), ("image_id", pa.string()),
    ("script", pa.string()), ("script_sha256", pa.string()), ("repeat", pa.int64()),
    ("exit_code", pa.int64()), ("wall_s", pa.float64()), ("stdout", pa.string()), ("stderr_tail", pa.string()),
    ("digest_names", pa.list_(pa.string())), ("digest_values", pa.list_(pa.string())),
    ("contend", pa.string()), ("contend_matmuls", pa.int64()),
])

# One row per (flagged request, engine step, leaf-module call): the engine's digest of the request's own rows
# (run/send/digests.py fetches them; docs/record.md says what each column means).
DIGESTS = pa.schema([
    ("study", pa.string()), ("run_id", pa.string()), ("arm", pa.string()),
    ("request_id", pa.string()), ("attempt", pa.int64()),  # the request's, as in responses
    ("engine_request_id", pa.string()),  # the answer's id (cmpl-...), as the engine's batches name it
    ("step", pa.int64()),  # 0: the prefill; k: the forward that produced token k + 1
    ("call", pa.int64()),  # the leaf-module call's index within the step, in forward order
    ("module", pa.string()), ("module_type", pa.string()),
    # the request's rows in the output's (flattened) leading dimension, and all of the batch's (a GEMM's M)
    ("rows_start", pa.int64()), ("rows_stop", pa.int64()), ("rows_total", pa.int64()),
    ("in_shape", pa.list_(pa.int64())), ("out_shape", pa.list_(pa.int64())),
    ("in_hash", pa.string()), ("in_sum", pa.float64()), ("in_absmax", pa.float64()),
    ("out_hash", pa.string()), ("out_sum", pa.float64()), ("out_absmax", pa.float64()),
    ("out_norm", pa.float64()), ("out_head", pa.list_(pa.float64())),
    # the step's batch: its size, the engine ids of its requests, the target request's context tokens
    ("batch_size", pa.int64()), ("batch_request_ids", pa.list_(pa.string())), ("context_tokens", pa.int64()),
])

SCHEMAS = {"responses": RESPONSES, "logs": LOGS, "arms": ARMS, "probes": PROBES, "digests": DIGESTS,
           "scripts": SCRIPTS}
