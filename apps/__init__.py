"""Top layer: one folder per domain app (world generator, tools, rewards, configs) and the `sidekick` CLI."""
