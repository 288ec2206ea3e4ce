"""The price catalog over HTTP, and what is known unavailable right now."""
