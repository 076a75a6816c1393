"""Outputs and views: sinks and formats that only format records."""

# The exporter's default address, here so that the CLI can show it in --help without
# importing the HTTP server (sockets, gzip, threads) into every command.
DEFAULT_PORT = 17923
DEFAULT_LISTEN = "127.0.0.1:%d" % DEFAULT_PORT
