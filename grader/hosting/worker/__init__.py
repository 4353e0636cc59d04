"""Workers: claim a job over the worker API, grade it in the Docker sandbox, post the result."""
