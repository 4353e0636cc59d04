"""The server's and workers' keys and secrets: host key, log key, blinding key, partition and session secrets, worker signing."""
