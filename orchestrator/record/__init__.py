"""record: a run on disk. `RunPaths` (every file of a run, atomic writes) and the Parquet tables
(explicit schemas, streaming writers, readers).

May import: errors. Third-party: pyarrow.
"""
