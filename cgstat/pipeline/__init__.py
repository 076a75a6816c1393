"""The pipeline: sampling ticks, rates, selection, records, state and diagnostics."""
