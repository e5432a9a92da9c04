"""The ground floor: errors, clock, configuration, the domain model, units, counters, logging.
Imports nothing first-party; every other floor may import it."""
