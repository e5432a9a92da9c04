"""The units and names every floor shares: time in seconds, the files of a state directory."""

from __future__ import annotations

HOUR = 3600.0  # seconds in an hour: control-plane time is in seconds, the papers' in hours
DAY = 24 * HOUR

DB_FILE = "spotplane.db"  # the store, in the state directory
SIMFLEET_DB = "simfleet.db"  # the simulated fleet's instances, beside the store
