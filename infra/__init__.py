"""The shared runtime: record I/O, settings, logging, manifests (later: Ray cluster, engines, weight transfer)."""
