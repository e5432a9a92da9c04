"""The Ray Serve HTTP API (FastAPI ingress): spotplane's only front door."""
