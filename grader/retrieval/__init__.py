"""Dense retrieval: encoding texts with a submitted encoder, exact search with faiss."""
