"""The ``trinity`` command line."""
