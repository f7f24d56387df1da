"""scaleprobe: measure and explain deep-learning training performance."""

__version__ = "0.1.0"
