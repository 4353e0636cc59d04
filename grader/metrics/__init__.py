"""The metrics engine: trec_eval semantics, vectorised over all queries at once."""
