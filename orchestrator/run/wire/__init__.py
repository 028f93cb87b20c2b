"""The HTTP exchanges every sender uses: the httpx client and readiness wait (client.py), a batch released on
sockets of its own (release.py), and a failed send as data, its error kind (transport.py)."""
