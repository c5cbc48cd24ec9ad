"""What the site and the server agree on: the wire format, the run context, the key ring,
failures and stops."""
