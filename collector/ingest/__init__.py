"""The write side: the InfluxDB v2 write API, its connections, and line protocol parsing."""
