"""The leaderboard of a hosted competition: public/private parts, final choices, statistics, labels, web pages."""
