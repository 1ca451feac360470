"""Engines: the models and algorithms. They know nothing of HTTP or Ray."""
