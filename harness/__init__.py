"""The agent harness shared by serving and RL: catalog and task contracts, protocol, tools, grounding."""
