"""The gpujobs trainer: the program every job runs (`python -m trainer`)."""
