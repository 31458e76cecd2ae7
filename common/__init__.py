"""Helpers that demo/ and servers/ both use. A leaf package: it imports nothing of ours, so either
side may depend on it without depending on the other."""
