"""Dashboard widgets, one a file; each renders data handed to it and fetches nothing itself."""
