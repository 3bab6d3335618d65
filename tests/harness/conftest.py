"""Harness tests use the scripted engine and chat tokenizer fixtures of tests/conftest.py."""
