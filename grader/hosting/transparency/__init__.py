"""The transparency log on the server: its state folder files, its entries in the database, its events and reads."""
