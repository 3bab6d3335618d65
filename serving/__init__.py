"""Serving: the FastAPI harness (REST + OpenAI-compatible API), sessions, budgets, metrics."""
