"""What every epochscope server shares: connection limits, the refusal log."""
