"""Who a caller is: participants, workers, tokens, authentication, the principal, rate limiting of failures."""
