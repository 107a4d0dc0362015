"""Serving many users: sessions, the switch library, the steered-vs-unsteered comparison."""
