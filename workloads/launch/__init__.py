"""``workloads run``: checks, hosts, launching the ranks, the local collector-plus-agent."""
