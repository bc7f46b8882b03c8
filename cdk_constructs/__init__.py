"""Reusable L3 constructs. Not named constructs/: that would shadow the constructs library."""
