"""`python -m vertisynth`: the `vertisynth` command."""
from vertisynth.cli import main

main()
