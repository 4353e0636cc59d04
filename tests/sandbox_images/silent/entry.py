"""silent: exit 0 without writing anything."""
