"""Outputs and views: sinks and formats that only format records."""
