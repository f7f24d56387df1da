"""Step timing, statistics and background monitors."""
