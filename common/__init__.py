"""Helpers with no domain knowledge that any rlide package may import (SQLite WAL set-up, HTTP
bearer auth, the model cache folder and its lock); it imports none of the project's packages."""
