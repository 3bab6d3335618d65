"""MovieLens-100k, imported from the recbole wheel into the Sidekick contracts."""
