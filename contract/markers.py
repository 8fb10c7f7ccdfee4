"""Markers every view shares: the row that adds up every host of an epoch.

Reports, JSON and the read API carry ``ALL_HOSTS`` as that row's host; people read it as
``ALL_HOSTS_LABEL`` where a table has room for words (the dashboard)."""

ALL_HOSTS = "*"
ALL_HOSTS_LABEL = "all hosts"
