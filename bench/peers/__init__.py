"""Loopback peers that speak the platforms' protocols, for the connector tests and bench.bridges."""
