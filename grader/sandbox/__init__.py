"""The Docker sandbox: hardened, network-less runs of untrusted images."""
