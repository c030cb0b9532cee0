"""The monitoring engine: a tiny training callback, an off-path writer, and pluggable backends."""
