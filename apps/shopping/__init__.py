"""Shopping app: intent-to-item fulfilment over a catalog (world generator, constraints, configs)."""
