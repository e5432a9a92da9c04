"""The API's routes, one router per resource (:mod:`serve.app` mounts them in this order)."""
