"""Livestream app: sub-second answers to viewer questions from product fact sheets."""
