"""record: a run on disk. `RunPaths` (every file of a run, atomic writes) and the Parquet tables
(explicit schemas, streaming writers, readers); identity.py reads what a recorded identity is.

May import: errors. Third-party: pyarrow.
"""
