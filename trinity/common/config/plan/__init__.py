"""The types of a resolved run plan; :mod:`trinity.planner` builds them from a config."""
