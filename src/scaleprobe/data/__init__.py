"""Datasets, transforms and the two input pipelines."""
