"""Our AIPerf profile export read by AIPerf's own code, run with the interpreter of a venv where AIPerf is
installed (tests/unit/test_aiperf_export.py; it imports only AIPerf and the standard library):

    ~/.cache/orchestrator/aiperf-venv/bin/python tests/aiperf_reader.py RUN/aiperf

It finds the run folders as `aiperf plot` does (ModeDetector), validates every record line with
MetricRecordInfo and the summary with JsonExportData (AIPerf's Pydantic models), loads each folder with the
plot's DataLoader, and recomputes the summary's latency stats from the records with AIPerf's own
`metric_result_from_array`. Prints one JSON object: folder -> what AIPerf read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from aiperf.common.models import MetricRecordInfo
from aiperf.common.models.export_models import JsonExportData
from aiperf.metrics.metric_dicts import metric_result_from_array
from aiperf.plot.core.data_loader import DataLoader
from aiperf.plot.core.mode_detector import ModeDetector


def read(folder: Path) -> dict[str, object]:
    records = [MetricRecordInfo.model_validate_json(line)
               for line in (folder / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    summary = JsonExportData.model_validate_json((folder / "profile_export_aiperf.json").read_text())
    run = DataLoader().load_run(folder)
    latencies = np.array([r.metrics["request_latency"].value for r in records if "request_latency" in r.metrics],
                         dtype=np.float64)
    again = metric_result_from_array("request_latency", "Request Latency", "ms", latencies.copy(),
                                     float(latencies.sum()))
    assert summary.request_latency is not None and summary.request_throughput is not None
    return {"records": len(records), "errors": sum(1 for r in records if r.error is not None),
            "loaded_rows": 0 if run.requests is None else len(run.requests),
            "schema_version": summary.schema_version,
            "request_throughput": summary.request_throughput.avg,
            "request_latency": summary.request_latency.model_dump(exclude_none=True),
            "request_latency_again": {k: getattr(again, k) for k in ("avg", "p1", "p50", "p90", "p99", "std",
                                                                      "min", "max", "count")},
            "time_to_first_token": (summary.time_to_first_token.model_dump(exclude_none=True)
                                    if summary.time_to_first_token else None),
            "loaded_latency_p50": run.aggregated["request_latency"]["p50"]}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    folders = ModeDetector().find_run_directories([root])
    print(json.dumps({str(folder.relative_to(root)): read(folder) for folder in sorted(folders)}))
