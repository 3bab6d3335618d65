"""Semantic IDs: item embeddings, residual quantisation, SID tokens, a prefix trie and constrained decoding (pure: knows no app)."""
