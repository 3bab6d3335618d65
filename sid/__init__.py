"""Semantic IDs: embeddings -> residual quantisation -> SID tokens, a prefix trie, constrained decoding."""
