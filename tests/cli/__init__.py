"""Tests of the ``trinity`` command line."""
