"""Subcommands of the ``spotplane`` CLI, one module per group."""
