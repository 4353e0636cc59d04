"""Intake: an upload admitted, checked and turned into a submission row; quotas and the words of every refusal."""
