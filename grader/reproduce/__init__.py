"""``grader reproduce``: re-grade a signed report's submission and name what differs first."""
