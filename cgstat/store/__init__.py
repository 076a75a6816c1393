"""The flight recorder's store: every tick kept in a folder of compressed hourly shards,
found again by time (docs/store.md). codec.py makes a tick's lines into a small payload,
shard.py frames payloads into a shard file and its index, folder.py owns the folder,
writer.py and reader.py write and read a whole store, times.py reads the times users give.
"""
