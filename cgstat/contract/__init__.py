"""The record contract: the field table (fields.py) every output is made from, and what is
generated from it (the JSON Schemas, the record types in types.py, the key constants in
keys.py: `python -m cgstat.contract.schema --write`), the event kinds, and the one rule for
what a workload is called (display.py)."""
