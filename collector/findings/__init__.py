"""Findings: rules that detect typed evidence, and the words that say it."""
