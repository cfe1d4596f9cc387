"""Small helpers shared across trinity-rft."""
