"""The participant's side (client code, not the server): upload, retries, the rules a client reads, the reveal check."""
