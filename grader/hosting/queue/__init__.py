"""The queue: the submission lifecycle, dispatch (a wake-up, never the truth), replica rows and shard jobs."""
