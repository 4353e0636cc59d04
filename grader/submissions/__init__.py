"""Submissions: archives, manifests, digests, and intake of ONNX encoders."""
