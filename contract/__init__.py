"""The contract every part shares: measurement and field names, the sample point,
the throughput rule, the report's columns. It imports nothing of the project."""
