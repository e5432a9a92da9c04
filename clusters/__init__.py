"""The world outside: one package per cloud (aws, gcp, ray, sim) behind one interface and a registry, catalogs, trace loading, artifacts."""
