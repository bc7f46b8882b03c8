"""Command line for the moments around a deploy."""
