"""The read API over HTTP: ``collector report|runs|scaling|inference`` anywhere."""
