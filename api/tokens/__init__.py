"""Tokens: listing, issuing and revoking teams' bearer tokens (the admin token's business)."""
