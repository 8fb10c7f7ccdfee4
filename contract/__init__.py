"""The contract every part shares: measurement and field names, the sample point,
the throughput rule, the report's columns, how the command lines behave
(``contract.commandline``). It imports nothing of the project."""
