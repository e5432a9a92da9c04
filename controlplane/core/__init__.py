"""The ground floor: errors, clock, configuration, the domain model, units, counters, logging.
Imports nothing outside itself; every other floor may import it."""
