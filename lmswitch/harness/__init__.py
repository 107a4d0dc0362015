"""Evaluation: datasets, scorers, the evaluation protocol, figures, the report and the shipped switches' build."""
