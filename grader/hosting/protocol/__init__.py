"""What the server and its workers exchange: messages, shard messages and the format of a worker's data copy."""
