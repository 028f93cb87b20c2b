"""record: a run on disk. `RunPaths` (every file of a run, atomic writes, paths.py), the Parquet tables
(explicit schemas: schemas.py; streaming writers and readers: tables.py; filtered reads: reads.py), a request's
error kinds (failures.py), what a recorded identity is (identity.py), a run dir as one checked zip (bundle.py),
and a run dir read once as one typed `RecordedRun` (recorded.py).

May import: errors. Third-party: pyarrow.
"""
