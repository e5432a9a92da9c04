"""Maintenance scripts that are not part of the control plane (docs/mutation.md)."""
