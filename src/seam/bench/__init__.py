"""Benchmarks (GPU): timing helpers and one script per op behind ``seam bench``."""
