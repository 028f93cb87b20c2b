"""record: a run on disk. `RunPaths` (every file of a run, atomic writes) and the Parquet tables
(explicit schemas, streaming writers, readers), and a run dir read once as one typed `RecordedRun`
(record/recorded.py).

May import: errors. Third-party: pyarrow.
"""
