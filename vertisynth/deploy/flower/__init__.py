"""The Flower runtime (`pip install 'vertisynth[flower]'`; docs/network.md): the server role is a Flower ServerApp
that relays the parties' signed envelopes round by round (relay.py) and then builds the table (deploy/server.py);
each party is a ClientApp on its own SuperNode that runs the ordinary party steps on its own table (bridge.py).
Only serverapp.py and clientapp.py import flwr (and loopback.py, in the SuperNode, SuperLink and SuperExec processes
it starts for the tests: a shorter poll, warm app processes)."""
