"""Test and bench support: synthetic stored runs, loopback servers, slow clients, a browser."""
