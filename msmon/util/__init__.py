"""Small helpers shared by the library core."""
