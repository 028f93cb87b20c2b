"""How an engine that failed ended, in words for its arm's error: the signal that killed it, and whether the
kernel killed it for memory as far as the runtime tells."""

from __future__ import annotations

import signal
import time

from orchestrator.runtime.spec import Handle, Runtime

EXIT_WAIT_S = 2.0  # how long a failed arm's engine is given to exit, so that a signal that killed it is named


def killed(runtime: Runtime, handle: Handle, memory_limits: bool) -> str:
    """'; killed by signal 9 (SIGKILL), ...' (status 137) for an engine a signal ended (128 + N), with whether
    the kernel killed it for memory as far as the runtime tells; '' otherwise."""
    code, deadline = runtime.exit_code(handle), time.monotonic() + EXIT_WAIT_S
    while code is None and time.monotonic() < deadline:  # an engine seen dead may still be on its way out
        time.sleep(0.1)
        code = runtime.exit_code(handle)
    if code is None or not 128 < code < 128 + signal.NSIG:
        return ""
    number = code - 128
    try:
        words = f"; killed by signal {number} ({signal.Signals(number).name})"
    except ValueError:  # a real-time signal has no name
        words = f"; killed by signal {number}"
    if reason := runtime.exit_reason(handle):  # Docker: State.OOMKilled, with the limit
        return f"{words}, {reason}"
    if memory_limits:  # it would have said so (Docker)
        return f"{words}; Docker does not report it OOMKilled (not its memory limit)"
    return f"{words}; whether the kernel killed it for memory, a process's status does not tell (`dmesg` does)"
