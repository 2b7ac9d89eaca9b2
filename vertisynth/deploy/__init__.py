"""Cross-machine roles: each party on its own machine (`party`: keys, synth), the server (`server`), and the
alignment protocols across machines (`align`). They exchange message files only."""
