"""Counters exposed at /metrics in Prometheus text format, under vLLM's metric names."""

from __future__ import annotations

import threading
from collections import Counter


class Metrics:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._lock = threading.Lock()
        self.running = 0
        self.waiting = 0
        self.success: Counter[str] = Counter()
        self.batch_sizes: Counter[int] = Counter()
        self.prompt_tokens = 0
        self.generation_tokens = 0

    def enqueue(self) -> None:
        with self._lock:
            self.waiting += 1

    def start_batch(self, size: int) -> None:
        with self._lock:
            self.waiting -= size
            self.running += size
            self.batch_sizes[size] += 1

    def finish(self, reason: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.running -= 1
            self.success[reason] += 1
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += completion_tokens

    def fail(self) -> None:
        with self._lock:
            self.running -= 1

    def render(self) -> str:
        m = f'model_name="{self.model_name}",engine="0"'
        with self._lock:
            lines = [
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{m}}} {self.running}",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{m}}} {self.waiting}",
                "# TYPE vllm:request_success_total counter",
            ]
            for reason in sorted(set(self.success) | {"length", "stop"}):
                lines.append(f'vllm:request_success_total{{{m},finished_reason="{reason}"}} {self.success[reason]}')
            lines += [
                "# TYPE vllm:prompt_tokens_total counter",
                f"vllm:prompt_tokens_total{{{m}}} {self.prompt_tokens}",
                "# TYPE vllm:generation_tokens_total counter",
                f"vllm:generation_tokens_total{{{m}}} {self.generation_tokens}",
                "# TYPE refengine:batch_size_total counter",
            ]
            for size in sorted(self.batch_sizes):
                lines.append(f'refengine:batch_size_total{{size="{size}"}} {self.batch_sizes[size]}')
            lines += [
                "# TYPE refengine:max_batch_size gauge",
                f"refengine:max_batch_size {max(self.batch_sizes, default=0)}",
            ]
        return "\n".join(lines) + "\n"
