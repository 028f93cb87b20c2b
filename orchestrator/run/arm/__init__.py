"""One arm's engine, start to stop: what its run passes around (launch.py), its image on its host (hosts.py),
its start, readiness, fingerprint, stop and `arms` row (lifecycle.py), its server's own facts (server_facts.py),
its memory peaks (resources.py), how it ended (exits.py), and its stop behind the next start (stop_behind.py)."""
