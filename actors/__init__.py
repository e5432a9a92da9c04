"""Thin Ray actors: they own state and failure and delegate every decision to ``policies``."""
