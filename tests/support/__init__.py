"""Test support: servers and helpers shared by the tests and the benches."""
