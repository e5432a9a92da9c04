"""The world outside: fleet providers behind one interface, catalogs, trace loading, artifacts."""
