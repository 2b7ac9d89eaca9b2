"""The one-process application: config schema and loading (`config`), the pipeline (`pipeline`), what a run
writes (`report`). Parts above it (deploy, collab, study, cli) build on these."""
