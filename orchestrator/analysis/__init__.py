"""analysis: everything computed from the record alone. Signatures, the cell-by-cell comparison,
position-resolved metrics, statistics with their bounds, answer quality, the gate.

May import: record, engines, errors. Third-party: numpy, pyarrow; never httpx, Docker, subprocess, OmegaConf.
"""
