"""spotplane's control plane: domain model, reconcile loop, durable store, clock, config, CLI."""

__version__ = "0.1.0"
