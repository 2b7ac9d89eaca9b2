# The vertisynth conformance kit: fixtures, --vertisynth-audit=smoke|standard|thorough, Hypothesis CI profile.
pytest_plugins = ["vertisynth.testing.plugin"]
