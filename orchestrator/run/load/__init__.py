"""The load generator (docs/load.md): a load point's schedule (schedule.py), its keep-alive requests and their
exchanges (pool.py), its clock (clock.py), and one window sent (generator.py); send/load_window.py makes the
window's rows."""
