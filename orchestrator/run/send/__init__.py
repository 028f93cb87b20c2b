"""The send path: the protocol's requests in their phases (protocol.py; exact-length prompts, prompt_length.py;
a later start's, starts.py), sent and recorded one row each (sender.py; a load phase's window, load_window.py,
through the load generator in load/), and the activation digests fetched after each phase (digests.py). The
exchanges themselves are wire/'s."""
