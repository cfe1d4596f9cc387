"""Models: the tiny offline model builder, inference engines and their placement."""
