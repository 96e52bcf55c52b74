"""Third-party projects copied as test data for search quality (see README.md); nothing to import."""
