"""analysis: everything computed from the record alone. Signatures, the cell-by-cell comparison,
position-resolved metrics, statistics with their bounds, answer quality, the gate.

May import: record, errors, numpy, pyarrow. Never: runtime, run, config, guard, report.
"""
