"""The world outside: fleet providers behind one protocol, catalogs, trace loading, artifacts."""
