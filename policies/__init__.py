"""The brains of spotplane: pure, deterministic numpy/scipy. No Ray, no I/O, no clock."""
