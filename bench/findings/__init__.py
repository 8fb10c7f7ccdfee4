"""The findings measured like a classifier: a labelled matrix of real runs (issue 42)."""
