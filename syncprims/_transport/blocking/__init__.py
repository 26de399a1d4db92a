"""The blocking face's transport: its server and its fan-out."""
