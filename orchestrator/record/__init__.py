"""record: a run on disk. `RunPaths` (every file of a run, atomic writes, paths.py), the Parquet tables
(explicit schemas, streaming writers, readers: tables.py) and a request's error kinds (failures.py).

May import: errors. Third-party: pyarrow.
"""
